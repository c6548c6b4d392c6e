// Random fills from the Philox counter-based generator (backends/philox.hpp).
#include <cmath>

#include "backends/cpu/parallel_for.hpp"
#include "backends/cpu/cpu_backend.hpp"
#include "backends/philox.hpp"

namespace tessera {
namespace {

template <typename F>
void fill_f32(const Tensor& out, int threads, F value_at) {
  if (out.dtype() != DType::f32)
    throw UnsupportedError("random fills need an f32 tensor on the CPU, got " + out.describe());
  float* p = out.data<float>();
  std::int64_t n = out.numel();
  KernelScope scope(threads);
  parallel_for(n, n > 16384, [&](std::int64_t i) { p[i] = value_at(static_cast<std::uint64_t>(i)); });
}

}  // namespace

void CpuBackend::run_random_uniform(const Tensor& out, std::uint64_t seed, std::uint64_t offset,
                                    float low, float high) {
  // u < 1, but low + (high - low) * u can still round up onto `high` (u = 1 - 2^-24
  // in [1, 3) gives 3); such a value becomes the largest float below `high`.
  const float top = std::nextafter(high, low);
  fill_f32(out, threads(), [&](std::uint64_t i) {
    float r = low + (high - low) * philox::uniform01(philox::bits(seed, offset + i));
    return r < high ? r : top;
  });
}

void CpuBackend::run_random_normal(const Tensor& out, std::uint64_t seed, std::uint64_t offset,
                                   float mean, float stddev) {
  fill_f32(out, threads(), [&](std::uint64_t i) {
    return mean + stddev * philox::normal(seed, offset + i);
  });
}

void CpuBackend::run_dropout(const Tensor& x, const Tensor& out, float rate, std::uint64_t seed,
                             std::uint64_t offset) {
  if (x.dtype() != DType::f32) throw UnsupportedError("dropout needs f32 on the CPU, got " + x.describe());
  const float* px = x.data<float>();
  float* po = out.data<float>();
  float scale = 1.0f / (1.0f - rate);
  std::int64_t n = x.numel();
  KernelScope scope(threads());
  parallel_for(n, n > 16384, [&](std::int64_t i) {
    bool keep = philox::uniform01(philox::bits(seed, offset + static_cast<std::uint64_t>(i))) >= rate;
    po[i] = keep ? px[i] * scale : 0.0f;
  });
}

}  // namespace tessera
