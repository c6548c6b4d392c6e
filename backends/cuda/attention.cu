// The cached attention kernel (attention.hpp): a warp per query row, lane l
// scoring cache rows l, l + 32, ... into the warp's row of shared memory, the
// lanes' max and sum meeting in the shuffle tree, then each lane writing
// columns l, l + 32, ... of the result (coalesced reads of the values). No
// atomics: every run gives the same bits.
#include "backends/cuda/attention_kernels.hpp"

#include <cstdint>

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/launch.hpp"
#include "backends/cuda/warp_tree.hpp"

namespace tessera {
namespace {

constexpr int kWarp = kWarpLanes;
// Warps per block while their scores fit the 48 KiB of shared memory every
// kernel may use without asking.
constexpr int kMaxWarps = 4;
constexpr std::int64_t kDefaultSharedBytes = 48 * 1024;

// Warp w of the grid takes rows w, w + warps, ...: the bound is the same for
// the whole warp, so every lane reaches each shuffle. __syncwarp orders the
// lanes' writes of the scores before the others read them.
__global__ void cached_attention_kernel(const float* q, const float* keys, const float* values,
                                        const std::int32_t* positions, float* out, CachedAttentionRows a) {
  extern __shared__ float shared_scores[];
  float* scores = shared_scores + (threadIdx.x / kWarp) * a.capacity;
  const std::int64_t lane = threadIdx.x % kWarp, warps = grid_stride() / kWarp;
  for (std::int64_t row = first_index() / kWarp; row < a.rows; row += warps) {
    const std::int64_t n = a.valid(positions, row);
    const float max = warp_max(cached_attention_scores(q, keys, scores, a, row, n, lane, kWarp));
    __syncwarp();
    const float sum = warp_sum(cached_attention_exp(scores, n, max, lane, kWarp));
    __syncwarp();
    cached_attention_write(values, scores, out, a, row, n, sum, lane, kWarp);
    __syncwarp();  // before the next row's scores overwrite these
  }
}

}  // namespace

void cuda_cached_attention(const float* q, const float* keys, const float* values, const std::int32_t* positions,
                           float* out, const CachedAttentionRows& rows, cudaStream_t stream) {
  if (rows.rows == 0 || rows.width == 0) return;
  const std::int64_t row_bytes = rows.capacity * static_cast<std::int64_t>(sizeof(float));
  std::int64_t warps = kDefaultSharedBytes / (row_bytes > 0 ? row_bytes : 1);
  warps = warps < 1 ? 1 : warps > kMaxWarps ? kMaxWarps : warps;
  const std::int64_t bytes = warps * row_bytes;
  if (bytes > kDefaultSharedBytes)  // a context past 12288 rows: ask for more (fails past the GPU's limit)
    cuda_check(cudaFuncSetAttribute(cached_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(bytes)),
               "cudaFuncSetAttribute(cached_attention_kernel, MaxDynamicSharedMemorySize)", __FILE__, __LINE__);
  const std::int64_t wanted = (rows.rows + warps - 1) / warps;
  const int blocks = static_cast<int>(wanted < kLaunchMaxBlocks ? wanted : kLaunchMaxBlocks);
  cached_attention_kernel<<<blocks, static_cast<int>(warps) * kWarp, static_cast<std::size_t>(bytes), stream>>>(
      q, keys, values, positions, out, rows);
  cuda_check(cudaGetLastError(), "cached_attention_kernel<<<blocks, 32 * warps, scores, stream>>>", __FILE__,
             __LINE__);
}

}  // namespace tessera
