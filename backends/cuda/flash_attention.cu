// Fused attention (flash_attention.hpp) on tensor cores, FlashAttention's
// forward pass (Dao et al., 2022): a block of 4 warps takes 64 queries of one
// head; for each tile of 64 keys it loads the keys and values into shared
// memory, each warp multiplies its 16 queries by the keys (WMMA, bf16 in, f32
// sums), updates its rows' running max and sum (online softmax), and adds the
// tile's exp-weights (rounded to bf16) times the values to its f32 output
// rows, rescaled by exp(old max - new max). Causal blocks stop at their last
// query's last key. Nothing is atomic: every run gives the same bits.
//
// Two lanes share a row: lane 2r and 2r + 1 take row r's columns 0-31 and
// 32-63 of the scores, and halves of its output columns.
#include "backends/cuda/flash_attention.hpp"

#include <cuda_bf16.h>
#include <math.h>
#include <mma.h>

#include "backends/cuda/cuda_check.hpp"

namespace tessera {
namespace {

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;

constexpr int kWarps = 4;
constexpr int kWarpRows = 16;                   // queries per warp: one WMMA tile high
constexpr int kTileQueries = kWarps * kWarpRows;  // 64
constexpr int kTileKeys = 64;
constexpr int kThreads = kWarps * 32;

// Byte offsets of the block's shared memory for heads of width K.
template <int K>
struct Shared {
  static constexpr int q = 0;                                          // [64][K] bf16
  static constexpr int k = q + kTileQueries * K * 2;                   // [64][K] bf16
  static constexpr int v = k + kTileKeys * K * 2;                      // [64][K] bf16
  static constexpr int scores = v + kTileKeys * K * 2;                 // per warp [16][64] f32
  static constexpr int weights = scores + kWarps * kWarpRows * kTileKeys * 4;  // per warp [16][64] bf16
  static constexpr int out = weights + kWarps * kWarpRows * kTileKeys * 2;     // per warp [16][K] f32
  static constexpr int bytes = out + kWarps * kWarpRows * K * 4;
};

// rows x K bf16 from `from` (rows past `valid` as zeros) into `to`, in 16-byte words.
template <int K>
__device__ void load_rows(bf16* to, const bf16* from, int rows, std::int64_t valid) {
  constexpr int words_per_row = K / 8;
  for (int i = threadIdx.x; i < rows * words_per_row; i += kThreads) {
    const int r = i / words_per_row, c = i % words_per_row;
    uint4 word = make_uint4(0, 0, 0, 0);
    if (r < valid) word = reinterpret_cast<const uint4*>(from + static_cast<std::int64_t>(r) * K)[c];
    reinterpret_cast<uint4*>(to + r * K)[c] = word;
  }
}

__device__ void store(float* to, float value) { *to = value; }
__device__ void store(bf16* to, float value) { *to = __float2bfloat16(value); }

template <int K, typename Out>
__global__ void __launch_bounds__(kThreads) flash_attention_kernel(const bf16* q, const bf16* k, const bf16* v,
                                                                   Out* out, FlashAttentionShape s) {
  extern __shared__ __align__(128) unsigned char shared[];
  using L = Shared<K>;
  bf16* qs = reinterpret_cast<bf16*>(shared + L::q);
  bf16* ks = reinterpret_cast<bf16*>(shared + L::k);
  bf16* vs = reinterpret_cast<bf16*>(shared + L::v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* scores = reinterpret_cast<float*>(shared + L::scores) + warp * kWarpRows * kTileKeys;
  bf16* weights = reinterpret_cast<bf16*>(shared + L::weights) + warp * kWarpRows * kTileKeys;
  float* acc = reinterpret_cast<float*>(shared + L::out) + warp * kWarpRows * K;

  // The last query tiles first: under a causal mask they have the most keys.
  const std::int64_t tiles = (s.queries + kTileQueries - 1) / kTileQueries;
  const std::int64_t head = blockIdx.x / tiles;
  const std::int64_t first_query = (tiles - 1 - blockIdx.x % tiles) * kTileQueries;
  const bf16* qh = q + head * s.queries * K;
  const bf16* kh = k + head * s.keys * K;
  const bf16* vh = v + head * s.keys * K;
  Out* oh = out + head * s.queries * K;

  load_rows<K>(qs, qh + first_query * K, kTileQueries, s.queries - first_query);
  for (int i = lane; i < kWarpRows * K; i += 32) acc[i] = 0.0f;

  const int row = lane / 2, half = lane % 2;
  const std::int64_t query = first_query + warp * kWarpRows + row;
  const std::int64_t shift = s.keys - s.queries;  // causal: query i sees keys 0 .. i + shift
  std::int64_t end = s.keys;
  if (s.causal && first_query + kTileQueries + shift < end) end = first_query + kTileQueries + shift;
  float max = -INFINITY, sum = 0.0f;  // the row's running max of the scaled scores, and sum of exp

  for (std::int64_t first_key = 0; first_key < end; first_key += kTileKeys) {
    __syncthreads();  // every warp is done with the last tile (and the queries are in)
    load_rows<K>(ks, kh + first_key * K, kTileKeys, s.keys - first_key);
    load_rows<K>(vs, vh + first_key * K, kTileKeys, s.keys - first_key);
    __syncthreads();

    // This warp's scores: its 16 queries by the tile's 64 keys.
    for (int n = 0; n < kTileKeys / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
      wmma::fill_fragment(c, 0.0f);
      for (int i = 0; i < K / 16; ++i) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b;  // keys^T
        wmma::load_matrix_sync(a, qs + warp * kWarpRows * K + i * 16, K);
        wmma::load_matrix_sync(b, ks + n * 16 * K + i * 16, K);
        wmma::mma_sync(c, a, b, c);
      }
      wmma::store_matrix_sync(scores + n * 16, c, kTileKeys, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax over this lane's 32 scores of its row.
    float x[32];
    float tile_max = -INFINITY;
#pragma unroll
    for (int c = 0; c < 32; ++c) {
      const int column = half * 32 + c;
      const std::int64_t key = first_key + column;
      const bool seen = key < s.keys && (!s.causal || key <= query + shift);
      x[c] = seen ? scores[row * kTileKeys + column] * s.scale : -INFINITY;
      tile_max = fmaxf(tile_max, x[c]);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float new_max = fmaxf(max, tile_max);
    // A row that has seen no key yet keeps max -inf: its weights are 0.
    const float rescale = new_max == -INFINITY ? 1.0f : __expf(max - new_max);
    float tile_sum = 0.0f;
#pragma unroll
    for (int c = 0; c < 32; ++c) {
      const float p = new_max == -INFINITY ? 0.0f : __expf(x[c] - new_max);
      tile_sum += p;
      weights[row * kTileKeys + half * 32 + c] = __float2bfloat16(p);
    }
    tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, 1);
    sum = sum * rescale + tile_sum;
    max = new_max;
    for (int c = half * (K / 2); c < (half + 1) * (K / 2); ++c) acc[row * K + c] *= rescale;
    __syncwarp();

    // Its output rows += weights (16 x 64) times the tile's values (64 x K).
    for (int n = 0; n < K / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
      wmma::load_matrix_sync(c, acc + n * 16, K, wmma::mem_row_major);
      for (int i = 0; i < kTileKeys / 16; ++i) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b;
        wmma::load_matrix_sync(a, weights + i * 16, kTileKeys);
        wmma::load_matrix_sync(b, vs + i * 16 * K + n * 16, K);
        wmma::mma_sync(c, a, b, c);
      }
      wmma::store_matrix_sync(acc + n * 16, c, K, wmma::mem_row_major);
    }
    __syncwarp();
  }

  if (query < s.queries) {
    const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int c = half * (K / 2); c < (half + 1) * (K / 2); ++c) store(oh + query * K + c, acc[row * K + c] * inverse);
  }
}

template <int K, typename Out>
void launch(const void* q, const void* k, const void* v, void* out, const FlashAttentionShape& s,
            cudaStream_t stream) {
  auto kernel = flash_attention_kernel<K, Out>;
  cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Shared<K>::bytes),
             "cudaFuncSetAttribute(flash_attention_kernel, MaxDynamicSharedMemorySize)", __FILE__, __LINE__);
  const std::int64_t blocks = s.heads * ((s.queries + kTileQueries - 1) / kTileQueries);
  kernel<<<static_cast<unsigned>(blocks), kThreads, Shared<K>::bytes, stream>>>(
      static_cast<const bf16*>(q), static_cast<const bf16*>(k), static_cast<const bf16*>(v), static_cast<Out*>(out),
      s);
  cuda_check(cudaGetLastError(), "flash_attention_kernel<<<heads * query tiles, 128, shared, stream>>>", __FILE__,
             __LINE__);
}

template <typename Out>
void launch_for_width(const void* q, const void* k, const void* v, void* out, const FlashAttentionShape& s,
                      cudaStream_t stream) {
  switch (s.width) {
    case 32: return launch<32, Out>(q, k, v, out, s, stream);
    case 64: return launch<64, Out>(q, k, v, out, s, stream);
    case 128: return launch<128, Out>(q, k, v, out, s, stream);
    default: return;  // flash_attention_width_supported() said no: the backend does not call
  }
}

}  // namespace

bool flash_attention_width_supported(std::int64_t width) { return width == 32 || width == 64 || width == 128; }

void cuda_flash_attention(const void* q, const void* k, const void* v, void* out, bool out_bf16,
                          const FlashAttentionShape& shape, cudaStream_t stream) {
  if (shape.heads == 0 || shape.queries == 0) return;
  if (out_bf16)
    launch_for_width<bf16>(q, k, v, out, shape, stream);
  else
    launch_for_width<float>(q, k, v, out, shape, stream);
}

}  // namespace tessera
