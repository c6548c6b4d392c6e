// The graph's attention op and its gradient (Backend::attention,
// attention_backward) on the CPU, operands heads first or tokens first
// (AttentionArgs).
// - f32: FlashAttention's loop over blocks of query rows, each block's
//   products through oneDNN's sgemm on the rows in place (no head
//   transposes), its scores and weights in a buffer that stays in the caches
//   (the [Tq, Tk] weights are never kept for the backward: its logsumexp is),
//   and a causal block's keys only up to its last row's; the softmax in
//   whole vectors (vector_math's exp), each row's 1 / sum applied to its
//   output row. prefers_attention_op is true for it, and inference's fused
//   attention (supports_fused_attention, f32) runs its forward. In the zoo GPT's
//   training step (2026-11-29, Zen 5, --profile) the graph's transposes,
//   matmuls and softmax took 12.0 ms on one thread and 6.5 on two, this op
//   10.3-10.6 and 5.3-5.5 (three runs).
// - bf16 operands: a reference kernel, one head per thread in f32 (operands
//   widened exactly), the weights never rounded; matmul and softmax through
//   oneDNN run it faster, so the graph builds those instead.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.h>

#include "backends/cpu/parallel_for.hpp"
#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/vector_math.hpp"

namespace tessera {
namespace {

// One head's sizes: Tq queries and Tk keys of width K; query i sees keys 0 ..
// last(i). Head `index` (batches x heads, in that order) of an operand with
// `rows` rows starts at at(index, rows) elements, its rows stride() apart:
// [..., T, K] (heads first) or [B, T, H, K] (tokens first).
struct Head {
  std::int64_t queries, keys, width, heads;  // heads: H of [B, T, H, K], or every head (heads first)
  bool causal, tokens_first;
  std::int64_t last(std::int64_t i) const { return causal ? std::min(i + keys - queries, keys - 1) : keys - 1; }
  std::int64_t count(const Tensor& q) const { return queries * width == 0 ? 0 : q.numel() / (queries * width); }
  std::int64_t at(std::int64_t index, std::int64_t rows) const {
    if (!tokens_first) return index * rows * width;
    return (index / heads) * rows * heads * width + (index % heads) * width;
  }
  std::int64_t stride() const { return tokens_first ? heads * width : width; }
  float dot(const float* a, const float* b) const {
    float sum = 0.0f;
    for (std::int64_t c = 0; c < width; ++c) sum += a[c] * b[c];
    return sum;
  }
};

Head head_of(const Tensor& q, const Tensor& k, const AttentionArgs& args) {
  const Shape& s = q.shape();
  if (args.tokens_first) return Head{s[1], k.shape()[1], s[3], s[2], args.causal, true};
  const int rank = s.rank();
  return Head{s[rank - 2], k.shape()[rank - 2], s[rank - 1], 0, args.causal, false};
}

// Head `index`'s `rows` rows of `t` as f32, and back.
std::vector<float> widened(const Tensor& t, const Head& h, std::int64_t index, std::int64_t rows) {
  std::vector<float> out(static_cast<std::size_t>(rows * h.width));
  const std::int64_t first = h.at(index, rows);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < h.width; ++c) {
      const std::int64_t i = first + r * h.stride() + c;
      out[static_cast<std::size_t>(r * h.width + c)] = t.dtype() == DType::bf16 ? to_f32(t.data<bf16>()[i]) : t.data<float>()[i];
    }
  return out;
}

void store(const Tensor& t, const Head& h, std::int64_t index, std::int64_t rows, const std::vector<float>& values) {
  const std::int64_t first = h.at(index, rows);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < h.width; ++c) {
      const std::int64_t i = first + r * h.stride() + c;
      const float value = values[static_cast<std::size_t>(r * h.width + c)];
      if (t.dtype() == DType::bf16) t.data<bf16>()[i] = to_bf16(value);
      else t.data<float>()[i] = value;
    }
}

// body(head) for every head, heads spread over `threads` threads. Inside
// the parallel region oneDNN's sgemm runs on its thread alone, however many
// heads there are, so a head's sums are in the same order on every mesh.
template <typename Body>
void for_each_head(std::int64_t heads, int threads, Body&& body) {
  KernelScope scope(threads);
  parallel_for(heads, threads > 1, body);
}

// Query rows per block of the f32 kernels: a block's scores, weights and
// their gradients (rows x Tk floats each) stay in the caches. 64 rather
// than 32: the zoo GPT's step spent 10.6 ms in the op against 11.8 on one
// thread (fewer, larger products, though blocks of 64 skip a quarter of a
// causal head's products and blocks of 32 three eighths).
constexpr std::int64_t kBlockRows = 64;

// --- a head in blocks of query rows, in vector_math's vectors, compiled per
// instruction set by the target functions below. A block's scores lie in
// rows of `padded` floats (its keys rounded up to whole vectors); row r sees
// keys [0, seen(r)), and every lane past them weighs 0, so each row is whole
// vectors without a tail of its own.
using vector_math::exp_fit;
using vector_math::F16;
using vector_math::F4;
using vector_math::F8;
using vector_math::for_vectors;
using vector_math::kLanes;
using vector_math::load;
using vector_math::load_first;
using vector_math::splat;
using vector_math::store;

// The functions for_vectors applies; functors rather than lambdas, so that
// they inline into the target functions.
struct Times {
  float by;
  template <class V>
  [[gnu::always_inline]] V operator()(V x) const {
    return x * by;
  }
};

struct ScoreGradient {  // dS = P (dP - d) scale
  float d, scale;
  template <class V>
  [[gnu::always_inline]] V operator()(V p, V dp) const {
    return p * (dp - d) * scale;
  }
};

template <class V>
constexpr std::int64_t whole_vectors(std::int64_t n) {
  return (n + kLanes<V> - 1) / kLanes<V> * kLanes<V>;
}

template <class V>
[[gnu::always_inline]] inline float lanes_sum(V v) {
  float sum = 0.0f;
  for (std::int64_t i = 0; i < kLanes<V>; ++i) sum += v[i];
  return sum;
}

template <class V>
[[gnu::always_inline]] inline float lanes_max(V v) {
  float max = v[0];
  for (std::int64_t i = 1; i < kLanes<V>; ++i) max = std::max(max, v[i]);
  return max;
}

// Lane i of the vector at column j: column j + i.
template <class V>
[[gnu::always_inline]] inline V columns_from(std::int64_t j) {
  static constexpr float kIota[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  return load<V>(kIota) + static_cast<float>(j);
}

// sum a[i] b[i] over [0, n), in vector lanes then across them.
template <class V>
[[gnu::always_inline]] inline float dot(const float* a, const float* b, std::int64_t n) {
  V acc{};
  std::int64_t i = 0;
  for (; i + kLanes<V> <= n; i += kLanes<V>) acc += load<V>(a + i) * load<V>(b + i);
  const auto rest = static_cast<std::size_t>(n - i) * sizeof(float);
  if (rest) acc += load_first<V>(a + i, rest) * load_first<V>(b + i, rest);
  return lanes_sum(acc);
}

// Each row's e^(score - max) over the keys it sees, its logsumexp, and 1 /
// the sum of its e^: out's rows are scaled by that after the product (W
// multiplications a row rather than Tk).
template <class V>
[[gnu::always_inline]] inline void exp_rows(float* scores, std::int64_t rows, std::int64_t padded, const Head& h,
                                            std::int64_t first, float* lse, float* inverse_sum) {
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = scores + r * padded;
    const float seen = static_cast<float>(h.last(first + r) + 1);
    const V lowest = splat<V>(-INFINITY);
    V high = lowest;
    for (std::int64_t j = 0; j < padded; j += kLanes<V>) {
      const V x = columns_from<V>(j) < seen ? load<V>(row + j) : lowest;
      high = x > high ? x : high;
    }
    const float max = lanes_max(high);
    V sums{};
    for (std::int64_t j = 0; j < padded; j += kLanes<V>) {
      const V e = columns_from<V>(j) < seen ? exp_fit(load<V>(row + j) - max) : V{};
      store(row + j, e);
      sums += e;
    }
    const float sum = lanes_sum(sums);
    lse[first + r] = max + std::log(sum);
    inverse_sum[r] = 1.0f / sum;
  }
}

// Each row's weights again, e^(score - logsumexp).
template <class V>
[[gnu::always_inline]] inline void weights_of_rows(float* scores, std::int64_t rows, std::int64_t padded,
                                                   const Head& h, std::int64_t first, const float* lse) {
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = scores + r * padded;
    const float seen = static_cast<float>(h.last(first + r) + 1), shift = lse[first + r];
    for (std::int64_t j = 0; j < padded; j += kLanes<V>)
      store(row + j, columns_from<V>(j) < seen ? exp_fit(load<V>(row + j) - shift) : V{});
  }
}

// dP's rows become dS's: P (dP - rowsum(dout * out)) scale.
template <class V>
[[gnu::always_inline]] inline void score_gradient_rows(const float* weights, float* dweights, std::int64_t rows,
                                                       std::int64_t padded, const float* dout_rows,
                                                       const float* out_rows, std::int64_t ld, std::int64_t width,
                                                       float scale) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float d = dot<V>(dout_rows + r * ld, out_rows + r * ld, width);  // sum_j P_ij dP_ij
    for_vectors<V>(padded, ScoreGradient{d, scale}, dweights + r * padded, weights + r * padded, dweights + r * padded);
  }
}

// `rows` rows of `width` floats, `stride` apart, set to 0.
void zero_rows(float* first, std::int64_t rows, std::int64_t width, std::int64_t stride) {
  for (std::int64_t r = 0; r < rows; ++r) std::fill_n(first + r * stride, width, 0.0f);
}

// Keys the rows first .. first + rows - 1 see together: the last row's.
std::int64_t block_keys(const Head& h, std::int64_t first, std::int64_t rows) { return h.last(first + rows - 1) + 1; }

// Row-major C = alpha op(A) op(B) + beta C on one head's rows, through
// oneDNN's sgemm (inside the heads' parallel loop it runs on its thread
// alone). It packs its operands, which the step's heads need: their rows lie
// H x K apart and come fresh from memory. Register-tiled products of our own
// that read the rows in place (tried 2026-11-29) ran the op 5-10% faster on
// operands in cache and 10% slower in the step, prefetching the next head
// or not. A failure's status lands in `failed`, read after the loop.
struct HeadGemm {
  int* failed;
  void operator()(char ta, char tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
                  std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) const {
    if (m == 0 || n == 0) return;
    const dnnl_status_t status = dnnl_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (status != dnnl_success) {
#pragma omp atomic write
      *failed = static_cast<int>(status);
    }
  }
};

void throw_if_failed(int failed, const char* op, const Tensor& q) {
  if (failed != dnnl_success)
    throw Error(std::string(op) + ": oneDNN's sgemm failed (status " + std::to_string(failed) + ") for q " +
                q.describe());
}

// One call's operands, the heads' layout and the scale, and the scratch
// of its threads: `scratch_per_thread` floats each from `scratch`, allocated
// once a call rather than once a head.
struct Operands {
  Head h;
  float scale;
  HeadGemm gemm;
  const float *q, *k, *v, *out, *dout;
  float *attended, *logsumexp, *dq, *dk, *dv;
  float* scratch;
  std::int64_t scratch_per_thread;
  float* thread_scratch() const { return scratch + omp_get_thread_num() * scratch_per_thread; }
};

// Floats of a block of scores: rows of Tk rounded up to whole vectors of
// the widest instruction set (16 lanes), which covers the narrower ones.
std::int64_t block_floats(const Head& h) { return kBlockRows * ((h.keys + 15) / 16 * 16); }

// Zeros: the products write a block's `keys` columns; the rest of its padded
// rows hold 0 or an earlier block's finite values, which the masks weigh 0.
std::vector<float> scratch_of(const Head& h, int threads, int buffers) {
  return std::vector<float>(static_cast<std::size_t>(std::max(threads, 1) * buffers * block_floats(h)));
}

// Head `head` forward: per block of query rows, S = scale q k^T over the
// keys the block sees, the e^ of each row in place, out = S v scaled by each
// row's 1 / sum.
template <class V>
[[gnu::always_inline]] inline void attend_head(const Operands& o, std::int64_t head) {
  const Head& h = o.h;
  const std::int64_t ld = h.stride(), at_q = h.at(head, h.queries), at_k = h.at(head, h.keys);
  const float *qh = o.q + at_q, *kh = o.k + at_k, *vh = o.v + at_k;
  float *oh = o.attended + at_q, *lse = o.logsumexp + head * h.queries;
  float* weights = o.thread_scratch();
  float inverse_sum[kBlockRows];
  for (std::int64_t first = 0; first < h.queries; first += kBlockRows) {
    const std::int64_t rows = std::min(kBlockRows, h.queries - first), keys = block_keys(h, first, rows);
    if (keys == 0) {  // no keys (Tk = 0): nothing attended
      zero_rows(oh + first * ld, rows, h.width, ld);
      std::fill_n(lse + first, rows, -INFINITY);
      continue;
    }
    const std::int64_t padded = whole_vectors<V>(keys);
    float* out_rows = oh + first * ld;
    o.gemm('N', 'T', rows, keys, h.width, o.scale, qh + first * ld, ld, kh, ld, 0.0f, weights, padded);
    exp_rows<V>(weights, rows, padded, h, first, lse, inverse_sum);
    o.gemm('N', 'N', rows, h.width, keys, 1.0f, weights, padded, vh, ld, 0.0f, out_rows, ld);
    for (std::int64_t r = 0; r < rows; ++r)
      for_vectors<V>(h.width, Times{inverse_sum[r]}, out_rows + r * ld, out_rows + r * ld);
  }
}

// Head `head` backward: per block, the weights P again from the scores and
// logsumexp, dv += P^T dout, dP = dout v^T, dS = P (dP - rowsum(dout * out))
// scale, dq = dS k and dk += dS^T q.
template <class V>
[[gnu::always_inline]] inline void attend_head_backward(const Operands& o, std::int64_t head) {
  const Head& h = o.h;
  const std::int64_t ld = h.stride(), at_q = h.at(head, h.queries), at_k = h.at(head, h.keys);
  const float *qh = o.q + at_q, *kh = o.k + at_k, *vh = o.v + at_k, *oh = o.out + at_q, *doh = o.dout + at_q;
  float *dqh = o.dq + at_q, *dkh = o.dk + at_k, *dvh = o.dv + at_k;
  const float* lse = o.logsumexp + head * h.queries;
  float* p = o.thread_scratch();
  float* ds = p + block_floats(h);
  zero_rows(dkh, h.keys, h.width, ld);
  zero_rows(dvh, h.keys, h.width, ld);
  for (std::int64_t first = 0; first < h.queries; first += kBlockRows) {
    const std::int64_t rows = std::min(kBlockRows, h.queries - first), keys = block_keys(h, first, rows);
    if (keys == 0) {  // no keys (Tk = 0)
      zero_rows(dqh + first * ld, rows, h.width, ld);
      continue;
    }
    const std::int64_t padded = whole_vectors<V>(keys);
    const float *q_rows = qh + first * ld, *dout_rows = doh + first * ld;
    o.gemm('N', 'T', rows, keys, h.width, o.scale, q_rows, ld, kh, ld, 0.0f, p, padded);
    weights_of_rows<V>(p, rows, padded, h, first, lse);
    o.gemm('T', 'N', keys, h.width, rows, 1.0f, p, padded, dout_rows, ld, 1.0f, dvh, ld);
    o.gemm('N', 'T', rows, keys, h.width, 1.0f, dout_rows, ld, vh, ld, 0.0f, ds, padded);
    score_gradient_rows<V>(p, ds, rows, padded, dout_rows, oh + first * ld, ld, h.width, o.scale);
    o.gemm('N', 'N', rows, h.width, keys, 1.0f, ds, padded, kh, ld, 0.0f, dqh + first * ld, ld);
    o.gemm('T', 'N', keys, h.width, rows, 1.0f, ds, padded, q_rows, ld, 1.0f, dkh, ld);
  }
}

[[gnu::target("avx512f,fma")]] void attend_head_avx512(const Operands& o, std::int64_t head) {
  attend_head<F16>(o, head);
}
[[gnu::target("avx2,fma")]] void attend_head_avx2(const Operands& o, std::int64_t head) { attend_head<F8>(o, head); }
void attend_head_sse(const Operands& o, std::int64_t head) { attend_head<F4>(o, head); }
[[gnu::target("avx512f,fma")]] void attend_head_backward_avx512(const Operands& o, std::int64_t head) {
  attend_head_backward<F16>(o, head);
}
[[gnu::target("avx2,fma")]] void attend_head_backward_avx2(const Operands& o, std::int64_t head) {
  attend_head_backward<F8>(o, head);
}
void attend_head_backward_sse(const Operands& o, std::int64_t head) { attend_head_backward<F4>(o, head); }

using HeadKernel = void (*)(const Operands&, std::int64_t);

// Without AVX2 (VectorIsa::scalar for GELU), SSE2's 4 lanes: every x86-64 has them.
HeadKernel widest(HeadKernel avx512, HeadKernel avx2, HeadKernel sse) {
  const VectorIsa isa = widest_vector_isa();
  return isa == VectorIsa::avx512 ? avx512 : isa == VectorIsa::avx2 ? avx2 : sse;
}

void blocked_attention(const Head& h, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                       const Tensor& logsumexp, float scale, int threads) {
  int failed = dnnl_success;
  std::vector<float> scratch = scratch_of(h, threads, 1);
  const Operands o{.h = h, .scale = scale, .gemm = {&failed}, .q = q.data<float>(), .k = k.data<float>(),
                   .v = v.data<float>(), .out = nullptr, .dout = nullptr, .attended = out.data<float>(),
                   .logsumexp = logsumexp.data<float>(), .dq = nullptr, .dk = nullptr, .dv = nullptr,
                   .scratch = scratch.data(), .scratch_per_thread = block_floats(h)};
  static const HeadKernel kernel = widest(attend_head_avx512, attend_head_avx2, attend_head_sse);
  for_each_head(h.count(q), threads, [&](std::int64_t head) { kernel(o, head); });
  throw_if_failed(failed, "attention", q);
}

void blocked_attention_backward(const Head& h, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                const Tensor& logsumexp, const Tensor& dout, const Tensor& dq, const Tensor& dk,
                                const Tensor& dv, float scale, int threads) {
  int failed = dnnl_success;
  std::vector<float> scratch = scratch_of(h, threads, 2);  // the weights and their gradients
  const Operands o{.h = h, .scale = scale, .gemm = {&failed}, .q = q.data<float>(), .k = k.data<float>(),
                   .v = v.data<float>(), .out = out.data<float>(), .dout = dout.data<float>(), .attended = nullptr,
                   .logsumexp = logsumexp.data<float>(), .dq = dq.data<float>(), .dk = dk.data<float>(),
                   .dv = dv.data<float>(), .scratch = scratch.data(), .scratch_per_thread = 2 * block_floats(h)};
  static const HeadKernel kernel =
      widest(attend_head_backward_avx512, attend_head_backward_avx2, attend_head_backward_sse);
  for_each_head(h.count(q), threads, [&](std::int64_t head) { kernel(o, head); });
  throw_if_failed(failed, "attention backward", q);
}

}  // namespace

void CpuBackend::run_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                               const Tensor& logsumexp, const AttentionArgs& args) {
  const Head h = head_of(q, k, args);
  const float scale = args.scale;
  if (q.dtype() == DType::f32 && out.dtype() == DType::f32)
    return blocked_attention(h, q, k, v, out, logsumexp, scale, threads());
  for_each_head(h.count(q), threads(), [&](std::int64_t head) {
    const std::vector<float> qh = widened(q, h, head, h.queries), kh = widened(k, h, head, h.keys),
                             vh = widened(v, h, head, h.keys);
    std::vector<float> oh(static_cast<std::size_t>(h.queries * h.width), 0.0f), scores(static_cast<std::size_t>(h.keys));
    float* lse = logsumexp.data<float>() + head * h.queries;
    for (std::int64_t i = 0; i < h.queries; ++i) {
      const std::int64_t last = h.last(i);
      float max = -INFINITY;
      for (std::int64_t j = 0; j <= last; ++j) {
        scores[j] = scale * h.dot(&qh[i * h.width], &kh[j * h.width]);
        max = std::max(max, scores[j]);
      }
      float sum = 0.0f;
      float* row = &oh[i * h.width];
      for (std::int64_t j = 0; j <= last; ++j) {
        const float p = std::exp(scores[j] - max);
        sum += p;
        for (std::int64_t c = 0; c < h.width; ++c) row[c] += p * vh[j * h.width + c];
      }
      for (std::int64_t c = 0; c < h.width && sum > 0.0f; ++c) row[c] /= sum;
      lse[i] = sum > 0.0f ? max + std::log(sum) : -INFINITY;
    }
    store(out, h, head, h.queries, oh);
  });
}

void CpuBackend::run_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                        const Tensor& logsumexp, const Tensor& dout, const Tensor& dq,
                                        const Tensor& dk, const Tensor& dv, const AttentionArgs& args) {
  const Head h = head_of(q, k, args);
  const float scale = args.scale;
  if (q.dtype() == DType::f32 && dq.dtype() == DType::f32)
    return blocked_attention_backward(h, q, k, v, out, logsumexp, dout, dq, dk, dv, scale, threads());
  for_each_head(h.count(q), threads(), [&](std::int64_t head) {
    const std::vector<float> qh = widened(q, h, head, h.queries), kh = widened(k, h, head, h.keys),
                             vh = widened(v, h, head, h.keys), oh = widened(out, h, head, h.queries),
                             doh = widened(dout, h, head, h.queries);
    std::vector<float> dqh(qh.size(), 0.0f), dkh(kh.size(), 0.0f), dvh(kh.size(), 0.0f);
    const float* lse = logsumexp.data<float>() + head * h.queries;
    for (std::int64_t i = 0; i < h.queries; ++i) {
      const float* qi = &qh[i * h.width];
      const float* doi = &doh[i * h.width];
      const float d = h.dot(doi, &oh[i * h.width]);  // sum_j P_ij dP_ij, as rowsum(dout * out)
      for (std::int64_t j = 0; j <= h.last(i); ++j) {
        const float p = std::exp(scale * h.dot(qi, &kh[j * h.width]) - lse[i]);
        const float ds = p * (h.dot(doi, &vh[j * h.width]) - d) * scale;
        for (std::int64_t c = 0; c < h.width; ++c) {
          dvh[j * h.width + c] += p * doi[c];
          dqh[i * h.width + c] += ds * kh[j * h.width + c];
          dkh[j * h.width + c] += ds * qi[c];
        }
      }
    }
    store(dq, h, head, h.queries, dqh);
    store(dk, h, head, h.keys, dkh);
    store(dv, h, head, h.keys, dvh);
  });
}

bool CpuBackend::prefers_attention_op(DType operands, DType out, std::int64_t) const {
  return operands == DType::f32 && out == DType::f32;
}

// Inference's attention (fusion.hpp) in f32: the attention op's forward
// kernel, its logsumexp thrown away.
bool CpuBackend::supports_fused_attention(DType stored, DType multiply, DType out, std::int64_t) const {
  return stored == DType::f32 && multiply == DType::f32 && out == DType::f32;
}

void CpuBackend::run_fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                     const FusedAttentionArgs& args) {
  const bool tokens_first = args.q_tokens_first;
  if (args.k_tokens_first == tokens_first && args.v_tokens_first == tokens_first &&
      args.out_tokens_first == tokens_first) {
    const Head h = head_of(q, k, AttentionArgs{.scale = args.scale, .causal = args.causal, .tokens_first = tokens_first});
    const Tensor logsumexp = scratch_tensor("fused attention logsumexp", Shape{h.count(q) * h.queries}, DType::f32);
    return blocked_attention(h, q, k, v, out, logsumexp, args.scale, threads());
  }
  // Layouts that differ (a head transpose the plan left, as something else
  // reads it): the tokens-first operands copied heads first.
  const std::vector<int> swap{0, 2, 1, 3};
  auto swapped = [](const Shape& s) { return Shape{s[0], s[2], s[1], s[3]}; };
  auto heads_first = [&](const Tensor& t, bool is_tokens_first, const std::string& role) {
    if (!is_tokens_first) return t;
    Tensor copy = scratch_tensor("fused attention " + role, swapped(t.shape()), DType::f32);
    run_transpose(t, copy, swap);
    return copy;
  };
  const Tensor product =
      args.out_tokens_first ? scratch_tensor("fused attention out", swapped(out.shape()), DType::f32) : out;
  FusedAttentionArgs uniform{.scale = args.scale, .causal = args.causal, .multiply = args.multiply};
  run_fused_attention(heads_first(q, args.q_tokens_first, "q"), heads_first(k, args.k_tokens_first, "k"),
                      heads_first(v, args.v_tokens_first, "v"), product, uniform);
  if (args.out_tokens_first) run_transpose(product, out, swap);
}

}  // namespace tessera
