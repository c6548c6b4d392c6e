// backends/cpu/gelu.hpp's GELU (erf form) and its derivative against the
// formulas in double, over the whole range the fits cover and past it, and
// the CPU backend's uses of them (the unary op and its gradient, a matmul's
// activation), whichever kernels it picks on this CPU.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <numbers>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/gelu.hpp"
#include "backends/registry.hpp"
#include "tests/test_util.hpp"

using namespace tessera;
using namespace tessera::test;

namespace {

double gelu_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

double gelu_derivative_ref(double x) {
  return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi);
}

// x from -10 to 10 in steps of 1/1024 (every element of the fits' ranges and
// past them) and far out, n not a multiple of 8 or 16 so the padded last vector is used.
std::vector<float> grid() {
  std::vector<float> x;
  for (int i = -10 * 1024; i <= 10 * 1024; ++i) x.push_back(static_cast<float>(i) / 1024.0f);
  for (float far : {87.5f, 100.0f, 1e30f, 3e38f}) {  // past the clamps; x² overflows at the last two
    x.push_back(far);
    x.push_back(-far);
  }
  return x;
}

// The kernels this CPU runs: every test below checks each.
std::vector<VectorIsa> kernels() {
  std::vector<VectorIsa> runs;
  for (VectorIsa k : {VectorIsa::scalar, VectorIsa::avx2, VectorIsa::avx512})
    if (vector_isa_runs(k)) runs.push_back(k);
  return runs;
}

}  // namespace

TEST_CASE("the widest GELU kernel this CPU runs is the default, and one it does not run is refused") {
  const auto runs = kernels();
  CHECK(widest_vector_isa() == runs.back());
  MESSAGE("GELU kernels here: " << runs.size() << " (scalar, AVX2, AVX-512 in that order)");
  float x = 1.0f, y = 0.0f;
  for (VectorIsa k : {VectorIsa::avx2, VectorIsa::avx512})
    if (!vector_isa_runs(k)) {
      CHECK_THROWS_AS(gelu_erf(&x, &y, 1, k), std::invalid_argument);
      CHECK_THROWS_AS(gelu_erf_backward(&x, &x, &y, 1, k), std::invalid_argument);
    }
}

TEST_CASE("gelu_erf and its gradient carry NaN, and gelu(+inf) is +inf") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (VectorIsa kernel : kernels()) {
    CAPTURE(static_cast<int>(kernel));
    // In a whole vector and in the padded last one.
    std::vector<float> x(19, 0.5f);
    x[2] = nan;
    x[5] = -nan;
    x[7] = inf;
    x[17] = nan;
    std::vector<float> y(x.size()), ones(x.size(), 1.0f), dx(x.size());
    gelu_erf(x.data(), y.data(), static_cast<std::int64_t>(x.size()), kernel);
    gelu_erf_backward(x.data(), ones.data(), dx.data(), static_cast<std::int64_t>(x.size()), kernel);
    for (std::size_t i : {2, 5, 17}) {
      CAPTURE(i);
      CHECK(std::isnan(y[i]));
      CHECK(std::isnan(dx[i]));
    }
    CHECK(y[7] == inf);
    CHECK(y[0] == doctest::Approx(gelu_ref(0.5)).epsilon(1e-6));
    CHECK(dx[18] == doctest::Approx(gelu_derivative_ref(0.5)).epsilon(1e-6));
  }
}

TEST_CASE("gelu_erf is within 4e-7 |x| + 1e-7 of the formula") {
  // An erf within 4e-7 of erf's value (gelu.hpp) moves 0.5 x (1 + erf) by
  // 2e-7 |x|; the rest is f32 rounding.
  for (VectorIsa kernel : kernels()) {
    CAPTURE(static_cast<int>(kernel));
    std::vector<float> x = grid(), y(x.size());
    gelu_erf(x.data(), y.data(), static_cast<std::int64_t>(x.size()), kernel);
    double worst = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double want = gelu_ref(x[i]), error = std::fabs(y[i] - want);
      CAPTURE(x[i]);
      CHECK(error <= 4e-7 * std::fabs(x[i]) + 1e-7);
      worst = std::max(worst, error / (std::fabs(x[i]) + 1.0));
    }
    MESSAGE("kernel " << static_cast<int>(kernel) << ": largest error over (|x| + 1): " << worst);
  }
}

TEST_CASE("gelu_erf_backward is within 8e-7 (1 + |x|) |dy| of dy times the derivative") {
  for (VectorIsa kernel : kernels()) {
    CAPTURE(static_cast<int>(kernel));
    std::vector<float> x = grid(), dy(x.size()), dx(x.size());
    for (std::size_t i = 0; i < dy.size(); ++i) dy[i] = (i % 2 != 0 ? -1.0f : 1.0f) * (0.5f + static_cast<float>(i % 7) / 4.0f);
    gelu_erf_backward(x.data(), dy.data(), dx.data(), static_cast<std::int64_t>(x.size()), kernel);
    for (std::size_t i = 0; i < x.size(); ++i) {
      CAPTURE(x[i]);
      CHECK(std::fabs(dx[i] - dy[i] * gelu_derivative_ref(x[i])) <= 8e-7 * (1.0 + std::fabs(x[i])) * std::fabs(dy[i]));
    }
  }
}

TEST_CASE("gelu_erf: in place, any length, the same value wherever an element lies") {
  for (VectorIsa kernel : kernels()) {
    CAPTURE(static_cast<int>(kernel));
    std::vector<float> base = grid();
    std::vector<float> whole(base.size());
    gelu_erf(base.data(), whole.data(), static_cast<std::int64_t>(base.size()), kernel);
    for (std::int64_t n : {1, 7, 8, 9, 15, 16, 17, 4095, 4096, 4097, 20000}) {
      for (std::int64_t offset : {0, 3}) {
        CAPTURE(n);
        CAPTURE(offset);
        std::vector<float> part(base.begin() + offset, base.begin() + offset + n);
        gelu_erf(part.data(), part.data(), n, kernel);  // in place
        for (std::int64_t i = 0; i < n; ++i) REQUIRE(part[i] == whole[offset + i]);
      }
    }
    // The derivative, written over dy, and in pieces.
    std::vector<float> dx(base.size(), 1.0f), in_place(base.size(), 1.0f);
    gelu_erf_backward(base.data(), dx.data(), dx.data(), static_cast<std::int64_t>(base.size()), kernel);
    std::vector<float> ones(base.size(), 1.0f);
    gelu_erf_backward(base.data(), ones.data(), in_place.data(), static_cast<std::int64_t>(base.size()), kernel);
    CHECK(dx == in_place);
    std::vector<float> pieces(base.size());
    const auto size = static_cast<std::int64_t>(base.size());
    for (std::int64_t first = 0; first < size; first += 21)
      gelu_erf_backward(base.data() + first, ones.data() + first, pieces.data() + first, std::min<std::int64_t>(21, size - first), kernel);
    CHECK(pieces == in_place);
  }
}

TEST_CASE("gelu_erf_to_bf16 is gelu_erf rounded as to_bf16 rounds it, bit for bit, NaN included") {
  std::vector<float> x = grid();
  x[5] = std::numeric_limits<float>::quiet_NaN();
  x[x.size() / 2] = std::numeric_limits<float>::infinity();
  x.push_back(1.0e-40f);  // a denormal input
  const auto n = static_cast<std::int64_t>(x.size());  // several blocks of 4096 and a part, not whole vectors
  for (VectorIsa kernel : kernels()) {
    CAPTURE(static_cast<int>(kernel));
    std::vector<float> wide(x.size());
    gelu_erf(x.data(), wide.data(), n, kernel);
    std::vector<bf16> rounded(x.size());
    gelu_erf_to_bf16(x.data(), rounded.data(), n, kernel);
    for (std::size_t i = 0; i < x.size(); ++i) {
      CAPTURE(x[i]);
      REQUIRE(rounded[i].bits == to_bf16(wide[i]).bits);
    }
  }
  // The CPU backend's op with a bf16 output (mixed precision's cast fused into it) is the cast of its f32 one.
  Backend& cpu = backend_for(Device::cpu(0));
  const Tensor in = random_tensor({3, 1000}, 7, -6.0f, 6.0f);
  Tensor f32 = Tensor::empty(in.shape(), DType::f32), cast = Tensor::empty(in.shape(), DType::bf16),
         fused = Tensor::empty(in.shape(), DType::bf16);
  cpu.unary(UnaryOp::gelu_erf, in, f32);
  cpu.cast(f32, cast);
  cpu.unary(UnaryOp::gelu_erf, in, fused);
  for (std::int64_t i = 0; i < in.numel(); ++i) REQUIRE(fused.data<bf16>()[i].bits == cast.data<bf16>()[i].bits);
}

TEST_CASE("the CPU backend's GELU op, its gradient and a matmul's GELU match the formula") {
  Backend& cpu = backend_for(Device::cpu(0));
  CAPTURE(matmul_gelu_in_house());
  Tensor a = random_tensor({37, 29}, 1), b = random_tensor({29, 41}, 2), bias = random_tensor({41}, 3);
  Tensor product = Tensor::empty({37, 41}, DType::f32), want = Tensor::empty({37, 41}, DType::f32);
  cpu.matmul(a, b, &bias, product, MatmulArgs{});
  std::vector<float> expected;
  for (float v : product.to_vector<float>()) expected.push_back(static_cast<float>(gelu_ref(v)));
  cpu.unary(UnaryOp::gelu_erf, product, want);
  check_close(want, expected, 1e-6, 1e-6);
  // Fused into the product (oneDNN's post-op, or the product then gelu_erf).
  Tensor fused = Tensor::empty({37, 41}, DType::f32);
  MatmulArgs with_gelu;
  with_gelu.activation = Activation::gelu_erf;
  cpu.matmul(a, b, &bias, fused, with_gelu);
  check_close(fused, expected, 1e-5, 1e-5);
  // The gradient.
  Tensor dy = random_tensor({37, 41}, 4), dx = Tensor::empty({37, 41}, DType::f32);
  cpu.unary_backward(UnaryOp::gelu_erf, product, dy, dx);
  std::vector<float> grad;
  const auto p = product.to_vector<float>(), d = dy.to_vector<float>();
  for (std::size_t i = 0; i < p.size(); ++i) grad.push_back(static_cast<float>(d[i] * gelu_derivative_ref(p[i])));
  check_close(dx, grad, 1e-6, 1e-6);
}
