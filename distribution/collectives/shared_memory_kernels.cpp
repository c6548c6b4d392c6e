#include "distribution/collectives/shared_memory_kernels.hpp"

namespace tessera {

void SharedMemoryKernels::copy_strided(void* dst, const std::vector<std::int64_t>& dst_strides, const void* src,
                                       const std::vector<std::int64_t>& src_strides,
                                       const std::vector<std::int64_t>& dims,
                                       std::size_t element_size, bool stream) {
  for (std::int64_t d : dims)
    if (d == 0) return;
  // Merge the trailing dims that both sides store contiguously into one run.
  int k = static_cast<int>(dims.size()) - 1;
  std::int64_t run = 1;
  for (; k >= 0; --k) {
    const auto i = static_cast<std::size_t>(k);
    if (src_strides[i] != run || dst_strides[i] != run) break;
    run *= dims[i];
  }
  const std::size_t run_bytes = static_cast<std::size_t>(run) * element_size;
  auto* out = static_cast<std::byte*>(dst);
  const auto* in = static_cast<const std::byte*>(src);
  std::vector<std::int64_t> index(static_cast<std::size_t>(k + 1), 0);
  std::int64_t src_at = 0, dst_at = 0;
  for (;;) {
    void* d = out + static_cast<std::size_t>(dst_at) * element_size;
    copy(in + static_cast<std::size_t>(src_at) * element_size, std::span<void* const>(&d, 1), run_bytes, stream);
    int axis = k;
    for (; axis >= 0; --axis) {  // odometer over the outer dims
      const auto i = static_cast<std::size_t>(axis);
      src_at += src_strides[i];
      dst_at += dst_strides[i];
      if (++index[i] < dims[i]) break;
      src_at -= src_strides[i] * dims[i];
      dst_at -= dst_strides[i] * dims[i];
      index[i] = 0;
    }
    if (axis < 0) return;
  }
}

}  // namespace tessera
