#include "engine/data/text.hpp"

#include <algorithm>
#include <cstring>

#include "engine/data/detail.hpp"

namespace tessera {

Tensor load_text_bytes(const std::filesystem::path& path) {
  auto file = data_detail::read_file(path, "load_text_bytes");
  if (file.bytes.empty()) throw file_error("load_text_bytes", path, "is empty");
  Tensor tokens = Tensor::empty(Shape{static_cast<std::int64_t>(file.bytes.size())}, DType::i32);
  std::copy(file.bytes.begin(), file.bytes.end(), tokens.data<std::int32_t>());
  return tokens;
}

Dataset text_windows(const Tensor& tokens, std::int64_t context, std::int64_t stride) {
  if (!tokens.defined() || tokens.rank() != 1 || tokens.dtype() != DType::i32)
    throw DataError("text_windows: tokens must be i32 [L], got " +
                    (tokens.defined() ? tokens.describe() : std::string("an undefined tensor")));
  if (tokens.device().kind != DeviceKind::cpu)
    throw DataError("text_windows: tokens must be on the CPU, got " + tokens.describe());
  if (stride == 0) stride = context;
  if (context <= 0 || stride <= 0)
    throw DataError("text_windows: context (" + std::to_string(context) + ") and stride (" +
                    std::to_string(stride) + ") must be positive");
  const std::int64_t length = tokens.numel();
  if (length < context + 1)
    throw DataError("text_windows: " + std::to_string(length) +
                    " tokens do not fill one window of " + std::to_string(context) +
                    " inputs and their next-token targets (" + std::to_string(context + 1) +
                    " tokens)");

  const std::int64_t windows = (length - context - 1) / stride + 1;
  Tensor inputs = Tensor::empty(Shape{windows, context}, DType::i32);
  Tensor targets = Tensor::empty(Shape{windows, context}, DType::i32);
  const std::int32_t* src = tokens.data<std::int32_t>();
  std::int32_t* in = inputs.data<std::int32_t>();
  std::int32_t* out = targets.data<std::int32_t>();
  const auto row_bytes = static_cast<std::size_t>(context) * sizeof(std::int32_t);
  for (std::int64_t i = 0; i < windows; ++i) {
    std::memcpy(in + i * context, src + i * stride, row_bytes);
    std::memcpy(out + i * context, src + i * stride + 1, row_bytes);
  }
  return Dataset{inputs, targets,
                 "text windows (context " + std::to_string(context) + ", stride " +
                     std::to_string(stride) + ") of " + std::to_string(length) + " tokens"};
}

}  // namespace tessera
