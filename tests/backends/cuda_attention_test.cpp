// The CUDA backend's cached attention kernel body (backends/cuda/attention.hpp),
// checked on the host: its passes split over 32 lanes, combined in the warp
// kernel's shuffle tree, and over one, match the CPU backend for one query
// per sequence (a decode step) and several, widths below and above a warp's,
// and rows clamped to the cache; rows past the queries hold NaN, never read. The cases at the end (test suite "gpu", CUDA
// builds only) run the kernel, on a cache long enough to ask for more shared
// memory too.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cuda/attention.hpp"
#include "backends/registry.hpp"
#include "tests/gpu_test_util.hpp"
#include "tests/test_util.hpp"
#include "tessera_features.hpp"

using namespace tessera;
using namespace tessera::test;

namespace {

Backend& cpu() { return backend_for(Device::cpu(0)); }

constexpr double kRtol = 1e-5, kAtol = 1e-6;

CachedAttentionRows rows_of(const Shape& q, std::int64_t capacity, float scale) {
  return {.heads = q[1], .queries = q[2], .capacity = capacity, .width = q[3], .rows = q[0] * q[1] * q[2], .scale = scale};
}

// The warp kernel's combine: lane 0's total after shuffles down by lanes / 2, ..., 1.
template <typename Combine>
float tree_combine(std::vector<float> partials, Combine combine) {
  for (std::size_t offset = partials.size() / 2; offset > 0; offset /= 2)
    for (std::size_t l = 0; l < offset; ++l) partials[l] = combine(partials[l], partials[l + offset]);
  return partials[0];
}

// The kernel on the host, each row's passes split over `lanes` lanes.
std::vector<float> host_cached_attention(const Tensor& q, const Tensor& keys, const Tensor& values,
                                         const std::vector<std::int32_t>& positions, float scale, std::int64_t lanes) {
  const CachedAttentionRows a = rows_of(q.shape(), keys.shape()[2], scale);
  std::vector<float> out(static_cast<std::size_t>(q.numel())), scores(static_cast<std::size_t>(a.capacity));
  std::vector<float> partials(static_cast<std::size_t>(lanes));
  for (std::int64_t row = 0; row < a.rows; ++row) {
    const std::int64_t n = a.valid(positions.data(), row);
    for (std::int64_t l = 0; l < lanes; ++l)
      partials[static_cast<std::size_t>(l)] =
          cached_attention_scores(q.data<float>(), keys.data<float>(), scores.data(), a, row, n, l, lanes);
    const float max = tree_combine(partials, [](float x, float y) { return x < y ? y : x; });
    for (std::int64_t l = 0; l < lanes; ++l)
      partials[static_cast<std::size_t>(l)] = cached_attention_exp(scores.data(), n, max, l, lanes);
    const float sum = tree_combine(partials, [](float x, float y) { return x + y; });
    for (std::int64_t l = 0; l < lanes; ++l)
      cached_attention_write(values.data<float>(), scores.data(), out.data(), a, row, n, sum, l, lanes);
  }
  return out;
}

struct AttentionCase {
  Shape q;
  std::int64_t capacity;
  std::vector<std::int32_t> positions;
};

// One query per sequence at varied fills, three queries, and a width of 80
// (two and a half warps' columns).
const std::vector<AttentionCase> kCases = {
    {Shape{3, 2, 1, 64}, 40, {0, 17, 39}},
    {Shape{2, 4, 3, 8}, 16, {13, 2}},
    {Shape{1, 3, 1, 80}, 70, {45}},
};

// Rows past each sequence's last query hold NaN: a kernel that read one would show it.
void poison_unfilled_rows(Tensor& cache, std::int64_t queries, const std::vector<std::int32_t>& positions) {
  const Shape& s = cache.shape();
  for (std::int64_t e = 0; e < s.numel(); ++e)
    if (e / s[3] % s[2] > positions[static_cast<std::size_t>(e / (s[1] * s[2] * s[3]))] + queries - 1)
      cache.data<float>()[e] = NAN;
}

std::vector<float> cpu_cached_attention(const Tensor& q, const Tensor& keys, const Tensor& values,
                                        const std::vector<std::int32_t>& positions, float scale) {
  Tensor out = Tensor::empty(q.shape(), DType::f32);
  cpu().cached_attention(q, keys, values, Tensor::from_vector(positions, {q.shape()[0], 1}), out, scale);
  return out.to_vector<float>();
}

// A case's query, cache (rows past the queries NaN) and the CPU backend's result, from `seed`.
struct AttentionInputs {
  Tensor q, keys, values;
  std::vector<float> want;
};

AttentionInputs inputs_of(const AttentionCase& c, unsigned seed) {
  const Shape cache{c.q[0], c.q[1], c.capacity, c.q[3]};
  AttentionInputs in{random_tensor(c.q, seed, -2.0f, 2.0f), random_tensor(cache, seed + 1, -2.0f, 2.0f),
                     random_tensor(cache, seed + 2), {}};
  poison_unfilled_rows(in.keys, c.q[2], c.positions);
  poison_unfilled_rows(in.values, c.q[2], c.positions);
  in.want = cpu_cached_attention(in.q, in.keys, in.values, c.positions, 0.125f);
  return in;
}

}  // namespace

TEST_CASE("cuda cached attention, by one lane and by 32, matches the CPU backend") {
  for (const AttentionCase& c : kCases) {
    CAPTURE(c.q.str());
    const AttentionInputs in = inputs_of(c, 91);
    check_close(host_cached_attention(in.q, in.keys, in.values, c.positions, 0.125f, 1), in.want, kRtol, kAtol);
    check_close(host_cached_attention(in.q, in.keys, in.values, c.positions, 0.125f, 32), in.want, kRtol, kAtol);
  }
}

TEST_CASE("cuda cached attention clamps a row to the cache: a kernel cannot throw") {
  const CachedAttentionRows a{.heads = 2, .queries = 3, .capacity = 10, .width = 4, .rows = 12};
  const std::vector<std::int32_t> positions = {8, -2};
  CHECK(a.valid(positions.data(), 0) == 9);   // sequence 0, head 0, query 0: rows 0..8
  CHECK(a.valid(positions.data(), 2) == 10);  // query 2 would see row 10: clamped
  CHECK(a.valid(positions.data(), 6) == 0);   // sequence 1's first query would start at -2
  CHECK(a.valid(positions.data(), 8) == 1);
  CHECK(a.cache_offset(7) == 2 * 10 * 4);     // sequence 1, head 0
  // A row that sees nothing writes zeros, not 0/0.
  std::vector<float> values(40, 1.0f), scores(10), out(4 * 12, -1.0f);
  cached_attention_write(values.data(), scores.data(), out.data(), a, 6, 0, 0.0f, 0, 1);
  CHECK(out[24] == 0.0f);
  CHECK(out[27] == 0.0f);
}

// --- the kernel on a GPU ----------------------------------------------------------

#if TESSERA_HAVE_CUDA

TEST_CASE("cuda cached attention matches the CPU backend, on long caches too, and repeats bit for bit" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  CHECK(gpu().supports(OpKind::cached_attention, DType::f32));
  CHECK_FALSE(gpu().supports(OpKind::cached_attention, DType::bf16));
  std::vector<AttentionCase> cases = kCases;
  cases.push_back({Shape{2, 2, 1, 64}, 1024, {1000, 3}});  // four warps a block
  cases.push_back({Shape{1, 2, 1, 16}, 16384, {16000}});   // 64 KiB of scores: past the default shared memory
  for (const AttentionCase& c : cases) {
    CAPTURE(c.q.str());
    CAPTURE(c.capacity);
    const AttentionInputs in = inputs_of(c, 94);
    const Tensor positions = to_gpu(Tensor::from_vector(c.positions, {c.q[0], 1}));
    std::vector<float> first;
    for (int run = 0; run < 2; ++run) {
      Tensor out = Tensor::empty(c.q, DType::f32, Device::cuda(0));
      gpu().cached_attention(to_gpu(in.q), to_gpu(in.keys), to_gpu(in.values), positions, out, 0.125f);
      const std::vector<float> got = to_host(out).to_vector<float>();
      check_close(got, in.want, 1e-4, 1e-5);
      if (run == 0) first = got;
      else CHECK(std::memcmp(got.data(), first.data(), got.size() * sizeof(float)) == 0);
    }
  }
}

#endif
