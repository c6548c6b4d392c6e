// FlashAttention-2's backward pass with its products in registers
// (FlashKernel::mma, flash_attention.hpp): the two kernels of
// flash_attention_backward.cu, the same math and order of sums, with every
// product, weight and gradient tile in mma.sync accumulators
// (mma_fragments.hpp) instead of WMMA fragments stored through shared memory.
//   1. dq: a block of 4 warps takes 64 queries of one head, a warp 16. It
//      writes each row's delta = dout . out, then per tile of 64 keys takes
//      S = q k^T and dP = dout v^T, turns them into dS = P (dP - delta) with
//      P = exp(scale S - logsumexp) in place, and adds dS k to its dq rows:
//      dS, rounded to bf16, is that product's A operand as it lies.
//   2. dk, dv: a block takes 64 keys, a warp 16; per tile of 64 queries it
//      takes S^T = k q^T and dP^T = v dout^T, and adds P^T dout to dv and
//      dS^T q to dk.
// A block's own rows stay in shared memory (their A operands are read again
// each tile, which keeps 128-wide heads in the registers); the other side's
// tiles are double-buffered by cp.async. Each block owns the rows it writes
// and adds in a fixed order: every run gives the same bits.
#include <math.h>

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/flash_attention.hpp"
#include "backends/cuda/flash_tiles.hpp"
#include "backends/cuda/mma_fragments.hpp"
#include "backends/cuda/warp_tree.hpp"

namespace tessera {
namespace {

using namespace flash;
using mma::bf16;

constexpr float kLog2e = 1.4426950408889634f;

// Both kernels' shared memory for heads of width K: the block's own two tiles
// (q and dout, or k and v), two buffers each of the other side's two tiles,
// and, for dk and dv, two buffers of 64 queries' logsumexp and delta.
template <int K>
struct Gradients {
  static constexpr int rows = kTileRows;            // 64 a tile, 16 a warp
  static constexpr int stride = head_stride<K>();  // bf16 a row
  static constexpr int tile = rows * stride;       // elements
  static constexpr int own = 0;                    // own tile 0, then own tile 1
  static constexpr int streamed = own + 2 * tile * 2;   // [buffer][2 tiles]
  static constexpr int stats = streamed + 4 * tile * 2;  // f32: lse[2][64], then delta[2][64]
  static constexpr int bytes = stats + 4 * rows * 4;
};

// A 16-row A operand of width K from a row-major tile in shared memory, step i (columns 16i ..).
template <int K>
__device__ __forceinline__ void load_a(unsigned (&a)[4], const bf16* rows, int i) {
  const mma::At at = mma::a_operand(threadIdx.x % 32);
  mma::load_matrices(a, rows + at.row * Gradients<K>::stride + i * 16 + at.col);
}

// c[n] (16 x 64) = a (16 rows of width K, shared) times b^T, b a 64-row tile of width K:
// the tile read untransposed is b^T's B operand, two 8-row columns a load.
template <int K>
__device__ __forceinline__ void times_transposed(float (&c)[1][8][4], const bf16* a, const bf16* b) {
  const mma::At at = mma::b_operands_of_rows(threadIdx.x % 32);
  mma::clear(c);
#pragma unroll
  for (int i = 0; i < K / 16; ++i) {
    unsigned x[4];
    load_a<K>(x, a, i);
#pragma unroll
    for (int n = 0; n < 8; n += 2) {
      unsigned y[4];
      mma::load_matrices(y, b + (n * 8 + at.row) * Gradients<K>::stride + i * 16 + at.col);
      mma::product(c[0][n], x, y[0], y[1]);
      mma::product(c[0][n + 1], x, y[2], y[3]);
    }
  }
}

// acc (16 x K) += a (16 x 64: f32 accumulators, rounded to bf16 as A operands) times b,
// a 64-row tile of width K read transposed: two 8-wide columns of the result a load.
template <int K>
__device__ __forceinline__ void add_product(float (&acc)[1][K / 8][4], const float (&a)[1][8][4], const bf16* b) {
  const mma::At at = mma::b_operands_of_columns(threadIdx.x % 32);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const unsigned x[4] = {mma::pack_bf16(a[0][2 * j][0], a[0][2 * j][1]), mma::pack_bf16(a[0][2 * j][2], a[0][2 * j][3]),
                           mma::pack_bf16(a[0][2 * j + 1][0], a[0][2 * j + 1][1]),
                           mma::pack_bf16(a[0][2 * j + 1][2], a[0][2 * j + 1][3])};
#pragma unroll
    for (int n = 0; n < K / 8; n += 2) {
      unsigned y[4];
      mma::load_matrices_transposed(y, b + (j * 16 + at.row) * Gradients<K>::stride + n * 8 + at.col);
      mma::product(acc[0][n], x, y[0], y[1]);
      mma::product(acc[0][n + 1], x, y[2], y[3]);
    }
  }
}

// A warp's 16 x K accumulators times `factor` into rows first .. first + 15 of
// `to` (those before `count`).
template <int K, typename Out>
__device__ __forceinline__ void write_rows(Out* to, std::int64_t row_stride, const float (&acc)[1][K / 8][4], std::int64_t first,
                           std::int64_t count, float factor) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const mma::At at = mma::accumulator(threadIdx.x % 32, 2 * half);
    const std::int64_t row = first + at.row;
    if (row >= count) continue;
    Out* pair = to + row * row_stride + at.col;
#pragma unroll
    for (int n = 0; n < K / 8; ++n)
      store_pair(pair + n * 8, acc[0][n][2 * half] * factor, acc[0][n][2 * half + 1] * factor);
  }
}

template <int K, typename Out>
__global__ void __launch_bounds__(kThreads)
    flash_dq_mma_kernel(FlashOperand q, FlashOperand k, FlashOperand v, FlashOperand out, FlashOperand dout,
                        const float* logsumexp, float* delta, FlashOperand dq, FlashAttentionShape s) {
  using L = Gradients<K>;
  extern __shared__ __align__(128) unsigned char shared[];
  bf16* const qs = reinterpret_cast<bf16*>(shared + L::own);
  bf16* const dos = qs + L::tile;
  bf16* const streamed = reinterpret_cast<bf16*>(shared + L::streamed);  // [buffer]: k, then v
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  // The last query tiles first: under a causal mask they have the most keys.
  const std::int64_t tiles = (s.queries + L::rows - 1) / L::rows;
  const HeadOf head = head_of(blockIdx.x / tiles, s);
  const std::int64_t first_query = (tiles - 1 - blockIdx.x % tiles) * L::rows;
  const std::int64_t warp_query = first_query + warp * kWarpRows;
  const bf16* kh = at<const bf16>(k, head);
  const bf16* vh = at<const bf16>(v, head);

  const std::int64_t shift = s.keys - s.queries;  // causal: query i sees keys 0 .. i + shift
  const int key_tiles = key_tiles_seen(s, first_query, L::rows, L::rows);
  const auto stage_keys = [&](int tile, int buffer) {
    const std::int64_t first_key = static_cast<std::int64_t>(tile) * L::rows;
    bf16* to = streamed + buffer * 2 * L::tile;
    load_rows_async<K>(to, L::stride, kh + first_key * k.row, k.row, L::rows, s.keys - first_key);
    load_rows_async<K>(to + L::tile, L::stride, vh + first_key * v.row, v.row, L::rows, s.keys - first_key);
  };
  load_rows_async<K>(qs, L::stride, at<const bf16>(q, head) + first_query * q.row, q.row, L::rows,
                     s.queries - first_query);
  load_rows_async<K>(dos, L::stride, at<const bf16>(dout, head) + first_query * dout.row, dout.row, L::rows,
                     s.queries - first_query);
  commit_tiles();
  if (key_tiles > 0) stage_keys(0, 0);
  commit_tiles();
  wait_tiles<1>();  // q and dout are in
  __syncthreads();

  // delta = dout . out of each of the warp's rows (FlashAttention-2's D), and the
  // logsumexp and delta of this lane's two accumulator rows (mma::accumulator's elements 0, 2),
  // as log2(e) times.
  const bf16* my_q = qs + warp * kWarpRows * L::stride;
  const bf16* my_dout = dos + warp * kWarpRows * L::stride;
  const Out* oh = at<const Out>(out, head);
  float lse[2] = {0.0f, 0.0f}, deltas[2] = {0.0f, 0.0f};
  const int my_rows[2] = {mma::accumulator(lane, 0).row, mma::accumulator(lane, 2).row};
#pragma unroll
  for (int r = 0; r < kWarpRows; ++r) {
    const std::int64_t query = warp_query + r;
    float partial = 0.0f;
    if (query < s.queries)
      for (int c = lane; c < K; c += 32) partial += __bfloat162float(my_dout[r * L::stride + c]) * load(oh + query * out.row + c);
    const float d = warp_sum(partial);
    if (lane == 0 && query < s.queries) delta[head.head * s.queries + query] = d;
    if (r == my_rows[0]) deltas[0] = d;
    if (r == my_rows[1]) deltas[1] = d;
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const std::int64_t query = warp_query + my_rows[half];
    if (query < s.queries) lse[half] = logsumexp[head.head * s.queries + query] * kLog2e;
  }
  const float scale = s.scale * kLog2e;

  float grad[1][K / 8][4];
  mma::clear(grad);
  for (int tile = 0; tile < key_tiles; ++tile) {
    next_tile(tile, key_tiles, stage_keys);
    const int buffer = tile % 2;
    const bf16* ks = streamed + buffer * 2 * L::tile;
    const bf16* vs = ks + L::tile;
    const std::int64_t first_key = static_cast<std::int64_t>(tile) * L::rows;

    float scores[1][8][4], dscores[1][8][4];
    times_transposed<K>(scores, my_q, ks);      // S = q k^T
    times_transposed<K>(dscores, my_dout, vs);  // dP = dout v^T
    // Keys past the end, and under a causal mask keys after a row's query, weigh 0.
    const bool masked = first_key + L::rows > s.keys || (s.causal && first_key + L::rows - 1 > first_query + shift);
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        bool seen = true;
        if (masked) {
          const mma::At at = mma::accumulator(lane, e);
          const std::int64_t key = first_key + n * 8 + at.col;
          const std::int64_t query = warp_query + at.row;
          seen = key < s.keys && (!s.causal || key <= query + shift);
        }
        const float p = seen ? mma::exp2_fast(scores[0][n][e] * scale - lse[e / 2]) : 0.0f;
        dscores[0][n][e] = p * (dscores[0][n][e] - deltas[e / 2]);  // dS = P (dP - delta)
      }
    add_product<K>(grad, dscores, ks);  // dq += dS k
    __syncthreads();  // every warp is done with this buffer before the next tile but one loads into it
  }
  write_rows<K>(at<Out>(dq, head), dq.row, grad, warp_query, s.queries, s.scale);
}

template <int K, typename Out>
__global__ void __launch_bounds__(kThreads)
    flash_dkv_mma_kernel(FlashOperand q, FlashOperand k, FlashOperand v, FlashOperand dout, const float* logsumexp,
                         const float* delta, FlashOperand dk, FlashOperand dv, FlashAttentionShape s) {
  using L = Gradients<K>;
  extern __shared__ __align__(128) unsigned char shared[];
  bf16* const ks = reinterpret_cast<bf16*>(shared + L::own);
  bf16* const vs = ks + L::tile;
  bf16* const streamed = reinterpret_cast<bf16*>(shared + L::streamed);  // [buffer]: q, then dout
  float* const lses = reinterpret_cast<float*>(shared + L::stats);      // [buffer][64], log2(e) times
  float* const deltas = lses + 2 * L::rows;                              // [buffer][64]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  const std::int64_t tiles = (s.keys + L::rows - 1) / L::rows;
  const HeadOf head = head_of(blockIdx.x / tiles, s);
  const std::int64_t first_key = (blockIdx.x % tiles) * L::rows;
  const std::int64_t warp_key = first_key + warp * kWarpRows;
  const bf16* qh = at<const bf16>(q, head);
  const bf16* doh = at<const bf16>(dout, head);

  const std::int64_t shift = s.keys - s.queries;  // causal: query i sees key j where j <= i + shift
  std::int64_t start = 0;
  if (s.causal && first_key - shift > 0) start = (first_key - shift) / L::rows * L::rows;
  const int query_tiles = start < s.queries ? static_cast<int>((s.queries - start + L::rows - 1) / L::rows) : 0;
  const auto stage_queries = [&](int tile, int buffer) {
    const std::int64_t first_query = start + static_cast<std::int64_t>(tile) * L::rows;
    bf16* to = streamed + buffer * 2 * L::tile;
    load_rows_async<K>(to, L::stride, qh + first_query * q.row, q.row, L::rows, s.queries - first_query);
    load_rows_async<K>(to + L::tile, L::stride, doh + first_query * dout.row, dout.row, L::rows,
                       s.queries - first_query);
    for (int i = threadIdx.x; i < L::rows; i += kThreads) {
      const std::int64_t query = first_query + i;
      lses[buffer * L::rows + i] = query < s.queries ? logsumexp[head.head * s.queries + query] * kLog2e : 0.0f;
      deltas[buffer * L::rows + i] = query < s.queries ? delta[head.head * s.queries + query] : 0.0f;
    }
  };
  load_rows_async<K>(ks, L::stride, at<const bf16>(k, head) + first_key * k.row, k.row, L::rows, s.keys - first_key);
  load_rows_async<K>(vs, L::stride, at<const bf16>(v, head) + first_key * v.row, v.row, L::rows, s.keys - first_key);
  commit_tiles();
  if (query_tiles > 0) stage_queries(0, 0);
  commit_tiles();

  const bf16* my_k = ks + warp * kWarpRows * L::stride;
  const bf16* my_v = vs + warp * kWarpRows * L::stride;
  const float scale = s.scale * kLog2e;
  float dk_sum[1][K / 8][4], dv_sum[1][K / 8][4];
  mma::clear(dk_sum);
  mma::clear(dv_sum);
  for (int tile = 0; tile < query_tiles; ++tile) {
    next_tile(tile, query_tiles, stage_queries);  // the block's keys and values are in from the first
    const int buffer = tile % 2;
    const bf16* qs = streamed + buffer * 2 * L::tile;
    const bf16* dos = qs + L::tile;
    const float* lse = lses + buffer * L::rows;
    const float* delta_of = deltas + buffer * L::rows;
    const std::int64_t first_query = start + static_cast<std::int64_t>(tile) * L::rows;

    float weights[1][8][4], dscores[1][8][4];
    times_transposed<K>(weights, my_k, qs);    // S^T = k q^T
    times_transposed<K>(dscores, my_v, dos);   // dP^T = v dout^T
    const bool masked = first_query + L::rows > s.queries || first_key + L::rows > s.keys ||
                        (s.causal && first_key + L::rows - 1 > first_query + shift);
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const mma::At at = mma::accumulator(lane, e);
        const int column = n * 8 + at.col;  // the tile's query
        bool seen = true;
        if (masked) {
          const std::int64_t query = first_query + column;
          const std::int64_t key = warp_key + at.row;
          seen = query < s.queries && key < s.keys && (!s.causal || key <= query + shift);
        }
        const float p = seen ? mma::exp2_fast(weights[0][n][e] * scale - lse[column]) : 0.0f;
        weights[0][n][e] = p;                                        // P^T
        dscores[0][n][e] = p * (dscores[0][n][e] - delta_of[column]);  // dS^T
      }
    add_product<K>(dv_sum, weights, dos);  // dv += P^T dout
    add_product<K>(dk_sum, dscores, qs);   // dk += dS^T q
    __syncthreads();  // every warp is done with this buffer before the next tile but one loads into it
  }
  wait_tiles<0>();  // without queries (Tq = 0) the block's own tiles were never waited for
  write_rows<K>(at<Out>(dv, head), dv.row, dv_sum, warp_key, s.keys, 1.0f);
  write_rows<K>(at<Out>(dk, head), dk.row, dk_sum, warp_key, s.keys, s.scale);
}

}  // namespace

bool flash_attention_backward_mma_supported(std::int64_t width, int shared_limit) {
  return width_fits<Gradients>(width, shared_limit);
}

void cuda_flash_attention_backward_mma(const FlashOperand& q, const FlashOperand& k, const FlashOperand& v,
                                       const FlashOperand& out, const FlashOperand& dout, const float* logsumexp,
                                       float* delta, const FlashGradients& grads, const FlashAttentionShape& shape,
                                       cudaStream_t stream) {
  if (shape.batches * shape.heads == 0) return;
  for_kernel(false, out.f32, shape.width, [&](auto width, auto, auto out_elements) {
    constexpr int K = decltype(width)::value;
    using Out = typename decltype(out_elements)::type;
    launch_gradients(flash_dq_mma_kernel<K, Out>, flash_dkv_mma_kernel<K, Out>, Gradients<K>::bytes, q, k, v, out,
                     dout, logsumexp, delta, grads, shape, stream);
  });
}

}  // namespace tessera
