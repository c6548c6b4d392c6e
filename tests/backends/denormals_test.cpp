// Denormal floats in CPU kernels: flushed to zero by default on every thread
// that computes (the caller and its OpenMP threads), kept when an embedder
// opts out, and the calling thread's own mode untouched after each kernel.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "backends/denormals.hpp"
#include "backends/registry.hpp"

using namespace tessera;

// FTZ and DAZ are x86-64 bits (MXCSR); elsewhere the setting changes nothing.
#if defined(__x86_64__)

namespace {

// Sets the process-wide setting for a test and puts the default back.
struct FlushSetting {
  explicit FlushSetting(bool on) { set_flush_denormals(on); }
  ~FlushSetting() { set_flush_denormals(true); }
};

// Enough rows that the kernels split them over every OpenMP thread.
constexpr std::int64_t kRows = 1024, kColumns = 1024, kCount = kRows * kColumns;

// x * y elementwise on cpu:0, with x = a and y = b everywhere.
std::vector<float> multiply(float a, float b) {
  auto& cpu = backend_for(Device::cpu(0));
  Tensor x = Tensor::from_vector(std::vector<float>(kCount, a), Shape{kRows, kColumns});
  Tensor y = Tensor::from_vector(std::vector<float>(kCount, b), Shape{kRows, kColumns});
  Tensor out = Tensor::empty(Shape{kRows, kColumns}, DType::f32);
  cpu.binary(BinaryOp::mul, x, y, out);
  return out.to_vector<float>();
}

std::int64_t count_equal(const std::vector<float>& v, float value) {
  return std::count(v.begin(), v.end(), value);
}

}  // namespace

TEST_CASE("denormals: a denormal product is flushed to zero by every thread of a kernel") {
  REQUIRE(flush_denormals());
  bool caller_before = thread_flushes_denormals();
  // 1e-20 * 1e-20 = 1e-40, below FLT_MIN (1.18e-38): a denormal.
  auto product = multiply(1e-20f, 1e-20f);
  CHECK(count_equal(product, 0.0f) == kCount);
  CHECK(thread_flushes_denormals() == caller_before);  // the caller's mode is its own
}

TEST_CASE("denormals: OpenMP threads made before the engine ran flush too") {
  // A new calling thread whose OpenMP team an embedder's code made first, in
  // IEEE mode: the engine's first kernel on that thread must give the team its mode.
  std::int64_t flushed = -1;
  std::thread caller([&] {
#pragma omp parallel num_threads(2)
    set_thread_denormal_mode(false);
    flushed = count_equal(multiply(1e-20f, 1e-20f), 0.0f);
  });
  caller.join();
  CHECK(flushed == kCount);
}

TEST_CASE("denormals: denormal inputs read as zero (DAZ), in oneDNN's matmul too") {
  REQUIRE(flush_denormals());
  auto product = multiply(1e-40f, 1e10f);  // 1e-30 with IEEE denormals, 0 with DAZ
  CHECK(count_equal(product, 0.0f) == kCount);

  auto& cpu = backend_for(Device::cpu(0));
  Tensor a = Tensor::from_vector(std::vector<float>(64 * 64, 1e-20f), Shape{64, 64});
  Tensor out = Tensor::empty(Shape{64, 64}, DType::f32);
  cpu.matmul(a, a, nullptr, out);  // each output: 64 products of 1e-40
  auto values = out.to_vector<float>();
  CHECK(count_equal(values, 0.0f) == 64 * 64);
}

TEST_CASE("denormals: set_flush_denormals(false) keeps IEEE denormals") {
  FlushSetting keep(false);
  auto product = multiply(1e-20f, 1e-20f);
  REQUIRE(product.size() == static_cast<std::size_t>(kCount));
  CHECK(std::fpclassify(product.front()) == FP_SUBNORMAL);
  CHECK(count_equal(product, product.front()) == kCount);  // every thread kept them
  CHECK(product.front() == doctest::Approx(1e-40).epsilon(1e-3));

  auto from_denormal = multiply(1e-40f, 1e10f);
  CHECK(count_equal(from_denormal, 0.0f) == 0);
}

TEST_CASE("denormals: DenormalMode sets and restores the calling thread's mode") {
  bool before = thread_flushes_denormals();
  {
    DenormalMode flush(true);
    CHECK(thread_flushes_denormals());
    {
      DenormalMode keep(false);
      CHECK_FALSE(thread_flushes_denormals());
    }
    CHECK(thread_flushes_denormals());
  }
  CHECK(thread_flushes_denormals() == before);
}

#endif  // __x86_64__
