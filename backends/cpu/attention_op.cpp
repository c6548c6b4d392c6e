// The graph's attention op and its gradient (Backend::attention,
// attention_backward) on the CPU, operands heads first or tokens first
// (AttentionArgs).
// - f32: FlashAttention's loop over blocks of query rows, each block's
//   products through oneDNN's sgemm on the rows in place (no head
//   transposes), its scores and weights in a buffer that stays in the caches
//   (the [Tq, Tk] weights are never kept for the backward: its logsumexp is),
//   and a causal block's keys only up to its last row's.
//   prefers_attention_op is true for it. In the zoo GPT's training step
//   (2026-11-29, Zen 5) the graph's transposes, matmuls and softmax took
//   12.0 ms on one thread and 6.5 on two, this op 10.6 and 5.4. The op's
//   sgemm calls on one head's blocks run at 65-80% of the peak where
//   oneDNN's batched products reach 80-93%: what the skipped products and
//   the fusion gain, the smaller products mostly give back.
// - bf16 operands: a reference kernel, one head per thread in f32 (operands
//   widened exactly), the weights never rounded; matmul and softmax through
//   oneDNN run it faster, so the graph builds those instead.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include <oneapi/dnnl/dnnl.h>

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
#pragma omp parallel for schedule(static) if (threads > 1)
  for (std::int64_t head = 0; head < heads; ++head) body(head);
}

// Query rows per block of the f32 kernels: a block's scores, weights and
// their gradients (rows x Tk floats each) stay in the caches. 64 rather
// than 32: the zoo GPT's step spent 10.6 ms in the op against 11.8 on one
// thread (fewer, larger products; a causal head's blocks skip a quarter of
// its products instead of three eighths).
constexpr std::int64_t kBlockRows = 64;

// --- a block's rows of scores (rows x keys floats; row r sees keys [0, seen(r)), the rest weigh 0)
// in vector_math's vectors, compiled per instruction set by the target functions below.
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

struct ExpLess {  // e^(x - shift), x <= shift
  float shift;
  template <class V>
  [[gnu::always_inline]] V operator()(V x) const {
    return exp_fit(x - shift);
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
[[gnu::always_inline]] inline float lanes_sum(V v) {
  float sum = 0.0f;
  for (std::int64_t i = 0; i < kLanes<V>; ++i) sum += v[i];
  return sum;
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

// Each row's softmax over the keys it sees, and its logsumexp.
template <class V>
[[gnu::always_inline]] inline void softmax_rows(float* scores, std::int64_t rows, std::int64_t keys, const Head& h,
                                                std::int64_t first, float* lse) {
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = scores + r * keys;
    const std::int64_t seen = h.last(first + r) + 1;
    V high = splat<V>(-INFINITY);
    std::int64_t j = 0;
    for (; j + kLanes<V> <= seen; j += kLanes<V>) {
      const V x = load<V>(row + j);
      high = x > high ? x : high;
    }
    float max = -INFINITY;
    for (std::int64_t i = 0; i < kLanes<V>; ++i) max = std::max(max, high[i]);
    for (; j < seen; ++j) max = std::max(max, row[j]);
    for_vectors<V>(seen, ExpLess{max}, row, row);
    const float sum = [&] {
      V lanes{};
      std::int64_t i = 0;
      for (; i + kLanes<V> <= seen; i += kLanes<V>) lanes += load<V>(row + i);
      float total = lanes_sum(lanes);
      for (; i < seen; ++i) total += row[i];
      return total;
    }();
    for_vectors<V>(seen, Times{1.0f / sum}, row, row);
    std::fill(row + seen, row + keys, 0.0f);
    lse[first + r] = max + std::log(sum);
  }
}

// Each row's weights again, e^(score - logsumexp).
template <class V>
[[gnu::always_inline]] inline void weights_of_rows(float* scores, std::int64_t rows, std::int64_t keys, const Head& h,
                                                   std::int64_t first, const float* lse) {
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = scores + r * keys;
    const std::int64_t seen = h.last(first + r) + 1;
    for_vectors<V>(seen, ExpLess{lse[first + r]}, row, row);
    std::fill(row + seen, row + keys, 0.0f);
  }
}

// dP's rows become dS's: P (dP - rowsum(dout * out)) scale.
template <class V>
[[gnu::always_inline]] inline void score_gradient_rows(const float* weights, float* dweights, std::int64_t rows,
                                                       std::int64_t keys, const float* dout_rows,
                                                       const float* out_rows, std::int64_t ld, std::int64_t width,
                                                       float scale) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float d = dot<V>(dout_rows + r * ld, out_rows + r * ld, width);  // sum_j P_ij dP_ij
    for_vectors<V>(keys, ScoreGradient{d, scale}, dweights + r * keys, weights + r * keys, dweights + r * keys);
  }
}

using SoftmaxRows = void (*)(float*, std::int64_t, std::int64_t, const Head&, std::int64_t, float*);
using WeightsOfRows = void (*)(float*, std::int64_t, std::int64_t, const Head&, std::int64_t, const float*);
using ScoreGradientRows = void (*)(const float*, float*, std::int64_t, std::int64_t, const float*, const float*,
                                   std::int64_t, std::int64_t, float);

[[gnu::target("avx512f,fma")]] void softmax_rows_avx512(float* s, std::int64_t rows, std::int64_t keys,
                                                        const Head& h, std::int64_t first, float* lse) {
  softmax_rows<F16>(s, rows, keys, h, first, lse);
}
[[gnu::target("avx2,fma")]] void softmax_rows_avx2(float* s, std::int64_t rows, std::int64_t keys, const Head& h,
                                                   std::int64_t first, float* lse) {
  softmax_rows<F8>(s, rows, keys, h, first, lse);
}
void softmax_rows_sse(float* s, std::int64_t rows, std::int64_t keys, const Head& h, std::int64_t first, float* lse) {
  softmax_rows<F4>(s, rows, keys, h, first, lse);
}
[[gnu::target("avx512f,fma")]] void weights_of_rows_avx512(float* s, std::int64_t rows, std::int64_t keys,
                                                           const Head& h, std::int64_t first, const float* lse) {
  weights_of_rows<F16>(s, rows, keys, h, first, lse);
}
[[gnu::target("avx2,fma")]] void weights_of_rows_avx2(float* s, std::int64_t rows, std::int64_t keys, const Head& h,
                                                      std::int64_t first, const float* lse) {
  weights_of_rows<F8>(s, rows, keys, h, first, lse);
}
void weights_of_rows_sse(float* s, std::int64_t rows, std::int64_t keys, const Head& h, std::int64_t first,
                         const float* lse) {
  weights_of_rows<F4>(s, rows, keys, h, first, lse);
}
[[gnu::target("avx512f,fma")]] void score_gradient_rows_avx512(const float* p, float* ds, std::int64_t rows,
                                                               std::int64_t keys, const float* dout, const float* out,
                                                               std::int64_t ld, std::int64_t width, float scale) {
  score_gradient_rows<F16>(p, ds, rows, keys, dout, out, ld, width, scale);
}
[[gnu::target("avx2,fma")]] void score_gradient_rows_avx2(const float* p, float* ds, std::int64_t rows,
                                                          std::int64_t keys, const float* dout, const float* out,
                                                          std::int64_t ld, std::int64_t width, float scale) {
  score_gradient_rows<F8>(p, ds, rows, keys, dout, out, ld, width, scale);
}
void score_gradient_rows_sse(const float* p, float* ds, std::int64_t rows, std::int64_t keys, const float* dout,
                             const float* out, std::int64_t ld, std::int64_t width, float scale) {
  score_gradient_rows<F4>(p, ds, rows, keys, dout, out, ld, width, scale);
}

template <class F>
F widest(F avx512, F avx2, F sse) {
  const VectorIsa isa = widest_vector_isa();
  return isa == VectorIsa::avx512 ? avx512 : isa == VectorIsa::avx2 ? avx2 : sse;
}

// Row-major C = alpha op(A) op(B) + beta C on one head's rows, through
// oneDNN's sgemm (inside the heads' parallel loop it runs on its thread alone).
// A failure's status lands in `failed`, read after the loop.
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

// `rows` rows of `width` floats, `stride` apart, set to 0.
void zero_rows(float* first, std::int64_t rows, std::int64_t width, std::int64_t stride) {
  for (std::int64_t r = 0; r < rows; ++r) std::fill_n(first + r * stride, width, 0.0f);
}

// Keys the rows first .. first + rows - 1 see together: the last row's.
std::int64_t block_keys(const Head& h, std::int64_t first, std::int64_t rows) { return h.last(first + rows - 1) + 1; }

void blocked_attention(const Head& h, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                       const Tensor& logsumexp, float scale, int threads) {
  const std::int64_t ld = h.stride();
  int failed = dnnl_success;
  const HeadGemm gemm{&failed};
  for_each_head(h.count(q), threads, [&](std::int64_t head) {
    const float* qh = q.data<float>() + h.at(head, h.queries);
    const float* kh = k.data<float>() + h.at(head, h.keys);
    const float* vh = v.data<float>() + h.at(head, h.keys);
    float* oh = out.data<float>() + h.at(head, h.queries);
    float* lse = logsumexp.data<float>() + head * h.queries;
    std::vector<float> weights(static_cast<std::size_t>(kBlockRows * h.keys));
    static const SoftmaxRows softmax = widest(softmax_rows_avx512, softmax_rows_avx2, softmax_rows_sse);
    for (std::int64_t first = 0; first < h.queries; first += kBlockRows) {
      const std::int64_t rows = std::min(kBlockRows, h.queries - first), keys = block_keys(h, first, rows);
      if (keys == 0) {  // no keys (Tk = 0): nothing attended
        zero_rows(oh + first * ld, rows, h.width, ld);
        std::fill_n(lse + first, rows, -INFINITY);
        continue;
      }
      gemm('N', 'T', rows, keys, h.width, scale, qh + first * ld, ld, kh, ld, 0.0f, weights.data(), keys);
      softmax(weights.data(), rows, keys, h, first, lse);
      gemm('N', 'N', rows, h.width, keys, 1.0f, weights.data(), keys, vh, ld, 0.0f, oh + first * ld, ld);
    }
  });
  throw_if_failed(failed, "attention", q);
}

// The weights again from the scores and logsumexp, then per block
// dv += P^T dout, dP = dout v^T, dS = P (dP - rowsum(dout * out)) scale,
// dq = dS k and dk += dS^T q.
void blocked_attention_backward(const Head& h, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                const Tensor& logsumexp, const Tensor& dout, const Tensor& dq, const Tensor& dk,
                                const Tensor& dv, float scale, int threads) {
  const std::int64_t ld = h.stride();
  int failed = dnnl_success;
  const HeadGemm gemm{&failed};
  for_each_head(h.count(q), threads, [&](std::int64_t head) {
    const std::int64_t at_q = h.at(head, h.queries), at_k = h.at(head, h.keys);
    const float *qh = q.data<float>() + at_q, *kh = k.data<float>() + at_k, *vh = v.data<float>() + at_k;
    const float *oh = out.data<float>() + at_q, *doh = dout.data<float>() + at_q;
    float *dqh = dq.data<float>() + at_q, *dkh = dk.data<float>() + at_k, *dvh = dv.data<float>() + at_k;
    const float* lse = logsumexp.data<float>() + head * h.queries;
    std::vector<float> weights(static_cast<std::size_t>(kBlockRows * h.keys)), dweights(weights.size());
    static const WeightsOfRows weights_of =
        widest(weights_of_rows_avx512, weights_of_rows_avx2, weights_of_rows_sse);
    static const ScoreGradientRows score_gradient =
        widest(score_gradient_rows_avx512, score_gradient_rows_avx2, score_gradient_rows_sse);
    zero_rows(dkh, h.keys, h.width, ld);
    zero_rows(dvh, h.keys, h.width, ld);
    for (std::int64_t first = 0; first < h.queries; first += kBlockRows) {
      const std::int64_t rows = std::min(kBlockRows, h.queries - first), keys = block_keys(h, first, rows);
      if (keys == 0) {  // no keys (Tk = 0)
        zero_rows(dqh + first * ld, rows, h.width, ld);
        continue;
      }
      const float *q_rows = qh + first * ld, *dout_rows = doh + first * ld;
      gemm('N', 'T', rows, keys, h.width, scale, q_rows, ld, kh, ld, 0.0f, weights.data(), keys);
      weights_of(weights.data(), rows, keys, h, first, lse);
      gemm('T', 'N', keys, h.width, rows, 1.0f, weights.data(), keys, dout_rows, ld, 1.0f, dvh, ld);
      gemm('N', 'T', rows, keys, h.width, 1.0f, dout_rows, ld, vh, ld, 0.0f, dweights.data(), keys);
      score_gradient(weights.data(), dweights.data(), rows, keys, dout_rows, oh + first * ld, ld, h.width, scale);
      gemm('N', 'N', rows, h.width, keys, 1.0f, dweights.data(), keys, kh, ld, 0.0f, dqh + first * ld, ld);
      gemm('T', 'N', keys, h.width, rows, 1.0f, dweights.data(), keys, q_rows, ld, 1.0f, dkh, ld);
    }
  });
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

}  // namespace tessera
