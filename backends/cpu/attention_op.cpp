// The graph's attention op and its gradient (Backend::attention,
// attention_backward) on the CPU: a reference kernel, one head per thread in
// f32 (bf16 operands widened exactly), the weights never rounded. The CPU's
// graphs build attention as matmul, softmax and matmul, which run faster
// through oneDNN (prefers_attention_op is false): this kernel is what a
// GPU's fused kernels and the graph's rules are checked against.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"

namespace tessera {
namespace {

// A tensor's elements as f32, and back.
std::vector<float> widened(const Tensor& t, std::int64_t first, std::int64_t count) {
  std::vector<float> out(static_cast<std::size_t>(count));
  if (t.dtype() == DType::bf16)
    for (std::int64_t i = 0; i < count; ++i) out[static_cast<std::size_t>(i)] = to_f32(t.data<bf16>()[first + i]);
  else
    std::copy_n(t.data<float>() + first, count, out.begin());
  return out;
}

void store(const Tensor& t, std::int64_t first, const std::vector<float>& values) {
  if (t.dtype() == DType::bf16)
    for (std::size_t i = 0; i < values.size(); ++i) t.data<bf16>()[first + static_cast<std::int64_t>(i)] = to_bf16(values[i]);
  else
    std::copy(values.begin(), values.end(), t.data<float>() + first);
}

// One head's sizes: Tq queries and Tk keys of width K; query i sees keys 0 .. last(i).
struct Head {
  std::int64_t queries, keys, width;
  bool causal;
  std::int64_t last(std::int64_t i) const { return causal ? std::min(i + keys - queries, keys - 1) : keys - 1; }
  float dot(const float* a, const float* b) const {
    float sum = 0.0f;
    for (std::int64_t c = 0; c < width; ++c) sum += a[c] * b[c];
    return sum;
  }
};

Head head_of(const Tensor& q, const Tensor& k, bool causal) {
  const Shape& s = q.shape();
  return Head{s[s.rank() - 2], k.shape()[s.rank() - 2], s[s.rank() - 1], causal};
}

}  // namespace

void CpuBackend::run_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                               const Tensor& logsumexp, float scale, bool causal) {
  const Head h = head_of(q, k, causal);
  const std::int64_t heads = h.queries * h.width == 0 ? 0 : q.numel() / (h.queries * h.width);
  KernelScope scope(threads());
#pragma omp parallel for schedule(static) if (heads > 1 && threads() > 1)
  for (std::int64_t head = 0; head < heads; ++head) {
    const std::int64_t at_q = head * h.queries * h.width, at_k = head * h.keys * h.width;
    const std::vector<float> qh = widened(q, at_q, h.queries * h.width), kh = widened(k, at_k, h.keys * h.width),
                             vh = widened(v, at_k, h.keys * h.width);
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
    store(out, at_q, oh);
  }
}

void CpuBackend::run_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                        const Tensor& logsumexp, const Tensor& dout, const Tensor& dq,
                                        const Tensor& dk, const Tensor& dv, float scale, bool causal) {
  const Head h = head_of(q, k, causal);
  const std::int64_t heads = q.numel() / std::max<std::int64_t>(1, h.queries * h.width);
  KernelScope scope(threads());
#pragma omp parallel for schedule(static) if (heads > 1 && threads() > 1)
  for (std::int64_t head = 0; head < heads; ++head) {
    const std::int64_t at_q = head * h.queries * h.width, at_k = head * h.keys * h.width;
    const std::int64_t q_size = h.queries * h.width, k_size = h.keys * h.width;
    const std::vector<float> qh = widened(q, at_q, q_size), kh = widened(k, at_k, k_size),
                             vh = widened(v, at_k, k_size), oh = widened(out, at_q, q_size),
                             doh = widened(dout, at_q, q_size);
    std::vector<float> dqh(static_cast<std::size_t>(q_size), 0.0f), dkh(static_cast<std::size_t>(k_size), 0.0f),
        dvh(static_cast<std::size_t>(k_size), 0.0f);
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
    store(dq, at_q, dqh);
    store(dk, at_k, dkh);
    store(dv, at_k, dvh);
  }
}

}  // namespace tessera
