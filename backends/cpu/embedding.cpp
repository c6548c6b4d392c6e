// Embedding gather and its scatter-add gradient: plain loops over rows.
#include <cstring>

#include "backends/cpu/parallel_for.hpp"
#include "backends/cpu/cpu_backend.hpp"

namespace tessera {
namespace {

// Reads the ids as i64 and checks each lies in [0, vocab) before any row moves.
std::vector<std::int64_t> checked_ids(const Tensor& ids, std::int64_t vocab, const char* op) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(ids.numel()));
  for (std::int64_t i = 0; i < ids.numel(); ++i) {
    std::int64_t id = ids.dtype() == DType::i32 ? ids.data<std::int32_t>()[i] : ids.data<std::int64_t>()[i];
    if (id < 0 || id >= vocab)
      throw ShapeError(std::string(op) + ": id " + std::to_string(id) + " at position " +
                       std::to_string(i) + " of ids" + ids.shape().str() +
                       " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    out[static_cast<std::size_t>(i)] = id;
  }
  return out;
}

}  // namespace

void CpuBackend::run_embedding(const Tensor& table, const Tensor& ids, const Tensor& out) {
  auto rows = checked_ids(ids, table.shape()[0], "embedding");
  std::size_t row_bytes = static_cast<std::size_t>(table.shape()[1]) * dtype_size(table.dtype());
  const char* src = static_cast<const char*>(table.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  KernelScope scope(threads());
  const auto n = static_cast<std::int64_t>(rows.size());
  parallel_for(n, n > 256, [&](std::int64_t i) {
    std::memcpy(dst + i * row_bytes, src + static_cast<std::size_t>(rows[i]) * row_bytes, row_bytes);
  });
}

void CpuBackend::run_embedding_block(const Tensor& table, const Tensor& ids, const Tensor& out, std::int64_t first_row,
                                     std::int64_t vocab) {
  auto rows = checked_ids(ids, vocab, "embedding_block");
  const std::int64_t block = table.shape()[0];
  std::size_t row_bytes = static_cast<std::size_t>(table.shape()[1]) * dtype_size(table.dtype());
  const char* src = static_cast<const char*>(table.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  KernelScope scope(threads());
  const auto n = static_cast<std::int64_t>(rows.size());
  parallel_for(n, n > 256, [&](std::int64_t i) {
    const std::int64_t local = rows[i] - first_row;
    if (local >= 0 && local < block)
      std::memcpy(dst + i * row_bytes, src + static_cast<std::size_t>(local) * row_bytes, row_bytes);
    else
      std::memset(dst + i * row_bytes, 0, row_bytes);  // another device's row: it adds it in
  });
}

void CpuBackend::run_one_hot(const Tensor& ids, const Tensor& out) {
  std::int64_t classes = out.shape()[out.rank() - 1];
  auto rows = checked_ids(ids, classes, "one_hot");
  fill(out, 0.0);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    auto at = static_cast<std::int64_t>(i) * classes + rows[i];
    if (out.dtype() == DType::f32)
      out.data<float>()[at] = 1.0f;
    else
      out.data<bf16>()[at] = to_bf16(1.0f);
  }
}

void CpuBackend::run_embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable) {
  if (dtable.dtype() != DType::f32)
    throw UnsupportedError("embedding_backward: dtable must be f32 on " + device().str() +
                           ", got " + dtable.describe());
  auto rows = checked_ids(ids, dtable.shape()[0], "embedding_backward");
  std::int64_t dim = dtable.shape()[1];
  const float* src = dout.data<float>();
  float* dst = dtable.data<float>();
  // Sequential over ids (two ids may name one row); vectorised over the row.
  for (std::size_t i = 0; i < rows.size(); ++i) {
    float* row = dst + rows[i] * dim;
    const float* g = src + static_cast<std::int64_t>(i) * dim;
    for (std::int64_t j = 0; j < dim; ++j) row[j] += g[j];
  }
}

}  // namespace tessera
