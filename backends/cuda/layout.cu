// The strided copy kernel (layout.hpp), instantiated per element size: the
// data-movement ops move opaque words, so one kernel serves every dtype.
#include "backends/cuda/layout_kernels.hpp"

#include <cstdint>

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/launch.hpp"

namespace tessera {
namespace {

template <typename Word, typename Index>
__global__ void strided_copy_kernel(const Word* src, Word* dst, StridedCopy copy) {
  for (std::int64_t i = first_index(); i < copy.count; i += grid_stride()) copy.operator()<Word, Index>(src, dst, i);
}

template <typename Word>
void launch(const void* src, void* dst, const StridedCopy& copy, const LaunchConfig& cfg,
            cudaStream_t stream) {
  const auto* from = static_cast<const Word*>(src);
  auto* to = static_cast<Word*>(dst);
  if (copy.narrow())
    strided_copy_kernel<Word, std::uint32_t><<<cfg.blocks, cfg.threads, 0, stream>>>(from, to, copy);
  else
    strided_copy_kernel<Word, std::int64_t><<<cfg.blocks, cfg.threads, 0, stream>>>(from, to, copy);
}

template <typename Word>
__global__ void cache_write_kernel(const Word* rows, const std::int32_t* positions, Word* cache, CacheWrite write) {
  for (std::int64_t i = first_index(); i < write.count; i += grid_stride()) write(rows, positions, cache, i);
}

template <typename Word>
void launch_cache_write(const void* rows, const std::int32_t* positions, void* cache, const CacheWrite& write,
                        const LaunchConfig& cfg, cudaStream_t stream) {
  cache_write_kernel<Word><<<cfg.blocks, cfg.threads, 0, stream>>>(static_cast<const Word*>(rows), positions,
                                                                    static_cast<Word*>(cache), write);
}

}  // namespace

void cuda_cache_write(const void* rows, const std::int32_t* positions, void* cache, int element_size,
                      const CacheWrite& write, cudaStream_t stream) {
  const LaunchConfig cfg = launch_config(write.count);
  if (cfg.blocks == 0) return;
  switch (element_size) {
    case 2: launch_cache_write<std::uint16_t>(rows, positions, cache, write, cfg, stream); break;
    case 4: launch_cache_write<std::uint32_t>(rows, positions, cache, write, cfg, stream); break;
    default: launch_cache_write<std::uint64_t>(rows, positions, cache, write, cfg, stream); break;
  }
  cuda_check(cudaGetLastError(), "cache_write_kernel<<<blocks, 256, 0, stream>>>", __FILE__, __LINE__);
}

void cuda_strided_copy(const void* src, void* dst, int element_size, const StridedCopy& copy,
                       cudaStream_t stream) {
  if (copy.count <= 0) return;
  StridedCopy wide;
  const bool aligned = reinterpret_cast<std::uintptr_t>(src) % sizeof(Words16) == 0 &&
                       reinterpret_cast<std::uintptr_t>(dst) % sizeof(Words16) == 0;
  if (aligned && element_size < static_cast<int>(sizeof(Words16)) &&
      widen_copy(copy, static_cast<std::int64_t>(sizeof(Words16)) / element_size, wide)) {
    launch<Words16>(src, dst, wide, launch_config(wide.count), stream);
    cuda_check(cudaGetLastError(), "strided_copy_kernel<Words16><<<blocks, 256, 0, stream>>>", __FILE__, __LINE__);
    return;
  }
  const LaunchConfig cfg = launch_config(copy.count);
  switch (element_size) {
    case 2: launch<std::uint16_t>(src, dst, copy, cfg, stream); break;
    case 4: launch<std::uint32_t>(src, dst, copy, cfg, stream); break;
    default: launch<std::uint64_t>(src, dst, copy, cfg, stream); break;
  }
  cuda_check(cudaGetLastError(), "strided_copy_kernel<<<blocks, 256, 0, stream>>>", __FILE__,
             __LINE__);
}

}  // namespace tessera
