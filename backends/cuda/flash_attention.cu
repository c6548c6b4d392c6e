// Fused attention (flash_attention.hpp) on tensor cores, FlashAttention's
// forward pass (Dao et al., 2022): a block of 4 warps takes 64 queries of one
// head; for each tile of 64 keys it loads the keys and values into shared
// memory, each warp multiplies its 16 queries (kept in WMMA fragments) by the
// keys (bf16 in, f32 sums), updates its rows' running max and sum (online
// softmax), and adds the tile's exp-weights (rounded to bf16) times the
// values to its f32 output rows, rescaled by exp(old max - new max). Causal
// blocks stop at their last query's last key. Nothing is atomic: every run
// gives the same bits.
//
// Operands are read and written through strides (FlashOperand), so [B, T,
// H, K] as projected serves as well as [B, H, T, K]; f32 q, k and v are
// rounded to bf16 as they are loaded, as the casts they replace would.
//
// Lane l takes columns l and l + 32 of each of its warp's rows, so a warp's
// reads and writes of a row in shared memory fall in distinct banks, and
// rows are padded by 16 bytes so that WMMA's loads and stores of 16 rows do
// not pile onto the same banks either.
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
  static constexpr int q = 0;
  static constexpr int k = q + kTileQueries * head_stride * 2;
  static constexpr int v = k + kTileKeys * head_stride * 2;
  static constexpr int scores = v + kTileKeys * head_stride * 2;                   // per warp: 16 rows
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
  float row_max[kWarpRows], row_sum[kWarpRows];  // of the scaled scores so far, and of their exp
  for (int r = 0; r < kWarpRows; ++r) {
    row_max[r] = -INFINITY;
    row_sum[r] = 0.0f;
  }

  for (std::int64_t first_key = 0; first_key < end; first_key += kTileKeys) {
    __syncthreads();  // every warp is done with the last tile
    load_rows<K>(ks, L::head_stride, kh + first_key * k.row, k.row, kTileKeys, s.keys - first_key);
    load_rows<K>(vs, L::head_stride, vh + first_key * v.row, v.row, kTileKeys, s.keys - first_key);
    __syncthreads();

    // This warp's scores: its 16 queries by the tile's 64 keys.
    for (int n = 0; n < kTileKeys / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
      wmma::fill_fragment(c, 0.0f);
      for (int i = 0; i < K / 16; ++i) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b;  // keys^T
        wmma::load_matrix_sync(b, ks + n * 16 * L::head_stride + i * 16, L::head_stride);
        wmma::mma_sync(c, queries[i], b, c);
      }
      wmma::store_matrix_sync(scores + n * 16, c, L::score_stride, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax, row by row: this lane's scores are columns lane and lane + 32.
    const std::int64_t key0 = first_key + lane, key1 = key0 + 32;
#pragma unroll
    for (int r = 0; r < kWarpRows; ++r) {
      const std::int64_t last_seen = s.causal ? warp_query + r + shift : s.keys - 1;
      const float x0 = key0 < s.keys && key0 <= last_seen ? scores[r * L::score_stride + lane] * s.scale : -INFINITY;
      const float x1 = key1 < s.keys && key1 <= last_seen ? scores[r * L::score_stride + lane + 32] * s.scale : -INFINITY;
      const float new_max = fmaxf(row_max[r], warp_max(fmaxf(x0, x1)));
      // A row that has seen no key yet keeps max -inf: its weights are 0.
      const bool none = new_max == -INFINITY;
      const float rescale = none ? 1.0f : __expf(row_max[r] - new_max);
      const float p0 = none ? 0.0f : __expf(x0 - new_max), p1 = none ? 0.0f : __expf(x1 - new_max);
      weights[r * L::weight_stride + lane] = __float2bfloat16(p0);
      weights[r * L::weight_stride + lane + 32] = __float2bfloat16(p1);
      row_sum[r] = row_sum[r] * rescale + warp_sum(p0 + p1);
      row_max[r] = new_max;
      for (int c = lane; c < K; c += 32) acc[r * L::out_stride + c] *= rescale;
    }
    __syncwarp();

    // Its output rows += weights (16 x 64) times the tile's values (64 x K).
    for (int n = 0; n < K / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
      wmma::load_matrix_sync(c, acc + n * 16, L::out_stride, wmma::mem_row_major);
      for (int i = 0; i < kTileKeys / 16; ++i) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b;
        wmma::load_matrix_sync(a, weights + i * 16, L::weight_stride);
        wmma::load_matrix_sync(b, vs + i * 16 * L::head_stride + n * 16, L::head_stride);
        wmma::mma_sync(c, a, b, c);
      }
      wmma::store_matrix_sync(acc + n * 16, c, L::out_stride, wmma::mem_row_major);
    }
    __syncwarp();
  }

  for (int r = 0; r < kWarpRows; ++r) {
    const std::int64_t query = warp_query + r;
    if (query >= s.queries) break;
    const float inverse = row_sum[r] > 0.0f ? 1.0f / row_sum[r] : 0.0f;
    for (int c = lane; c < K; c += 32) store(oh + query * out.row + c, acc[r * L::out_stride + c] * inverse);
    // Of exp(scale * score), as the weights were taken: the backward pass's exp(x - logsumexp).
    if (logsumexp != nullptr && lane == 0)
      logsumexp[head * s.queries + query] = row_sum[r] > 0.0f ? row_max[r] + __logf(row_sum[r]) : -INFINITY;
  }
}

}  // namespace

bool flash_attention_supported(std::int64_t width, int shared_limit, FlashKernel kernel) {
  if (kernel == FlashKernel::mma) return flash_attention_mma_supported(width, shared_limit);
  return width_fits<Shared>(width, shared_limit);
}

void cuda_flash_attention(const FlashOperand& q, const FlashOperand& k, const FlashOperand& v, FlashOperand out,
                          const FlashAttentionShape& shape, cudaStream_t stream, float* logsumexp,
                          FlashKernel kernel) {
  if (shape.batches * shape.heads == 0 || shape.queries == 0) return;
  if (kernel == FlashKernel::mma) return cuda_flash_attention_mma(q, k, v, out, shape, stream, logsumexp);
  // q, k and v share a dtype (Backend::fused_attention checks it).
  for_kernel(q.f32, out.f32, shape.width, [&](auto width, auto in, auto out_elements) {
    constexpr int K = decltype(width)::value;
    launch_forward(flash_attention_kernel<K, typename decltype(in)::type, typename decltype(out_elements)::type>, Shared<K>::bytes,
                   kTileQueries, q, k, v, out, logsumexp, shape, stream);
  });
}

}  // namespace tessera
