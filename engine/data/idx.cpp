#include "engine/data/idx.hpp"

#include <limits>

#include <fmt/format.h>

#include "engine/data/detail.hpp"

namespace tessera {
namespace {


constexpr std::uint32_t kImagesMagic = 0x00000803;  // u8, rank 3
constexpr std::uint32_t kLabelsMagic = 0x00000801;  // u8, rank 1
constexpr const char* kWhat = "load_idx";

// An IDX file's payload after checking its magic and its size against the
// header; `dims` receives the header's extents.
const std::uint8_t* check_idx(const data_detail::FileBytes& file, const std::filesystem::path& path,
                              std::uint32_t magic, const char* kind,
                              std::vector<std::uint64_t>& dims) {
  const std::size_t rank = magic & 0xff;
  const std::size_t header = 4 + 4 * rank;
  const std::size_t actual = file.bytes.size();
  const std::string bytes_kind = file.gzipped ? " bytes (after gunzip)" : " bytes";
  if (actual < 4)
    throw file_error(kWhat, path,
                     "too short for an IDX header (" + std::to_string(actual) + bytes_kind + ")");
  std::uint32_t found = load_be32(file.bytes.data());
  if (found != magic)
    throw file_error(
        kWhat, path,
        fmt::format("bad magic {:#010x}, expected {:#010x} (IDX {})", found, magic, kind));
  if (actual < header)
    throw file_error(kWhat, path,
                     "truncated header: expected at least " + std::to_string(header) + bytes_kind +
                         ", got " + std::to_string(actual));
  dims.clear();
  // Sizes are computed in u64 and checked for overflow, so a corrupt header
  // cannot wrap around to a size that happens to match.
  std::uint64_t expected = 1;
  bool overflow = false;
  for (std::size_t i = 0; i < rank; ++i) {
    std::uint64_t d = load_be32(file.bytes.data() + 4 + 4 * i);
    dims.push_back(d);
    if (d != 0 && expected > std::numeric_limits<std::uint64_t>::max() / d) overflow = true;
    expected *= d;
  }
  std::string extents;
  for (std::size_t i = 0; i < rank; ++i) extents += (i ? " x " : "") + std::to_string(dims[i]);
  if (overflow || expected + header != actual)
    throw file_error(
        kWhat, path,
        "size does not match its header (" + std::string(kind) + " " + extents + "): expected " +
            (overflow ? std::string("more than 2^64") : std::to_string(expected + header)) +
            bytes_kind + ", got " + std::to_string(actual));
  return file.bytes.data() + header;
}

}  // namespace

Tensor load_idx_images(const std::filesystem::path& images_path, float scale) {
  std::vector<std::uint64_t> image_dims;
  auto image_file = data_detail::read_file(images_path, kWhat);
  const std::uint8_t* pixels = check_idx(image_file, images_path, kImagesMagic, "images", image_dims);
  auto extent = [](std::uint64_t d) { return static_cast<std::int64_t>(d); };
  Tensor images = Tensor::empty(
      Shape{extent(image_dims[0]), extent(image_dims[1]), extent(image_dims[2])}, DType::f32);
  float* image_out = images.data<float>();
  for (std::int64_t i = 0, n = images.numel(); i < n; ++i)
    image_out[i] = static_cast<float>(pixels[i]) * scale;
  return images;
}

Dataset load_idx(const std::filesystem::path& images_path, const std::filesystem::path& labels_path, float scale) {
  Tensor images = load_idx_images(images_path, scale);
  std::vector<std::uint64_t> label_dims;
  auto label_file = data_detail::read_file(labels_path, kWhat);
  const std::uint8_t* values =
      check_idx(label_file, labels_path, kLabelsMagic, "labels", label_dims);
  if (static_cast<std::int64_t>(label_dims[0]) != images.shape()[0])
    throw DataError(std::string(kWhat) + ": '" + images_path.string() + "' holds " +
                    std::to_string(images.shape()[0]) + " images but '" + labels_path.string() +
                    "' holds " + std::to_string(label_dims[0]) + " labels");

  Tensor labels = Tensor::empty(Shape{static_cast<std::int64_t>(label_dims[0])}, DType::i32);
  std::int32_t* label_out = labels.data<std::int32_t>();
  for (std::int64_t i = 0, n = labels.numel(); i < n; ++i) label_out[i] = values[i];
  return Dataset{images, labels, images_path.string()};
}

}  // namespace tessera
