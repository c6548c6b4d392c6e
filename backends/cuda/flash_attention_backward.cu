// FlashAttention's backward pass (Dao, 2023: FlashAttention-2) on tensor
// cores, in two kernels that recompute each tile's weights P = exp(scale *
// q k^T - logsumexp) from the forward pass's logsumexp instead of reading
// them, so no [Tq, Tk] matrix is ever in memory:
//   1. dq: a block of 4 warps takes 64 queries of one head; it first writes
//      each row's delta = dout . out (FlashAttention-2's D: the weights'
//      gradient through their normaliser), then, per tile of 64 keys, each
//      warp takes its 16 queries' scores and dP = dout v^T, dS = P (dP -
//      delta), and adds dS k to its dq rows (WMMA fragments held across tiles).
//   2. dk, dv: a block takes 64 keys; per tile of 64 queries each warp takes
//      its 16 keys' S^T and dP^T and adds P^T dout to dv and dS^T q to dk.
// The other side's tiles are double-buffered: tile t + 1 loads by cp.async
// while tile t is multiplied. Each block owns the rows it writes and adds in
// a fixed order: nothing is atomic, and every run gives the same bits
// (FlashAttention-2's dq is atomic).
// Products take bf16 operands (P and dS rounded to bf16) and sum in f32.
#include <math.h>
#include <mma.h>

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/flash_attention.hpp"
#include "backends/cuda/flash_tiles.hpp"
#include "backends/cuda/warp_tree.hpp"

namespace tessera {
namespace {

namespace wmma = nvcuda::wmma;
using namespace flash;

using FragmentA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragmentB = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragmentBt = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;  // a tile read transposed
using Accumulator = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// The byte offsets of a block's shared memory, for heads of width K: six
// 64-row bf16 tiles (two of the block's own rows, and twice two of the other
// side's: one pair is read while the next loads), a warp's 16 x 64 f32
// products and two more 16 x 64 matrices, and logsumexp and delta of twice
// 64 query rows. Once the tiles are done with, the first two (`staged`) hold
// each warp's 16 x K result in f32.
template <int K>
struct Shared {
  static constexpr int hs = head_stride<K>();
  static constexpr int tile_elements = kTileRows * hs;
  static constexpr int tiles = 0;  // six of tile_elements bf16
  static constexpr int products = tiles + 6 * tile_elements * 2;                 // per warp 16 x kScoreStride f32
  static constexpr int second = products + kWarps * kWarpRows * kScoreStride * 4;  // per warp, f32 (dq) or bf16 (dk, dv)
  static constexpr int third = second + kWarps * kWarpRows * kScoreStride * 4;     // per warp 16 x kWeightStride bf16
  static constexpr int rows = third + kWarps * kWarpRows * kWeightStride * 2;      // logsumexp[2][64], delta[2][64]
  static constexpr int bytes = rows + 4 * kTileRows * 4;
  static constexpr int staged_stride = K + 4;
  static_assert(kWarps * kWarpRows * staged_stride * 4 <= 2 * tile_elements * 2, "staging fits in two tiles");
};

// The block's shared memory as both kernels use it; the warp's own parts.
template <int K>
struct Memory {
  using L = Shared<K>;
  __device__ explicit Memory(unsigned char* shared)
      : own0(reinterpret_cast<bf16*>(shared + L::tiles)),
        own1(own0 + L::tile_elements),
        streamed0(own1 + L::tile_elements),
        streamed1(streamed0 + 2 * L::tile_elements),
        products(reinterpret_cast<float*>(shared + L::products) + warp() * kWarpRows * kScoreStride),
        second(shared + L::second + warp() * kWarpRows * kScoreStride * 4),
        dscores(reinterpret_cast<bf16*>(shared + L::third) + warp() * kWarpRows * kWeightStride),
        lse(reinterpret_cast<float*>(shared + L::rows)),
        deltas(lse + 2 * kTileRows),
        staged(reinterpret_cast<float*>(shared + L::tiles) + warp() * kWarpRows * L::staged_stride) {}
  static __device__ int warp() { return threadIdx.x / 32; }
  bf16 *own0, *own1;            // the block's 64 rows: q and dout (dq), k and v (dk, dv)
  bf16 *streamed0, *streamed1;  // two buffers each of the other side's tiles: k and v, or q and dout
  float* products;              // the warp's 16 x 64 f32 products
  unsigned char* second;        // the warp's second 16 x 64 matrix: f32 dP (dq) or bf16 P^T (dk, dv)
  bf16* dscores;                // the warp's 16 x 64 dS (or dS^T), bf16
  float *lse, *deltas;          // two buffers of 64 query rows' logsumexp and delta
  float* staged;                // the warp's 16 x K result, once the tiles are done with
};

// c = a (16 x K, rows `sa` apart) times b^T, b 64 x K (rows `sb` apart), as
// four 16 x 16 blocks stored in `to` (f32 rows kScoreStride apart).
template <int K>
__device__ void times_transposed(float* to, const bf16* a, int sa, const bf16* b, int sb) {
  for (int n = 0; n < kTileKeys / 16; ++n) {
    Accumulator c;
    wmma::fill_fragment(c, 0.0f);
    for (int i = 0; i < K / 16; ++i) {
      FragmentA x;
      FragmentBt y;
      wmma::load_matrix_sync(x, a + i * 16, sa);
      wmma::load_matrix_sync(y, b + n * 16 * sb + i * 16, sb);
      wmma::mma_sync(c, x, y, c);
    }
    wmma::store_matrix_sync(to + n * 16, c, kScoreStride, wmma::mem_row_major);
  }
}

// acc[n] += a (16 x 64 bf16, rows kWeightStride apart) times b (64 x K, rows `sb` apart).
template <int K>
__device__ void add_product(Accumulator (&acc)[K / 16], const bf16* a, const bf16* b, int sb) {
  for (int n = 0; n < K / 16; ++n)
    for (int i = 0; i < kTileKeys / 16; ++i) {
      FragmentA x;
      FragmentB y;
      wmma::load_matrix_sync(x, a + i * 16, kWeightStride);
      wmma::load_matrix_sync(y, b + i * 16 * sb + n * 16, sb);
      wmma::mma_sync(acc[n], x, y, acc[n]);
    }
}

// A warp's 16 x K result, staged in shared memory, times `factor` into rows
// first .. first + 15 (those before `count`) of `to`.
template <int K, typename Out>
__device__ void write_rows(Out* to, std::int64_t row_stride, Accumulator (&acc)[K / 16], float* staged,
                           std::int64_t first, std::int64_t count, float factor) {
  const int lane = threadIdx.x % 32;
  for (int n = 0; n < K / 16; ++n)
    wmma::store_matrix_sync(staged + n * 16, acc[n], Shared<K>::staged_stride, wmma::mem_row_major);
  __syncwarp();
  for (int r = 0; r < kWarpRows && first + r < count; ++r)
    for (int c = lane; c < K; c += 32)
      store(to + (first + r) * row_stride + c, staged[r * Shared<K>::staged_stride + c] * factor);
  __syncwarp();
}

template <int K, typename Out>
__global__ void __launch_bounds__(kThreads)
    flash_dq_kernel(FlashOperand q, FlashOperand k, FlashOperand v, FlashOperand out, FlashOperand dout,
                    const float* logsumexp, float* delta, FlashOperand dq, FlashAttentionShape s) {
  extern __shared__ __align__(128) unsigned char shared[];
  using L = Shared<K>;
  const Memory<K> m(shared);
  bf16 *qs = m.own0, *dos = m.own1, *dscores = m.dscores;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* scores = m.products;
  float* dweights = reinterpret_cast<float*>(m.second);
  float* lse = m.lse + warp * kWarpRows;  // this warp's rows only (one buffer)
  float* deltas = m.deltas + warp * kWarpRows;

  // The last query tiles first: under a causal mask they have the most keys.
  const std::int64_t tiles = (s.queries + kTileRows - 1) / kTileRows;
  const HeadOf head = head_of(blockIdx.x / tiles, s);
  const std::int64_t first_query = (tiles - 1 - blockIdx.x % tiles) * kTileRows;
  const std::int64_t warp_query = first_query + warp * kWarpRows;
  const Out* oh = at<const Out>(out, head);
  const bf16* kh = at<const bf16>(k, head);
  const bf16* vh = at<const bf16>(v, head);

  load_rows<K>(qs, L::hs, at<const bf16>(q, head) + first_query * q.row, q.row, kTileRows, s.queries - first_query);
  load_rows<K>(dos, L::hs, at<const bf16>(dout, head) + first_query * dout.row, dout.row, kTileRows,
               s.queries - first_query);
  __syncthreads();
  const bf16* my_dout = dos + warp * kWarpRows * L::hs;
  for (int r = 0; r < kWarpRows; ++r) {
    const std::int64_t query = warp_query + r;
    float partial = 0.0f;
    if (query < s.queries)
      for (int c = lane; c < K; c += 32) partial += __bfloat162float(my_dout[r * L::hs + c]) * load(oh + query * out.row + c);
    const float d = warp_sum(partial);
    if (lane == 0) {
      deltas[r] = d;
      lse[r] = query < s.queries ? logsumexp[head.head * s.queries + query] : 0.0f;
      if (query < s.queries) delta[head.head * s.queries + query] = d;
    }
  }
  __syncwarp();

  Accumulator grad[K / 16];
  for (int n = 0; n < K / 16; ++n) wmma::fill_fragment(grad[n], 0.0f);
  const std::int64_t shift = s.keys - s.queries;  // causal: query i sees keys 0 .. i + shift
  std::int64_t end = s.keys;
  if (s.causal && first_query + kTileRows + shift < end) end = first_query + kTileRows + shift;
  // Tile t + 1 of keys and values loads (cp.async) while tile t is multiplied.
  auto stage = [&](std::int64_t first_key, int buffer) {
    load_rows_async<K>(m.streamed0 + buffer * L::tile_elements, L::hs, kh + first_key * k.row, k.row, kTileKeys,
                       s.keys - first_key);
    load_rows_async<K>(m.streamed1 + buffer * L::tile_elements, L::hs, vh + first_key * v.row, v.row, kTileKeys,
                       s.keys - first_key);
    commit_tiles();
  };
  if (end > 0) stage(0, 0);
  int buffer = 0;
  for (std::int64_t first_key = 0; first_key < end; first_key += kTileKeys, buffer ^= 1) {
    if (first_key + kTileKeys < end) {
      stage(first_key + kTileKeys, buffer ^ 1);
      wait_tiles<1>();
    } else {
      wait_tiles<0>();
    }
    __syncthreads();  // this tile is in for every warp
    const bf16* ks = m.streamed0 + buffer * L::tile_elements;
    const bf16* vs = m.streamed1 + buffer * L::tile_elements;
    times_transposed<K>(scores, qs + warp * kWarpRows * L::hs, L::hs, ks, L::hs);  // q k^T
    times_transposed<K>(dweights, my_dout, L::hs, vs, L::hs);                      // dP = dout v^T
    __syncwarp();
#pragma unroll
    for (int r = 0; r < kWarpRows; ++r) {
      const std::int64_t query = warp_query + r;
      const std::int64_t last_seen = s.causal ? query + shift : s.keys - 1;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int col = lane + 32 * half;
        const std::int64_t key = first_key + col;
        const bool seen = query < s.queries && key < s.keys && key <= last_seen;
        const float p = seen ? __expf(scores[r * kScoreStride + col] * s.scale - lse[r]) : 0.0f;
        dscores[r * kWeightStride + col] = __float2bfloat16(p * (dweights[r * kScoreStride + col] - deltas[r]));
      }
    }
    __syncwarp();
    add_product<K>(grad, dscores, ks, L::hs);  // dq += dS k
    __syncthreads();  // every warp is done with this tile's buffers before they load again
  }
  __syncthreads();  // the tiles are done with: they stage the result
  write_rows<K>(at<Out>(dq, head), dq.row, grad, m.staged, warp_query, s.queries, s.scale);
}

template <int K, typename Out>
__global__ void __launch_bounds__(kThreads)
    flash_dkv_kernel(FlashOperand q, FlashOperand k, FlashOperand v, FlashOperand dout, const float* logsumexp,
                     const float* delta, FlashOperand dk, FlashOperand dv, FlashAttentionShape s) {
  extern __shared__ __align__(128) unsigned char shared[];
  using L = Shared<K>;
  const Memory<K> m(shared);
  bf16 *ks = m.own0, *vs = m.own1, *dscores = m.dscores;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* products = m.products;
  bf16* weights = reinterpret_cast<bf16*>(m.second);

  const std::int64_t tiles = (s.keys + kTileRows - 1) / kTileRows;
  const HeadOf head = head_of(blockIdx.x / tiles, s);
  const std::int64_t first_key = (blockIdx.x % tiles) * kTileRows;
  const std::int64_t warp_key = first_key + warp * kWarpRows;
  const bf16* qh = at<const bf16>(q, head);
  const bf16* doh = at<const bf16>(dout, head);
  load_rows<K>(ks, L::hs, at<const bf16>(k, head) + first_key * k.row, k.row, kTileRows, s.keys - first_key);
  load_rows<K>(vs, L::hs, at<const bf16>(v, head) + first_key * v.row, v.row, kTileRows, s.keys - first_key);

  Accumulator dk_sum[K / 16], dv_sum[K / 16];
  for (int n = 0; n < K / 16; ++n) {
    wmma::fill_fragment(dk_sum[n], 0.0f);
    wmma::fill_fragment(dv_sum[n], 0.0f);
  }
  const std::int64_t shift = s.keys - s.queries;  // causal: query i sees key j where j <= i + shift
  std::int64_t start = 0;
  if (s.causal && first_key - shift > 0) start = (first_key - shift) / kTileKeys * kTileKeys;
  // Tile t + 1 of queries, dout, logsumexp and delta loads while tile t is multiplied.
  auto stage = [&](std::int64_t first_query, int buffer) {
    load_rows_async<K>(m.streamed0 + buffer * L::tile_elements, L::hs, qh + first_query * q.row, q.row, kTileKeys,
                       s.queries - first_query);
    load_rows_async<K>(m.streamed1 + buffer * L::tile_elements, L::hs, doh + first_query * dout.row, dout.row,
                       kTileKeys, s.queries - first_query);
    commit_tiles();
    for (int i = threadIdx.x; i < kTileKeys; i += kThreads) {
      const std::int64_t query = first_query + i;
      m.lse[buffer * kTileKeys + i] = query < s.queries ? logsumexp[head.head * s.queries + query] : 0.0f;
      m.deltas[buffer * kTileKeys + i] = query < s.queries ? delta[head.head * s.queries + query] : 0.0f;
    }
  };
  if (start < s.queries) stage(start, 0);
  int buffer = 0;
  for (std::int64_t first_query = start; first_query < s.queries; first_query += kTileKeys, buffer ^= 1) {
    if (first_query + kTileKeys < s.queries) {
      stage(first_query + kTileKeys, buffer ^ 1);
      wait_tiles<1>();
    } else {
      wait_tiles<0>();
    }
    __syncthreads();  // this tile is in for every warp (and the block's own keys and values, the first time)
    const bf16* qs = m.streamed0 + buffer * L::tile_elements;
    const bf16* dos = m.streamed1 + buffer * L::tile_elements;
    const float* lse = m.lse + buffer * kTileKeys;
    const float* deltas = m.deltas + buffer * kTileKeys;
    times_transposed<K>(products, ks + warp * kWarpRows * L::hs, L::hs, qs, L::hs);  // S^T = k q^T
    __syncwarp();
    float p[kWarpRows][2];
#pragma unroll
    for (int r = 0; r < kWarpRows; ++r) {
      const std::int64_t key = warp_key + r;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int col = lane + 32 * half;
        const std::int64_t query = first_query + col;
        const bool seen = query < s.queries && key < s.keys && (!s.causal || key <= query + shift);
        p[r][half] = seen ? __expf(products[r * kScoreStride + col] * s.scale - lse[col]) : 0.0f;
        weights[r * kWeightStride + col] = __float2bfloat16(p[r][half]);
      }
    }
    __syncwarp();
    times_transposed<K>(products, vs + warp * kWarpRows * L::hs, L::hs, dos, L::hs);  // dP^T = v dout^T
    __syncwarp();
#pragma unroll
    for (int r = 0; r < kWarpRows; ++r)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int col = lane + 32 * half;
        dscores[r * kWeightStride + col] = __float2bfloat16(p[r][half] * (products[r * kScoreStride + col] - deltas[col]));
      }
    __syncwarp();
    add_product<K>(dv_sum, weights, dos, L::hs);  // dv += P^T dout
    add_product<K>(dk_sum, dscores, qs, L::hs);   // dk += dS^T q
    __syncthreads();  // every warp is done with this tile's buffers before they load again
  }
  __syncthreads();  // the tiles are done with: they stage the results
  write_rows<K>(at<Out>(dv, head), dv.row, dv_sum, m.staged, warp_key, s.keys, 1.0f);
  write_rows<K>(at<Out>(dk, head), dk.row, dk_sum, m.staged, warp_key, s.keys, s.scale);
}

}  // namespace

bool flash_attention_backward_supported(std::int64_t width, int shared_limit, FlashKernel kernel) {
  if (kernel == FlashKernel::mma) return flash_attention_backward_mma_supported(width, shared_limit);
  return width_fits<Shared>(width, shared_limit);
}

void cuda_flash_attention_backward(const FlashOperand& q, const FlashOperand& k, const FlashOperand& v,
                                   const FlashOperand& out, const FlashOperand& dout, const float* logsumexp,
                                   float* delta, const FlashGradients& grads, const FlashAttentionShape& shape,
                                   cudaStream_t stream, FlashKernel kernel) {
  if (shape.batches * shape.heads == 0) return;
  if (kernel == FlashKernel::mma)
    return cuda_flash_attention_backward_mma(q, k, v, out, dout, logsumexp, delta, grads, shape, stream);
  // out and the gradients share a dtype (Backend::attention_backward checks it); q, k, v and dout are bf16.
  for_kernel(false, out.f32, shape.width, [&](auto width, auto, auto out_elements) {
    constexpr int K = decltype(width)::value;
    using Out = typename decltype(out_elements)::type;
    launch_gradients(flash_dq_kernel<K, Out>, flash_dkv_kernel<K, Out>, Shared<K>::bytes, q, k, v, out, dout,
                     logsumexp, delta, grads, shape, stream);
  });
}

}  // namespace tessera
