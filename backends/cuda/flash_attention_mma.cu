// FlashAttention-2's forward pass (Dao, 2023) with its products in registers
// (FlashKernel::mma, flash_attention.hpp): the same results as the WMMA
// kernel (flash_attention.cu) up to rounding, without its trips through
// shared memory.
//
// A block of 4 warps takes 128 queries of one head (64 for 128-wide heads,
// whose sums would not fit the registers), each warp 32 (or 16). The warp
// keeps its queries as mma A operands in registers for the whole pass. Per
// tile of 64 keys it takes S = Q K^T into f32 accumulators, updates each
// row's running max and sum in place (a row is held by the four lanes of a
// group: two shuffles combine them), rounds the weights exp(S - max) to bf16
// straight into the A operand of P V (mma_fragments.hpp) and adds P V to its
// f32 output rows, rescaled by exp(old max - new max). The key and value
// tiles are double-buffered: tile j + 1 loads by cp.async while tile j is
// multiplied (bf16 operands; f32 ones are rounded to bf16 as they load, and
// load in turn). Each thread adds in a fixed order: every run gives the same
// bits.
#include <math.h>

#include <type_traits>

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/flash_attention.hpp"
#include "backends/cuda/flash_tiles.hpp"
#include "backends/cuda/mma_fragments.hpp"

namespace tessera {
namespace {

using namespace flash;
using mma::bf16;

// A block's tiles for heads of width K, and the byte offsets of its shared
// memory: the block's queries, then two buffers each of keys and of values.
template <int K>
struct Registers {
  static constexpr int warp_tiles = K <= 64 ? 2 : 1;  // 16-row mma tiles of queries per warp
  static constexpr int warp_rows = 16 * warp_tiles;
  static constexpr int queries = kWarps * warp_rows;  // a block's
  static constexpr int keys = 64;                     // a tile's
  static constexpr int stride = head_stride<K>();     // bf16 a row: 16 bytes of padding keep ldmatrix off shared banks
  static constexpr int q = 0;
  static constexpr int k = q + queries * stride * 2;
  static constexpr int v = k + 2 * keys * stride * 2;
  static constexpr int bytes = v + 2 * keys * stride * 2;
};

// rows x K of a tile into shared memory: by cp.async for bf16 (the copies go
// on until wait_tiles), rounded from f32 as they load otherwise.
template <int K, typename In>
__device__ void stage_rows(bf16* to, const In* from, std::int64_t row_stride, int rows, std::int64_t valid) {
  if constexpr (std::is_same_v<In, bf16>)
    load_rows_async<K>(to, Registers<K>::stride, from, row_stride, rows, valid);
  else
    load_rows<K>(to, Registers<K>::stride, from, row_stride, rows, valid);
}

template <int K, typename In, typename Out>
__global__ void __launch_bounds__(kThreads)
    flash_attention_mma_kernel(FlashOperand q, FlashOperand k, FlashOperand v, FlashOperand out, float* logsumexp,
                               FlashAttentionShape s) {
  using L = Registers<K>;
  constexpr int kMTiles = L::warp_tiles;
  constexpr int kSteps = K / 16;        // 16-wide steps along a head: Q K^T's inner dimension
  constexpr int kKeyTiles = L::keys / 8;  // 8-key columns of S
  constexpr int kOutTiles = K / 8;      // 8-wide columns of the output
  constexpr float kLog2e = 1.4426950408889634f;
  extern __shared__ __align__(128) unsigned char shared[];
  bf16* const qs = reinterpret_cast<bf16*>(shared + L::q);
  bf16* const ks = reinterpret_cast<bf16*>(shared + L::k);
  bf16* const vs = reinterpret_cast<bf16*>(shared + L::v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Where this lane points ldmatrix (mma_layout.hpp): queries, keys, values.
  const mma::At a_at = mma::a_operand(lane), keys_at = mma::b_operands_of_rows(lane),
                values_at = mma::b_operands_of_columns(lane);

  // The last query tiles first: under a causal mask they have the most keys.
  const std::int64_t tiles = (s.queries + L::queries - 1) / L::queries;
  const std::int64_t head = blockIdx.x / tiles, b = head / s.heads, h = head % s.heads;
  const std::int64_t first_query = (tiles - 1 - blockIdx.x % tiles) * L::queries;
  const std::int64_t warp_query = first_query + warp * L::warp_rows;
  const In* qh = static_cast<const In*>(q.data) + b * q.batch + h * q.head;
  const In* kh = static_cast<const In*>(k.data) + b * k.batch + h * k.head;
  const In* vh = static_cast<const In*>(v.data) + b * v.batch + h * v.head;
  Out* oh = static_cast<Out*>(out.data) + b * out.batch + h * out.head;

  const std::int64_t shift = s.keys - s.queries;  // causal: query i sees keys 0 .. i + shift
  const int key_tiles = key_tiles_seen(s, first_query, L::queries, L::keys);
  const auto stage_keys = [&](int tile, int buffer) {
    const std::int64_t first_key = static_cast<std::int64_t>(tile) * L::keys;
    const std::int64_t valid = s.keys - first_key;
    stage_rows<K>(ks + buffer * L::keys * L::stride, kh + first_key * k.row, k.row, L::keys, valid);
    stage_rows<K>(vs + buffer * L::keys * L::stride, vh + first_key * v.row, v.row, L::keys, valid);
  };

  stage_rows<K>(qs, qh + first_query * q.row, q.row, L::queries, s.queries - first_query);
  commit_tiles();
  if (key_tiles > 0) stage_keys(0, 0);
  commit_tiles();
  wait_tiles<1>();  // the queries are in
  __syncthreads();
  unsigned queries[kMTiles][kSteps][4];  // A operands
#pragma unroll
  for (int m = 0; m < kMTiles; ++m)
#pragma unroll
    for (int i = 0; i < kSteps; ++i)
      mma::load_matrices(queries[m][i],
                         qs + (warp * L::warp_rows + m * 16 + a_at.row) * L::stride + i * 16 + a_at.col);

  float acc[kMTiles][kOutTiles][4];
  mma::clear(acc);
  // Of this lane's two accumulator rows (halves 0, 1: mma::accumulator's elements 0, 2) of
  // each m tile: the max of scale * log2(e) * score so far, and this lane's part of the sum
  // of 2^(that - max) (the four lanes holding a row add their parts at the end).
  float row_max[kMTiles][2], row_sum[kMTiles][2];
#pragma unroll
  for (int m = 0; m < kMTiles; ++m)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      row_max[m][half] = -INFINITY;
      row_sum[m][half] = 0.0f;
    }
  const float scale = s.scale * kLog2e;

  for (int tile = 0; tile < key_tiles; ++tile) {
    next_tile(tile, key_tiles, stage_keys);
    const int buffer = tile % 2;
    const bf16* kt = ks + buffer * L::keys * L::stride;
    const bf16* vt = vs + buffer * L::keys * L::stride;
    const std::int64_t first_key = static_cast<std::int64_t>(tile) * L::keys;

    // S = Q K^T: a row-major [key, dim] tile read untransposed is K^T's B operand;
    // one load gives two 8-key columns.
    float scores[kMTiles][kKeyTiles][4];
    mma::clear(scores);
#pragma unroll
    for (int i = 0; i < kSteps; ++i)
#pragma unroll
      for (int n = 0; n < kKeyTiles; n += 2) {
        unsigned keys[4];
        mma::load_matrices(keys, kt + (n * 8 + keys_at.row) * L::stride + i * 16 + keys_at.col);
#pragma unroll
        for (int m = 0; m < kMTiles; ++m) {
          mma::product(scores[m][n], queries[m][i], keys[0], keys[1]);
          mma::product(scores[m][n + 1], queries[m][i], keys[2], keys[3]);
        }
      }

    // Keys past the end, and under a causal mask keys after a row's query, weigh 0.
    const bool masked = first_key + L::keys > s.keys || (s.causal && first_key + L::keys - 1 > first_query + shift);
#pragma unroll
    for (int m = 0; m < kMTiles; ++m)
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = scores[m][n][e] * scale;
          if (masked) {
            const mma::At at = mma::accumulator(lane, e);
            const std::int64_t key = first_key + n * 8 + at.col;
            const std::int64_t query = warp_query + m * 16 + at.row;
            if (key >= s.keys || (s.causal && key > query + shift)) x = -INFINITY;
          }
          scores[m][n][e] = x;
        }

    // Online softmax, row by row: scores become weights in place.
#pragma unroll
    for (int m = 0; m < kMTiles; ++m)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float tile_max = -INFINITY;
#pragma unroll
        for (int n = 0; n < kKeyTiles; ++n)
          tile_max = fmaxf(tile_max, fmaxf(scores[m][n][2 * half], scores[m][n][2 * half + 1]));
        const float new_max = fmaxf(row_max[m][half], mma::group_max(tile_max));
        // A row that has seen no key yet keeps max -inf: its weights are 0 (2^-inf).
        const float base = new_max == -INFINITY ? 0.0f : new_max;
        const float rescale = mma::exp2_fast(row_max[m][half] - base);
        row_max[m][half] = new_max;
        float sum = 0.0f;
#pragma unroll
        for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
          for (int e = 2 * half; e < 2 * half + 2; ++e) {
            scores[m][n][e] = mma::exp2_fast(scores[m][n][e] - base);
            sum += scores[m][n][e];
          }
        row_sum[m][half] = row_sum[m][half] * rescale + sum;
#pragma unroll
        for (int n = 0; n < kOutTiles; ++n) {
          acc[m][n][2 * half] *= rescale;
          acc[m][n][2 * half + 1] *= rescale;
        }
      }

    // acc += P V: the weights of key columns 2j and 2j + 1 are the A operand of step j; the
    // row-major [key, dim] value tile read transposed is the B operand.
#pragma unroll
    for (int j = 0; j < L::keys / 16; ++j) {
      unsigned weights[kMTiles][4];
#pragma unroll
      for (int m = 0; m < kMTiles; ++m) {
        weights[m][0] = mma::pack_bf16(scores[m][2 * j][0], scores[m][2 * j][1]);
        weights[m][1] = mma::pack_bf16(scores[m][2 * j][2], scores[m][2 * j][3]);
        weights[m][2] = mma::pack_bf16(scores[m][2 * j + 1][0], scores[m][2 * j + 1][1]);
        weights[m][3] = mma::pack_bf16(scores[m][2 * j + 1][2], scores[m][2 * j + 1][3]);
      }
#pragma unroll
      for (int n = 0; n < kOutTiles; n += 2) {
        unsigned values[4];
        mma::load_matrices_transposed(values, vt + (j * 16 + values_at.row) * L::stride + n * 8 + values_at.col);
#pragma unroll
        for (int m = 0; m < kMTiles; ++m) {
          mma::product(acc[m][n], weights[m], values[0], values[1]);
          mma::product(acc[m][n + 1], weights[m], values[2], values[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with this buffer before the next tile but one loads into it
  }

#pragma unroll
  for (int m = 0; m < kMTiles; ++m)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float sum = mma::group_sum(row_sum[m][half]);
      const mma::At at = mma::accumulator(lane, 2 * half);
      const std::int64_t query = warp_query + m * 16 + at.row;
      if (query >= s.queries) continue;
      const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;
      Out* row = oh + query * out.row + at.col;
#pragma unroll
      for (int n = 0; n < kOutTiles; ++n)
        store_pair(row + n * 8, acc[m][n][2 * half] * inverse, acc[m][n][2 * half + 1] * inverse);
      // Of exp(scale * score), as the weights were taken: the backward pass's exp(x - logsumexp).
      if (logsumexp != nullptr && at.col == 0)
        logsumexp[head * s.queries + query] = sum > 0.0f ? row_max[m][half] / kLog2e + __logf(sum) : -INFINITY;
    }
}

}  // namespace

bool flash_attention_mma_supported(std::int64_t width, int shared_limit) {
  return width_fits<Registers>(width, shared_limit);
}

void cuda_flash_attention_mma(const FlashOperand& q, const FlashOperand& k, const FlashOperand& v,
                              const FlashOperand& out, const FlashAttentionShape& shape, cudaStream_t stream,
                              float* logsumexp) {
  if (shape.batches * shape.heads == 0 || shape.queries == 0) return;
  for_kernel(q.f32, out.f32, shape.width, [&](auto width, auto in, auto out_elements) {
    constexpr int K = decltype(width)::value;
    launch_forward(flash_attention_mma_kernel<K, typename decltype(in)::type, typename decltype(out_elements)::type>, Registers<K>::bytes,
                   Registers<K>::queries, q, k, v, out, logsumexp, shape, stream);
  });
}

}  // namespace tessera
