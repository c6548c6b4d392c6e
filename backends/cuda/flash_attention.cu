// Fused attention (flash_attention.hpp) on tensor cores, FlashAttention's
// forward pass (Dao et al., 2022): a block of 4 warps takes 64 queries of one
// head; for each tile of 64 keys (the next tile's keys and values loading by
// cp.async meanwhile, for bf16 operands) each warp multiplies its 16 queries
// (kept in WMMA fragments) by the keys (bf16 in, f32 sums), updates its
// rows' running max and sum (online softmax), and adds the tile's
// exp-weights (rounded to bf16) times the values to its f32 output rows,
// rescaled by exp(old max - new max). Causal blocks stop at their last
// query's last key. Nothing is atomic: every run gives the same bits.
//
// Operands are read and written through strides (FlashOperand), so [B, T,
// H, K] as projected serves as well as [B, H, T, K]; f32 q, k and v are
// rounded to bf16 as they are loaded, as the casts they replace would.
//
// In the softmax, lanes 2r and 2r + 1 take row r, 32 columns each, in an
// order turned by the lane so that a warp's reads and writes of a step fall
// in distinct banks; rows are padded by 16 bytes so that WMMA's loads and
// stores of 16 rows do not pile onto the same banks either.
#include "backends/cuda/flash_attention.hpp"

#include <math.h>
#include <mma.h>

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/flash_tiles.hpp"
#include "backends/cuda/warp_tree.hpp"

namespace tessera {
namespace {

namespace wmma = nvcuda::wmma;
using namespace flash;
constexpr int kTileQueries = kTileRows;

// Row strides (elements) and byte offsets of the block's shared memory for heads of width K.
template <int K>
struct Shared {
  static constexpr int head_stride = flash::head_stride<K>();  // q, k, v rows: bf16
  static constexpr int score_stride = kScoreStride;             // f32
  static constexpr int weight_stride = kWeightStride;           // bf16
  static constexpr int out_stride = K + 4;                      // f32
  static constexpr int tile_elements = kTileKeys * head_stride;
  static constexpr int q = 0;
  static constexpr int k = q + kTileQueries * head_stride * 2;                     // two tiles: one loads, one is read
  static constexpr int v = k + 2 * tile_elements * 2;                              // two tiles
  static constexpr int scores = v + 2 * tile_elements * 2;                         // per warp: 16 rows
  static constexpr int weights = scores + kWarps * kWarpRows * score_stride * 4;   // per warp: 16 rows
  static constexpr int out = weights + kWarps * kWarpRows * weight_stride * 2;     // per warp: 16 rows
  static constexpr int bytes = out + kWarps * kWarpRows * out_stride * 4;
};

template <int K, typename In, typename Out>
__global__ void __launch_bounds__(kThreads)
    flash_attention_kernel(FlashOperand q, FlashOperand k, FlashOperand v, FlashOperand out, float* logsumexp,
                           FlashAttentionShape s) {
  extern __shared__ __align__(128) unsigned char shared[];
  using L = Shared<K>;
  bf16* qs = reinterpret_cast<bf16*>(shared + L::q);
  bf16* ks = reinterpret_cast<bf16*>(shared + L::k);
  bf16* vs = reinterpret_cast<bf16*>(shared + L::v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* scores = reinterpret_cast<float*>(shared + L::scores) + warp * kWarpRows * L::score_stride;
  bf16* weights = reinterpret_cast<bf16*>(shared + L::weights) + warp * kWarpRows * L::weight_stride;
  float* acc = reinterpret_cast<float*>(shared + L::out) + warp * kWarpRows * L::out_stride;

  // The last query tiles first: under a causal mask they have the most keys.
  const std::int64_t tiles = (s.queries + kTileQueries - 1) / kTileQueries;
  const std::int64_t head = blockIdx.x / tiles, b = head / s.heads, h = head % s.heads;
  const std::int64_t first_query = (tiles - 1 - blockIdx.x % tiles) * kTileQueries;
  const std::int64_t warp_query = first_query + warp * kWarpRows;  // the warp's first query
  const In* qh = static_cast<const In*>(q.data) + b * q.batch + h * q.head;
  const In* kh = static_cast<const In*>(k.data) + b * k.batch + h * k.head;
  const In* vh = static_cast<const In*>(v.data) + b * v.batch + h * v.head;
  Out* oh = static_cast<Out*>(out.data) + b * out.batch + h * out.head;

  load_rows<K>(qs, L::head_stride, qh + first_query * q.row, q.row, kTileQueries, s.queries - first_query);
  for (int r = 0; r < kWarpRows; ++r)
    for (int c = lane; c < K; c += 32) acc[r * L::out_stride + c] = 0.0f;
  __syncthreads();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> queries[K / 16];
  for (int i = 0; i < K / 16; ++i) wmma::load_matrix_sync(queries[i], qs + warp * kWarpRows * L::head_stride + i * 16, L::head_stride);

  const std::int64_t shift = s.keys - s.queries;  // causal: query i sees keys 0 .. i + shift
  std::int64_t end = s.keys;
  if (s.causal && first_query + kTileQueries + shift < end) end = first_query + kTileQueries + shift;
  // Lane l keeps the running max and sum of row l / 2 (of the scaled scores
  // so far, and of their exp), as does its pair lane l ^ 1.
  const int row = lane / 2, half = lane % 2;
  const std::int64_t last_seen = s.causal ? warp_query + row + shift : s.keys - 1;
  float row_max = -INFINITY, row_sum = 0.0f;

  // Tile t + 1 loads (cp.async, for bf16 operands) while tile t is multiplied.
  auto stage = [&](std::int64_t first_key, int buffer) {
    stage_rows<K>(ks + buffer * L::tile_elements, L::head_stride, kh + first_key * k.row, k.row, kTileKeys,
                  s.keys - first_key);
    stage_rows<K>(vs + buffer * L::tile_elements, L::head_stride, vh + first_key * v.row, v.row, kTileKeys,
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
    const bf16* keys = ks + buffer * L::tile_elements;
    const bf16* values = vs + buffer * L::tile_elements;

    // This warp's scores: its 16 queries by the tile's 64 keys.
    for (int n = 0; n < kTileKeys / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
      wmma::fill_fragment(c, 0.0f);
      for (int i = 0; i < K / 16; ++i) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b;  // keys^T
        wmma::load_matrix_sync(b, keys + n * 16 * L::head_stride + i * 16, L::head_stride);
        wmma::mma_sync(c, queries[i], b, c);
      }
      wmma::store_matrix_sync(scores + n * 16, c, L::score_stride, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax: lane l takes 32 columns of row l / 2 (the first or the
    // second half), in an order turned by l so that the warp's 32 reads of a
    // step fall in 32 banks; the pair's results meet in one shuffle.
    const float* x_row = scores + row * L::score_stride + half * 32;
    const std::int64_t first_column_key = first_key + half * 32;
    auto scaled = [&](int c) {
      const std::int64_t key = first_column_key + c;
      return key < s.keys && key <= last_seen ? x_row[c] * s.scale : -INFINITY;
    };
    float tile_max = -INFINITY;
#pragma unroll 8
    for (int j = 0; j < 32; ++j) tile_max = fmaxf(tile_max, scaled((j + lane) % 32));
    // Even lane's first in each pairwise max and sum: the pair gets the same bits.
    const float pair_max = __shfl_xor_sync(0xffffffffu, tile_max, 1);
    const float new_max = fmaxf(row_max, half == 0 ? fmaxf(tile_max, pair_max) : fmaxf(pair_max, tile_max));
    // A row that has seen no key yet keeps max -inf: its weights are 0.
    const bool none = new_max == -INFINITY;
    const float rescale = none ? 1.0f : __expf(row_max - new_max);
    bf16* w_row = weights + row * L::weight_stride + half * 32;
    float tile_sum = 0.0f;
#pragma unroll 8
    for (int j = 0; j < 32; ++j) {
      const int c = (j + lane) % 32;
      const float p = none ? 0.0f : __expf(scaled(c) - new_max);
      w_row[c] = __float2bfloat16(p);
      tile_sum += p;
    }
    const float pair_sum = __shfl_xor_sync(0xffffffffu, tile_sum, 1);
    row_sum = row_sum * rescale + (half == 0 ? tile_sum + pair_sum : pair_sum + tile_sum);
    row_max = new_max;
    float* acc_row = acc + row * L::out_stride + half * (K / 2);
#pragma unroll 8
    for (int j = 0; j < K / 2; ++j) acc_row[(j + lane) % (K / 2)] *= rescale;
    __syncwarp();

    // Its output rows += weights (16 x 64) times the tile's values (64 x K).
    for (int n = 0; n < K / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
      wmma::load_matrix_sync(c, acc + n * 16, L::out_stride, wmma::mem_row_major);
      for (int i = 0; i < kTileKeys / 16; ++i) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b;
        wmma::load_matrix_sync(a, weights + i * 16, L::weight_stride);
        wmma::load_matrix_sync(b, values + i * 16 * L::head_stride + n * 16, L::head_stride);
        wmma::mma_sync(c, a, b, c);
      }
      wmma::store_matrix_sync(acc + n * 16, c, L::out_stride, wmma::mem_row_major);
    }
    __syncthreads();  // every warp is done with this tile's buffers before they load again
  }

  for (int r = 0; r < kWarpRows; ++r) {
    const float sum = __shfl_sync(0xffffffffu, row_sum, 2 * r), max = __shfl_sync(0xffffffffu, row_max, 2 * r);
    const std::int64_t query = warp_query + r;
    if (query >= s.queries) break;
    const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int c = lane; c < K; c += 32) store(oh + query * out.row + c, acc[r * L::out_stride + c] * inverse);
    // Of exp(scale * score), as the weights were taken: the backward pass's exp(x - logsumexp).
    if (logsumexp != nullptr && lane == 0) logsumexp[head * s.queries + query] = sum > 0.0f ? max + __logf(sum) : -INFINITY;
  }
}

template <int K, typename In, typename Out>
void launch(const FlashOperand& q, const FlashOperand& k, const FlashOperand& v, const FlashOperand& out,
            float* logsumexp, const FlashAttentionShape& s, cudaStream_t stream) {
  auto kernel = flash_attention_kernel<K, In, Out>;
  cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Shared<K>::bytes),
             "cudaFuncSetAttribute(flash_attention_kernel, MaxDynamicSharedMemorySize)", __FILE__, __LINE__);
  const std::int64_t blocks = s.batches * s.heads * ((s.queries + kTileQueries - 1) / kTileQueries);
  kernel<<<static_cast<unsigned>(blocks), kThreads, Shared<K>::bytes, stream>>>(q, k, v, out, logsumexp, s);
  cuda_check(cudaGetLastError(), "flash_attention_kernel<<<heads * query tiles, 128, shared, stream>>>", __FILE__,
             __LINE__);
}

template <typename In, typename Out>
void launch_for_width(const FlashOperand& q, const FlashOperand& k, const FlashOperand& v, const FlashOperand& out,
                      float* logsumexp, const FlashAttentionShape& s, cudaStream_t stream) {
  switch (s.width) {
    case 32: return launch<32, In, Out>(q, k, v, out, logsumexp, s, stream);
    case 64: return launch<64, In, Out>(q, k, v, out, logsumexp, s, stream);
    case 128: return launch<128, In, Out>(q, k, v, out, logsumexp, s, stream);
    default: return;  // unreachable: run_fused_attention refuses other widths
  }
}

template <typename In>
void launch_for_out(const FlashOperand& q, const FlashOperand& k, const FlashOperand& v, const FlashOperand& out,
                    float* logsumexp, const FlashAttentionShape& s, cudaStream_t stream) {
  if (out.f32)
    launch_for_width<In, float>(q, k, v, out, logsumexp, s, stream);
  else
    launch_for_width<In, bf16>(q, k, v, out, logsumexp, s, stream);
}

}  // namespace

bool flash_attention_supported(std::int64_t width, int gpu) {
  switch (width) {
    case 32: return fits_a_block(Shared<32>::bytes, gpu);
    case 64: return fits_a_block(Shared<64>::bytes, gpu);
    case 128: return fits_a_block(Shared<128>::bytes, gpu);
    default: return false;
  }
}

void cuda_flash_attention(const FlashOperand& q, const FlashOperand& k, const FlashOperand& v, FlashOperand out,
                          const FlashAttentionShape& shape, cudaStream_t stream, float* logsumexp) {
  if (shape.batches * shape.heads == 0 || shape.queries == 0) return;
  // q, k and v share a dtype (Backend::fused_attention checks it).
  if (q.f32)
    launch_for_out<float>(q, k, v, out, logsumexp, shape, stream);
  else
    launch_for_out<bf16>(q, k, v, out, logsumexp, shape, stream);
}

}  // namespace tessera
