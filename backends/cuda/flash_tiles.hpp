// What FlashAttention's forward (flash_attention.cu) and backward
// (flash_attention_backward.cu) kernels share: blocks of 4 warps, each warp
// 16 rows of a 64-row tile, bf16 tiles in shared memory with padded rows,
// and the loads and stores between them and global memory.
#pragma once

#if defined(__CUDACC__)  // device code: included by the .cu files only
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/flash_attention.hpp"


namespace tessera::flash {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 4;
constexpr int kWarpRows = 16;                   // a warp's rows: one WMMA tile high
constexpr int kTileRows = kWarps * kWarpRows;   // 64 queries or keys a block
constexpr int kTileKeys = 64;                   // the other side's tile: 64 keys or queries
constexpr int kThreads = kWarps * 32;
constexpr int kScoreStride = kTileKeys + 4;     // f32 rows of a warp's 16 x 64 scores
constexpr int kWeightStride = kTileKeys + 8;    // bf16 rows of a warp's 16 x 64 weights

// A tile's bf16 row stride for heads of width K: 16 bytes of padding, so
// that WMMA's loads of 16 rows do not pile onto the same banks.
template <int K>
constexpr int head_stride() { return K + 8; }

// rows x K of a tile from `from` (rows `row_stride` apart; rows past `valid`
// as zeros) into `to` (bf16 rows `stride` apart), in 16-byte words: bf16 as
// it is, f32 rounded to bf16 as a cast would.
template <int K, typename In>
__device__ void load_rows(bf16* to, int stride, const In* from, std::int64_t row_stride, int rows,
                          std::int64_t valid) {
  constexpr int words_per_row = K / 8;
  for (int i = threadIdx.x; i < rows * words_per_row; i += kThreads) {
    const int r = i / words_per_row, c = i % words_per_row;
    uint4 word = make_uint4(0, 0, 0, 0);
    if (r < valid) {
      if constexpr (std::is_same_v<In, bf16>) {
        word = reinterpret_cast<const uint4*>(from + r * row_stride)[c];
      } else {
        const float4 low = reinterpret_cast<const float4*>(from + r * row_stride)[2 * c];
        const float4 high = reinterpret_cast<const float4*>(from + r * row_stride)[2 * c + 1];
        const __nv_bfloat162 packed[4] = {__floats2bfloat162_rn(low.x, low.y), __floats2bfloat162_rn(low.z, low.w),
                                          __floats2bfloat162_rn(high.x, high.y),
                                          __floats2bfloat162_rn(high.z, high.w)};
        word = *reinterpret_cast<const uint4*>(packed);
      }
    }
    reinterpret_cast<uint4*>(to + r * stride)[c] = word;
  }
}

// Whether a kernel is compiled for heads of `width` (32, 64, 128) and its
// Layout<width>::bytes of shared memory fit a block whose opt-in limit is
// `shared_limit` bytes.
template <template <int> class Layout>
bool width_fits(std::int64_t width, int shared_limit) {
  switch (width) {
    case 32: return Layout<32>::bytes <= shared_limit;
    case 64: return Layout<64>::bytes <= shared_limit;
    case 128: return Layout<128>::bytes <= shared_limit;
    default: return false;
  }
}

// The kernels' launchers pick their template arguments from run-time values
// with these: each calls `launch` with a tag whose type says the choice
// (generic lambdas: CUDA's C++17 has no template lambdas).
template <typename T>
struct Elements {
  using type = T;
};
// launch(Elements<float>{}) where `f32`, else launch(Elements<bf16>{}).
template <typename Launch>
void for_elements(bool f32, const Launch& launch) {
  if (f32)
    launch(Elements<float>{});
  else
    launch(Elements<bf16>{});
}
// launch(std::integral_constant<int, width>{}) for heads 32, 64 or 128 wide;
// nothing for others (the backend refuses them first).
template <typename Launch>
void for_width(std::int64_t width, const Launch& launch) {
  switch (width) {
    case 32: return launch(std::integral_constant<int, 32>{});
    case 64: return launch(std::integral_constant<int, 64>{});
    case 128: return launch(std::integral_constant<int, 128>{});
    default: return;
  }
}

// launch(width, in, out): the head width as for_width gives it, and the
// element tags of q (in) and of out as for_elements gives them.
template <typename Launch>
void for_kernel(bool in_f32, bool out_f32, std::int64_t width, const Launch& launch) {
  for_elements(in_f32, [&](auto in) {
    for_elements(out_f32, [&](auto out) { for_width(width, [&](auto k) { launch(k, in, out); }); });
  });
}

// Which head of which batch a block's index names, and where an operand's rows of it start.
struct HeadOf {
  std::int64_t head, b, h;
};
__device__ inline HeadOf head_of(std::int64_t index, const FlashAttentionShape& s) {
  return {index, index / s.heads, index % s.heads};
}
template <typename T>
__device__ T* at(const FlashOperand& o, const HeadOf& h) {
  return static_cast<T*>(o.data) + h.b * o.batch + h.h * o.head;
}

// How many tiles of `tile_keys` keys a block of `queries` queries from
// `first_query` on takes: every tile, or under a causal mask (query i sees
// keys 0 .. i + Tk - Tq) those up to its last query's last key.
__device__ inline int key_tiles_seen(const FlashAttentionShape& s, std::int64_t first_query, int queries,
                                     int tile_keys) {
  std::int64_t end = s.keys;
  if (s.causal && first_query + queries + s.keys - s.queries < end) end = first_query + queries + s.keys - s.queries;
  return end > 0 ? static_cast<int>((end + tile_keys - 1) / tile_keys) : 0;
}

// A forward kernel with `bytes` of shared memory, a block per `tile_queries`
// queries of each head.
template <typename Kernel>
void launch_forward(Kernel kernel, int bytes, int tile_queries, const FlashOperand& q, const FlashOperand& k,
                    const FlashOperand& v, const FlashOperand& out, float* logsumexp, const FlashAttentionShape& s,
                    cudaStream_t stream) {
  cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
             "cudaFuncSetAttribute(flash forward kernel, MaxDynamicSharedMemorySize)", __FILE__, __LINE__);
  const std::int64_t blocks = s.batches * s.heads * ((s.queries + tile_queries - 1) / tile_queries);
  kernel<<<static_cast<unsigned>(blocks), kThreads, bytes, stream>>>(q, k, v, out, logsumexp, s);
  cuda_check(cudaGetLastError(), "flash forward kernel<<<heads * query tiles, 128, shared, stream>>>", __FILE__,
             __LINE__);
}

// A backward pass's two kernels, each with `bytes` of shared memory: dq over
// tiles of 64 queries, then (it reads the delta dq wrote) dk and dv over tiles of 64 keys.
template <typename Dq, typename Dkv>
void launch_gradients(Dq dq_kernel, Dkv dkv_kernel, int bytes, const FlashOperand& q, const FlashOperand& k,
                      const FlashOperand& v, const FlashOperand& out, const FlashOperand& dout,
                      const float* logsumexp, float* delta, const FlashGradients& g, const FlashAttentionShape& s,
                      cudaStream_t stream) {
  const std::int64_t heads = s.batches * s.heads;
  if (s.queries > 0) {
    cuda_check(cudaFuncSetAttribute(dq_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
               "cudaFuncSetAttribute(dq kernel, MaxDynamicSharedMemorySize)", __FILE__, __LINE__);
    const std::int64_t blocks = heads * ((s.queries + kTileRows - 1) / kTileRows);
    dq_kernel<<<static_cast<unsigned>(blocks), kThreads, bytes, stream>>>(q, k, v, out, dout, logsumexp, delta, g.dq, s);
    cuda_check(cudaGetLastError(), "flash dq kernel<<<heads * query tiles, 128, shared, stream>>>", __FILE__, __LINE__);
  }
  if (s.keys > 0) {
    cuda_check(cudaFuncSetAttribute(dkv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
               "cudaFuncSetAttribute(dk, dv kernel, MaxDynamicSharedMemorySize)", __FILE__, __LINE__);
    const std::int64_t blocks = heads * ((s.keys + kTileRows - 1) / kTileRows);
    dkv_kernel<<<static_cast<unsigned>(blocks), kThreads, bytes, stream>>>(q, k, v, dout, logsumexp, delta, g.dk,
                                                                            g.dv, s);
    cuda_check(cudaGetLastError(), "flash dk, dv kernel<<<heads * key tiles, 128, shared, stream>>>", __FILE__,
               __LINE__);
  }
}

// As load_rows for bf16 rows, by cp.async (sm_80 on): the copies go on while
// the block computes, until wait_tiles. Rows past `valid` are zero-filled.
template <int K>
__device__ void load_rows_async(bf16* to, int stride, const bf16* from, std::int64_t row_stride, int rows,
                                std::int64_t valid) {
  constexpr int words_per_row = K / 8;
  for (int i = threadIdx.x; i < rows * words_per_row; i += kThreads) {
    const int r = i / words_per_row, c = i % words_per_row;
    const bool inside = r < valid;
    const bf16* source = inside ? from + r * row_stride + c * 8 : from;  // read nothing from it: 0 bytes
    const unsigned target = static_cast<unsigned>(__cvta_generic_to_shared(to + r * stride + c * 8));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(target), "l"(source), "r"(inside ? 16 : 0));
  }
}

// Ends the group of copies staged since the last one.
__device__ inline void commit_tiles() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most `kPending` groups of this thread's copies are in flight
// (then __syncthreads, and every thread's copies are visible).
template <int kPending>
__device__ inline void wait_tiles() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// The top of step `tile` of a loop over `tiles` double-buffered tiles (buffer
// tile % 2): tile + 1 starts loading into the other buffer, stage(tile + 1,
// buffer), which every warp finished with in the step before (that step ends
// in __syncthreads); then this step's tile is waited for.
template <typename Stage>
__device__ void next_tile(int tile, int tiles, const Stage& stage) {
  if (tile + 1 < tiles) stage(tile + 1, 1 - tile % 2);
  commit_tiles();
  wait_tiles<1>();
  __syncthreads();
}

// Two neighbouring elements in one store (`to` 8-byte aligned for f32, 4 for bf16).
__device__ inline void store_pair(float* to, float a, float b) { *reinterpret_cast<float2*>(to) = make_float2(a, b); }
__device__ inline void store_pair(bf16* to, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(to) = __floats2bfloat162_rn(a, b);
}
__device__ inline void store(float* to, float value) { *to = value; }
__device__ inline void store(bf16* to, float value) { *to = __float2bfloat16(value); }
__device__ inline float load(const float* from) { return *from; }
__device__ inline float load(const bf16* from) { return __bfloat162float(*from); }

}  // namespace tessera::flash
#endif
