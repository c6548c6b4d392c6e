// The CUDA backend's random fill and dropout element functions
// (backends/cuda/random.hpp), checked on the host: for the same seed and
// offset they give the CPU backend's numbers bit for bit, for 1, 7 and 65537
// elements and offsets that start mid-block. The cases at the end (test suite
// "gpu", CUDA builds only) run the kernels.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "backends/cuda/random.hpp"
#include "backends/registry.hpp"
#include "tests/gpu_test_util.hpp"
#include "tests/test_util.hpp"
#include "tessera_features.hpp"

using namespace tessera;
using namespace tessera::test;

namespace {

Backend& cpu() { return backend_for(Device::cpu(0)); }

const std::int64_t kSizes[] = {1, 7, 65537};
// Offsets 0, mid-block (Philox yields four numbers per block) and large.
const std::uint64_t kOffsets[] = {0, 3, (std::uint64_t{1} << 40) + 1};
constexpr std::uint64_t kSeed = 0x5EED1234ABCDull;

template <typename F>
std::vector<float> host_fill(std::int64_t n, F fill) {
  std::vector<float> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = fill(i);
  return out;
}

}  // namespace

TEST_CASE("cuda random fills give the CPU backend's numbers for the same seed and offset") {
  for (std::int64_t n : kSizes)
    for (std::uint64_t offset : kOffsets) {
      CAPTURE(n);
      CAPTURE(offset);
      Tensor uniform = Tensor::empty(Shape{n}, DType::f32), normal = Tensor::empty(Shape{n}, DType::f32);
      cpu().random_uniform(uniform, kSeed, offset, -2.0f, 3.0f);
      cpu().random_normal(normal, kSeed, offset, 0.5f, 2.0f);
      CHECK(host_fill(n, make_uniform_fill(kSeed, offset, -2.0f, 3.0f)) == uniform.to_vector<float>());
      CHECK(host_fill(n, NormalFill{kSeed, offset, 0.5f, 2.0f}) == normal.to_vector<float>());
    }
}

TEST_CASE("cuda uniform fill stays below high where the affine map rounds up onto it") {
  // [1, 3): u = 1 - 2^-24 maps onto 3.0f; the fill must give the float below.
  UniformFill fill = make_uniform_fill(1, 0, 1.0f, 3.0f);
  for (std::int64_t i = 0; i < 65537; ++i) {
    const float v = fill(i);
    REQUIRE(v >= 1.0f);
    REQUIRE(v < 3.0f);
  }
}

TEST_CASE("cuda dropout gives the CPU backend's mask and scale for the same seed and offset") {
  for (std::int64_t n : kSizes)
    for (std::uint64_t offset : kOffsets)
      for (float rate : {0.0f, 0.1f, 0.5f, 0.9f}) {
        CAPTURE(n);
        CAPTURE(offset);
        CAPTURE(rate);
        const Tensor x = random_tensor(Shape{n}, 71);
        Tensor out = Tensor::empty(Shape{n}, DType::f32);
        cpu().dropout(x, out, rate, kSeed, offset);
        const Dropout dropout = make_dropout(kSeed, offset, rate);
        const float* px = x.data<float>();
        CHECK(host_fill(n, [&](std::int64_t i) { return dropout(px[i], i); }) == out.to_vector<float>());
      }
}

// --- the kernels on a GPU --------------------------------------------------------

#if TESSERA_HAVE_CUDA

TEST_CASE("cuda backend supports f32 dropout" * doctest::test_suite("gpu") * skip_without_gpu()) {
  CHECK(gpu().supports(OpKind::dropout, DType::f32));
}

TEST_CASE("cuda random kernels give the CPU backend's numbers for the same seed and offset" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  const Device cuda = Device::cuda(0);
  for (std::int64_t n : kSizes)
    for (std::uint64_t offset : kOffsets) {
      CAPTURE(n);
      CAPTURE(offset);
      const Shape shape{n};
      Tensor uniform = Tensor::empty(shape, DType::f32), normal = Tensor::empty(shape, DType::f32);
      Tensor guniform = Tensor::empty(shape, DType::f32, cuda), gnormal = Tensor::empty(shape, DType::f32, cuda);
      cpu().random_uniform(uniform, kSeed, offset, -2.0f, 3.0f);
      cpu().random_normal(normal, kSeed, offset, 0.5f, 2.0f);
      gpu().random_uniform(guniform, kSeed, offset, -2.0f, 3.0f);
      gpu().random_normal(gnormal, kSeed, offset, 0.5f, 2.0f);
      // Uniform: integer arithmetic and an unfused multiply-add, exact. The
      // normal's log, sqrt and cos are the device's own, within a few ulp of
      // the host's.
      CHECK(to_host(guniform).to_vector<float>() == uniform.to_vector<float>());
      check_close(to_host(gnormal).to_vector<float>(), normal.to_vector<float>(), 1e-5, 1e-5);
      const Tensor x = random_tensor(shape, 72);
      Tensor out = Tensor::empty(shape, DType::f32), gout = Tensor::empty(shape, DType::f32, cuda);
      cpu().dropout(x, out, 0.3f, kSeed, offset);
      gpu().dropout(to_gpu(x), gout, 0.3f, kSeed, offset);
      CHECK(to_host(gout).to_vector<float>() == out.to_vector<float>());
    }
}

#endif  // TESSERA_HAVE_CUDA
