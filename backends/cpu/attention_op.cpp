// The graph's attention op and its gradient (Backend::attention,
// attention_backward) on the CPU: a reference kernel, one head per thread in
// f32 (bf16 operands widened exactly), the weights never rounded; operands
// heads first or tokens first (AttentionArgs). The CPU's
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

// body(head) for every head, heads spread over `threads` threads.
template <typename Body>
void for_each_head(std::int64_t heads, int threads, Body&& body) {
  KernelScope scope(threads);
#pragma omp parallel for schedule(static) if (heads > 1 && threads > 1)
  for (std::int64_t head = 0; head < heads; ++head) body(head);
}

}  // namespace

void CpuBackend::run_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                               const Tensor& logsumexp, const AttentionArgs& args) {
  const Head h = head_of(q, k, args);
  const float scale = args.scale;
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

}  // namespace tessera
