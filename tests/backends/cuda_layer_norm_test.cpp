// The CUDA backend's layer norm kernel bodies (backends/cuda/layer_norm.hpp),
// checked on the host against the CPU backend (oneDNN): y, mean, rstd, dx,
// dgamma and dbeta for odd sizes (1, 7, 65537 features or rows), rows of 768
// and 1024 features, and ranks 1-4, both from the one-lane row functions (the
// thread-per-row kernels) and from the lane-split passes combined as the
// kernels combine them (32 lanes per row, 16 row-lanes per feature). The
// cases at the end (test suite "gpu", CUDA builds only) run the kernels.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cuda/layer_norm.hpp"
#include "backends/cuda/reduce.hpp"
#include "backends/registry.hpp"
#include "tests/gpu_test_util.hpp"
#include "tests/test_util.hpp"
#include "tessera_features.hpp"

using namespace tessera;
using namespace tessera::test;

namespace {

Backend& cpu() { return backend_for(Device::cpu(0)); }

const std::vector<Shape> kShapes = {Shape{1},    Shape{7},       Shape{65537},   Shape{3, 7},
                                    Shape{65537, 3}, Shape{2, 65537}, Shape{2, 3, 5},
                                    Shape{2, 3, 4, 7}, Shape{5, 768},  Shape{3, 1024}};
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

// The warp kernels' combine of the lanes' partials: lane 0's total after
// shuffles down by lanes / 2, ..., 2, 1 (lanes a power of 2).
float tree_sum(std::vector<float> partials) {
  for (std::size_t offset = partials.size() / 2; offset > 0; offset /= 2)
    for (std::size_t l = 0; l < offset; ++l) partials[l] += partials[l + offset];
  return partials[0];
}

// The warp-per-row forward on the host: each pass split over `lanes` lanes.
void host_layer_norm_lanes(const Tensor& x, const Tensor& gamma, const Tensor& beta, Result& got,
                           std::int64_t rows, std::int64_t features, std::int64_t lanes) {
  const float* in = x.data<float>();
  std::vector<float> partials(static_cast<std::size_t>(lanes));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t l = 0; l < lanes; ++l)
      partials[static_cast<std::size_t>(l)] = layer_norm_partial_sum(in, features, r, l, lanes);
    const float mu = layer_norm_mean(tree_sum(partials), features);
    for (std::int64_t l = 0; l < lanes; ++l)
      partials[static_cast<std::size_t>(l)] = layer_norm_partial_squares(in, features, r, mu, l, lanes);
    const float rs = layer_norm_rstd(tree_sum(partials), features, kEpsilon);
    for (std::int64_t l = 0; l < lanes; ++l)
      layer_norm_write(in, gamma.data<float>(), beta.data<float>(), got.y.data<float>(), features, r,
                       mu, rs, l, lanes);
    got.mean.data<float>()[r] = mu;
    got.rstd.data<float>()[r] = rs;
  }
}

// The warp-per-row dx on the host, from the statistics in `stats`.
void host_layer_norm_dx_lanes(const Tensor& x, const Tensor& gamma, const Tensor& dy,
                              const Result& stats, Result& got, std::int64_t rows,
                              std::int64_t features, std::int64_t lanes) {
  std::vector<float> g(static_cast<std::size_t>(lanes)), gx(static_cast<std::size_t>(lanes));
  for (std::int64_t r = 0; r < rows; ++r) {
    const float mu = stats.mean.data<float>()[r], rs = stats.rstd.data<float>()[r];
    for (std::int64_t l = 0; l < lanes; ++l) {
      const LayerNormGradSums part = layer_norm_backward_partial(
          x.data<float>(), gamma.data<float>(), dy.data<float>(), features, r, mu, rs, l, lanes);
      g[static_cast<std::size_t>(l)] = part.g;
      gx[static_cast<std::size_t>(l)] = part.gx;
    }
    LayerNormGradSums sums;
    sums.g = tree_sum(g);
    sums.gx = tree_sum(gx);
    for (std::int64_t l = 0; l < lanes; ++l)
      layer_norm_backward_write(x.data<float>(), gamma.data<float>(), dy.data<float>(),
                                got.dx.data<float>(), features, r, mu, rs, sums, l, lanes);
  }
}

// The param-grad kernel on the host: `lanes` row-lanes' partials per feature,
// added in row-lane order.
void host_layer_norm_param_grad_lanes(const Tensor& x, const Tensor& dy, const Result& stats,
                                      Result& got, std::int64_t rows, std::int64_t features,
                                      std::int64_t lanes) {
  // In the kernel's chunks of rows, each chunk's row-lanes in order, then the chunks in order.
  const LayerNormParamChunks plan = layer_norm_param_chunks(rows, features, kReduceScratchFloats);
  for (std::int64_t f = 0; f < features; ++f) {
    LayerNormParamSums total;
    for (std::int64_t c = 0; c < plan.chunks; ++c) {
      const std::int64_t first = c * plan.rows_per_chunk, count = std::min(plan.rows_per_chunk, rows - first);
      LayerNormParamSums chunk;
      for (std::int64_t l = 0; l < lanes; ++l) {
        const LayerNormParamSums part = layer_norm_param_grad_partial(
            x.data<float>() + first * features, stats.mean.data<float>() + first, stats.rstd.data<float>() + first,
            dy.data<float>() + first * features, count, features, f, l, lanes);
        chunk.dgamma = l == 0 ? part.dgamma : chunk.dgamma + part.dgamma;
        chunk.dbeta = l == 0 ? part.dbeta : chunk.dbeta + part.dbeta;
      }
      total.dgamma = c == 0 ? chunk.dgamma : total.dgamma + chunk.dgamma;
      total.dbeta = c == 0 ? chunk.dbeta : total.dbeta + chunk.dbeta;
    }
    got.dgamma.data<float>()[f] = total.dgamma;
    got.dbeta.data<float>()[f] = total.dbeta;
  }
}

#if TESSERA_HAVE_CUDA
bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() &&
         std::memcmp(a.data<float>(), b.data<float>(), static_cast<std::size_t>(a.numel()) * sizeof(float)) == 0;
}
#endif

// Every output of the host kernels against the CPU's.
void compare_all(const Result& got, const Result& want, std::int64_t rows) {
  compare(got.y, want.y, "y");
  compare(got.mean, want.mean, "mean");
  compare(got.rstd, want.rstd, "rstd");
  compare(got.dx, want.dx, "dx", 1e-4);
  // Sums over up to 65537 rows.
  compare(got.dgamma, want.dgamma, "dgamma", 1e-6 * static_cast<double>(rows) + 1e-5);
  compare(got.dbeta, want.dbeta, "dbeta", 1e-6 * static_cast<double>(rows) + 1e-5);
}

}  // namespace

TEST_CASE("cuda layer norm row functions, by one lane and split among lanes, match the CPU backend") {
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
    compare_all(got, want, rows);
    // Split as the kernels split them: 32 lanes a row, 16 row-lanes a feature.
    Result split = allocate(shape);
    host_layer_norm_lanes(x, gamma, beta, split, rows, features, 32);
    host_layer_norm_dx_lanes(x, gamma, dy, want, split, rows, features, 32);
    host_layer_norm_param_grad_lanes(x, dy, want, split, rows, features, 16);
    compare_all(split, want, rows);
  }
}

TEST_CASE("cuda layer norm's dgamma and dbeta split rows into chunks when features are few") {
  const LayerNormParamChunks gpt = layer_norm_param_chunks(8192, 768, kReduceScratchFloats);
  CHECK(gpt.chunks == 10);  // 24 feature tiles x 10 chunks of rows; 2 x 10 x 768 partials fit
  CHECK(gpt.rows_per_chunk * gpt.chunks >= 8192);
  CHECK(gpt.rows_per_chunk * (gpt.chunks - 1) < 8192);  // no empty chunk
  CHECK(layer_norm_param_chunks(1000, 768, kReduceScratchFloats).chunks == 1);
  CHECK(layer_norm_param_chunks(0, 768, kReduceScratchFloats).chunks == 1);
  CHECK(layer_norm_param_chunks(1 << 20, 16, kReduceScratchFloats).chunks == kLayerNormMaxChunks);
  CHECK(layer_norm_param_chunks(1 << 20, 10000, kReduceScratchFloats).chunks == 1);  // no room for partials
  // The chunked sums, as the kernels add them, against the CPU.
  for (const Shape& shape : {Shape{2048, 40}, Shape{4, 1500, 24}}) {
    CAPTURE(shape.str());
    const std::int64_t features = shape[shape.rank() - 1], rows = shape.numel() / features;
    REQUIRE(layer_norm_param_chunks(rows, features, kReduceScratchFloats).chunks > 1);
    const Tensor x = random_tensor(shape, 61, -3.0f, 5.0f), dy = random_tensor(shape, 62);
    const Tensor gamma = random_tensor(Shape{features}, 63, 0.5f, 1.5f), beta = random_tensor(Shape{features}, 64);
    const Result want = cpu_layer_norm(x, gamma, beta, dy);
    Result got = allocate(shape);
    host_layer_norm_param_grad_lanes(x, dy, want, got, rows, features, 16);
    compare(got.dgamma, want.dgamma, "dgamma", 1e-6 * static_cast<double>(rows) + 1e-5);
    compare(got.dbeta, want.dbeta, "dbeta", 1e-6 * static_cast<double>(rows) + 1e-5);
  }
}

TEST_CASE("cuda layer norm rows into bf16 are the f32 rows rounded as cast rounds") {
  const Shape shape{6, 40};
  const Tensor x = random_tensor(shape, 61, -3.0f, 5.0f);
  const Tensor gamma = random_tensor(Shape{40}, 63, 0.5f, 1.5f), beta = random_tensor(Shape{40}, 64);
  Result f32 = allocate(shape), rounded = allocate(shape);
  std::vector<std::uint16_t> y16(static_cast<std::size_t>(shape.numel()));
  for (std::int64_t r = 0; r < 6; ++r) {
    layer_norm_row(x.data<float>(), gamma.data<float>(), beta.data<float>(), f32.y.data<float>(),
                   f32.mean.data<float>(), f32.rstd.data<float>(), 40, kEpsilon, r);
    layer_norm_row(x.data<float>(), gamma.data<float>(), beta.data<float>(), y16.data(), rounded.mean.data<float>(),
                   rounded.rstd.data<float>(), 40, kEpsilon, r);
  }
  const std::vector<float> y = f32.y.to_vector<float>();
  for (std::size_t i = 0; i < y.size(); ++i) {
    CAPTURE(i);
    CHECK(y16[i] == to_bf16(y[i]).bits);
  }
  CHECK(rounded.mean.to_vector<float>() == f32.mean.to_vector<float>());
}

TEST_CASE("cuda layer norm takes a warp per row from 32 features") {
  CHECK(layer_norm_warp_per_row(768));
  CHECK(layer_norm_warp_per_row(32));
  CHECK_FALSE(layer_norm_warp_per_row(31));
  CHECK_FALSE(layer_norm_warp_per_row(1));
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

// A bf16 y (mixed precision's cast fused into the op): within one bf16
// rounding of the CPU's, whose f32 y differs from the GPU's by float noise.
TEST_CASE("cuda layer norm into a bf16 y matches the CPU's, thread and warp kernels" * doctest::test_suite("gpu") *
          skip_without_gpu()) {
  for (const Shape& shape : {Shape{7, 5}, Shape{300, 768}, Shape{3, 37, 33}}) {
    CAPTURE(shape.str());
    const std::int64_t features = shape[shape.rank() - 1], rows = shape.numel() / features;
    const Tensor x = random_tensor(shape, 65, -3.0f, 5.0f);
    const Tensor gamma = random_tensor(Shape{features}, 67, 0.5f, 1.5f), beta = random_tensor(Shape{features}, 68);
    Tensor y = Tensor::empty(shape, DType::bf16), mean = Tensor::empty({rows}, DType::f32);
    Tensor rstd = Tensor::empty({rows}, DType::f32);
    cpu().layer_norm(x, gamma, beta, y, mean, rstd, kEpsilon);
    Tensor gy = Tensor::empty(shape, DType::bf16, Device::cuda(0));
    Tensor gmean = Tensor::empty({rows}, DType::f32, Device::cuda(0));
    Tensor grstd = Tensor::empty({rows}, DType::f32, Device::cuda(0));
    gpu().layer_norm(to_gpu(x), to_gpu(gamma), to_gpu(beta), gy, gmean, grstd, kEpsilon);
    const auto widened = [](const Tensor& t) {
      Tensor f = Tensor::empty(t.shape(), DType::f32);
      cpu().cast(t, f);
      return f.to_vector<float>();
    };
    check_close(widened(to_host(gy)), widened(y), 1.0 / 128, 2e-5);
    compare(to_host(gmean), mean, "mean");
    compare(to_host(grstd), rstd, "rstd");
  }
}

TEST_CASE("cuda layer norm warp-per-row and param-grad kernels match the CPU backend and repeat bit for bit" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  const std::vector<Shape> shapes = {Shape{300, 768}, Shape{64, 1024}, Shape{3, 37, 33}, Shape{1, 40},
                                     Shape{4096, 64}};  // the last: dgamma/dbeta in 8 chunks of rows
  for (const Shape& shape : shapes) {
    CAPTURE(shape.str());
    const std::int64_t features = shape[shape.rank() - 1];
    CHECK(layer_norm_warp_per_row(features));
    const Tensor x = random_tensor(shape, 69, -3.0f, 5.0f), dy = random_tensor(shape, 70);
    const Tensor gamma = random_tensor(Shape{features}, 71, 0.5f, 1.5f);
    const Tensor beta = random_tensor(Shape{features}, 72);
    const Result want = cpu_layer_norm(x, gamma, beta, dy);
    const Tensor gx = to_gpu(x), ggamma = to_gpu(gamma), gbeta = to_gpu(beta), gdy = to_gpu(dy);
    const double rows = static_cast<double>(shape.numel() / features);
    std::vector<Tensor> first;
    for (int run = 0; run < 2; ++run) {
      CAPTURE(run);
      Result got = allocate(shape, Device::cuda(0));
      gpu().layer_norm(gx, ggamma, gbeta, got.y, got.mean, got.rstd, kEpsilon);
      gpu().layer_norm_backward(gx, ggamma, got.mean, got.rstd, gdy, got.dx, got.dgamma, got.dbeta);
      const std::vector<Tensor> host = {to_host(got.y),  to_host(got.mean),   to_host(got.rstd),
                                        to_host(got.dx), to_host(got.dgamma), to_host(got.dbeta)};
      compare(host[0], want.y, "y");
      compare(host[1], want.mean, "mean");
      compare(host[2], want.rstd, "rstd");
      compare(host[3], want.dx, "dx", 1e-4);
      compare(host[4], want.dgamma, "dgamma", 1e-6 * rows + 1e-5);
      compare(host[5], want.dbeta, "dbeta", 1e-6 * rows + 1e-5);
      if (run == 0) {
        first = host;
      } else {
        for (std::size_t i = 0; i < host.size(); ++i) {
          CAPTURE(i);  // y, mean, rstd, dx, dgamma, dbeta
          CHECK(same_bits(host[i], first[i]));
        }
      }
    }
  }
}

#endif  // TESSERA_HAVE_CUDA
