// The CUDA backend's layer norm kernel bodies (backends/cuda/layer_norm.hpp),
// checked on the host against the CPU backend (oneDNN): y, mean, rstd, dx,
// dgamma and dbeta for odd sizes (1, 7, 65537 features or rows) and ranks 1-4.
// The cases at the end (test suite "gpu", CUDA builds only) run the kernels.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "backends/cuda/layer_norm.hpp"
#include "backends/registry.hpp"
#include "tests/gpu_test_util.hpp"
#include "tests/test_util.hpp"

using namespace tessera;
using namespace tessera::test;

namespace {

Backend& cpu() { return backend_for(Device::cpu(0)); }

const std::vector<Shape> kShapes = {Shape{1},    Shape{7},       Shape{65537},   Shape{3, 7},
                                    Shape{65537, 3}, Shape{2, 65537}, Shape{2, 3, 5},
                                    Shape{2, 3, 4, 7}};
constexpr float kEpsilon = 1e-5f;

struct Result {
  Tensor y, mean, rstd, dx, dgamma, dbeta;
};

Result allocate(const Shape& shape, Device device = Device::cpu()) {
  const std::int64_t features = shape[shape.rank() - 1];
  const Shape rows{shape.numel() / features}, params{features};
  return {Tensor::empty(shape, DType::f32, device),  Tensor::empty(rows, DType::f32, device),
          Tensor::empty(rows, DType::f32, device),   Tensor::empty(shape, DType::f32, device),
          Tensor::empty(params, DType::f32, device), Tensor::empty(params, DType::f32, device)};
}

Result cpu_layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& dy) {
  Result r = allocate(x.shape());
  cpu().layer_norm(x, gamma, beta, r.y, r.mean, r.rstd, kEpsilon);
  cpu().layer_norm_backward(x, gamma, r.mean, r.rstd, dy, r.dx, r.dgamma, r.dbeta);
  return r;
}

// Relative to the values' scale: oneDNN sums in another order.
void compare(const Tensor& got, const Tensor& want, const char* what, double atol = 2e-5) {
  CAPTURE(what);
  check_close(got.to_vector<float>(), want.to_vector<float>(), 1e-4, atol);
}

}  // namespace

TEST_CASE("cuda layer norm row functions match the CPU backend") {
  for (const Shape& shape : kShapes) {
    CAPTURE(shape.str());
    const std::int64_t features = shape[shape.rank() - 1], rows = shape.numel() / features;
    const Tensor x = random_tensor(shape, 61, -3.0f, 5.0f), dy = random_tensor(shape, 62);
    const Tensor gamma = random_tensor(Shape{features}, 63, 0.5f, 1.5f);
    const Tensor beta = random_tensor(Shape{features}, 64);
    const Result want = cpu_layer_norm(x, gamma, beta, dy);
    Result got = allocate(shape);
    for (std::int64_t r = 0; r < rows; ++r)
      layer_norm_row(x.data<float>(), gamma.data<float>(), beta.data<float>(), got.y.data<float>(),
                     got.mean.data<float>(), got.rstd.data<float>(), features, kEpsilon, r);
    // dx from the CPU's saved statistics, so each check tests one function.
    for (std::int64_t r = 0; r < rows; ++r)
      layer_norm_backward_row(x.data<float>(), gamma.data<float>(), want.mean.data<float>(),
                              want.rstd.data<float>(), dy.data<float>(), got.dx.data<float>(),
                              features, r);
    for (std::int64_t f = 0; f < features; ++f)
      layer_norm_param_grad(x.data<float>(), want.mean.data<float>(), want.rstd.data<float>(),
                            dy.data<float>(), got.dgamma.data<float>(), got.dbeta.data<float>(),
                            rows, features, f);
    compare(got.y, want.y, "y");
    compare(got.mean, want.mean, "mean");
    compare(got.rstd, want.rstd, "rstd");
    compare(got.dx, want.dx, "dx", 1e-4);
    // Sums over up to 65537 rows.
    compare(got.dgamma, want.dgamma, "dgamma", 1e-6 * static_cast<double>(rows) + 1e-5);
    compare(got.dbeta, want.dbeta, "dbeta", 1e-6 * static_cast<double>(rows) + 1e-5);
  }
}

// --- the kernels on a GPU --------------------------------------------------------

#if TESSERA_HAVE_CUDA

TEST_CASE("cuda backend supports f32 layer norm" * doctest::test_suite("gpu") * skip_without_gpu()) {
  CHECK(gpu().supports(OpKind::layer_norm, DType::f32));
  CHECK(gpu().supports(OpKind::layer_norm_grad, DType::f32));
}

TEST_CASE("cuda layer norm kernels match the CPU backend" * doctest::test_suite("gpu") *
          skip_without_gpu()) {
  for (const Shape& shape : kShapes) {
    CAPTURE(shape.str());
    const std::int64_t features = shape[shape.rank() - 1];
    const Tensor x = random_tensor(shape, 65, -3.0f, 5.0f), dy = random_tensor(shape, 66);
    const Tensor gamma = random_tensor(Shape{features}, 67, 0.5f, 1.5f);
    const Tensor beta = random_tensor(Shape{features}, 68);
    const Result want = cpu_layer_norm(x, gamma, beta, dy);
    Result got = allocate(shape, Device::cuda(0));
    const Tensor gx = to_gpu(x), ggamma = to_gpu(gamma);
    gpu().layer_norm(gx, ggamma, to_gpu(beta), got.y, got.mean, got.rstd, kEpsilon);
    gpu().layer_norm_backward(gx, ggamma, got.mean, got.rstd, to_gpu(dy), got.dx, got.dgamma,
                              got.dbeta);
    const double rows = static_cast<double>(shape.numel() / features);
    compare(to_host(got.y), want.y, "y");
    compare(to_host(got.mean), want.mean, "mean");
    compare(to_host(got.rstd), want.rstd, "rstd");
    compare(to_host(got.dx), want.dx, "dx", 1e-4);
    compare(to_host(got.dgamma), want.dgamma, "dgamma", 1e-6 * rows + 1e-5);
    compare(to_host(got.dbeta), want.dbeta, "dbeta", 1e-6 * rows + 1e-5);
  }
}

#endif  // TESSERA_HAVE_CUDA
