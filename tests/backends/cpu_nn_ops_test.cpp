// The CPU backend's network kernels (convolution, pooling, softmax, layer norm)
// and their backward passes against plain reference loops accumulating in double.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/cpu/conv2d_forward_direct.hpp"
#include "backends/cpu/conv2d_weights_direct.hpp"
#include "backends/cpu/conv2d_weights_gemm.hpp"
#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/vector_math.hpp"
#include "backends/registry.hpp"
#include "tests/test_util.hpp"

using namespace tessera;
using namespace tessera::test;

namespace {

// Shape letters: N batch, H/W input rows/columns, C channels, F filters,
// KH/KW window, OH/OW output rows/columns.
struct ConvDims {
  std::int64_t n, h, w, c, kh, kw, f, oh, ow;
};

ConvDims conv_dims(const Tensor& x, const Tensor& w, const Conv2dArgs& args) {
  Shape y = conv2d_output_shape(x.shape(), w.shape(), args);
  return {x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3], w.shape()[0],
          w.shape()[1], w.shape()[3], y[1],         y[2]};
}

// Calls body(n, oh, ow, kh, kw, ih, iw) for every window tap that lands inside x.
template <typename Body>
void for_each_tap(const ConvDims& d, const Conv2dArgs& a, Body body) {
  for (std::int64_t n = 0; n < d.n; ++n)
    for (std::int64_t oh = 0; oh < d.oh; ++oh)
      for (std::int64_t ow = 0; ow < d.ow; ++ow)
        for (std::int64_t kh = 0; kh < d.kh; ++kh)
          for (std::int64_t kw = 0; kw < d.kw; ++kw) {
            std::int64_t ih = oh * a.stride_h - a.pad_top + kh;
            std::int64_t iw = ow * a.stride_w - a.pad_left + kw;
            if (ih >= 0 && ih < d.h && iw >= 0 && iw < d.w) body(n, oh, ow, kh, kw, ih, iw);
          }
}

std::vector<float> to_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }

std::vector<float> reference_conv(const Tensor& x, const Tensor& w, const Tensor* bias,
                                  const Conv2dArgs& a) {
  auto d = conv_dims(x, w, a);
  auto xv = x.to_vector<float>(), wv = w.to_vector<float>();
  std::vector<double> y(static_cast<std::size_t>(d.n * d.oh * d.ow * d.f), 0.0);
  for_each_tap(d, a, [&](auto n, auto oh, auto ow, auto kh, auto kw, auto ih, auto iw) {
    for (std::int64_t c = 0; c < d.c; ++c)
      for (std::int64_t f = 0; f < d.f; ++f)
        y[((n * d.oh + oh) * d.ow + ow) * d.f + f] +=
            static_cast<double>(xv[((n * d.h + ih) * d.w + iw) * d.c + c]) *
            wv[((kh * d.kw + kw) * d.c + c) * d.f + f];
  });
  if (bias) {
    auto bv = bias->to_vector<float>();
    for (std::size_t i = 0; i < y.size(); ++i) y[i] += bv[i % static_cast<std::size_t>(d.f)];
  }
  return to_float(y);
}

std::vector<float> reference_conv_backward_data(const Tensor& x, const Tensor& w, const Tensor& dy,
                                                const Conv2dArgs& a) {
  auto d = conv_dims(x, w, a);
  auto wv = w.to_vector<float>(), dyv = dy.to_vector<float>();
  std::vector<double> dx(static_cast<std::size_t>(x.numel()), 0.0);
  for_each_tap(d, a, [&](auto n, auto oh, auto ow, auto kh, auto kw, auto ih, auto iw) {
    for (std::int64_t c = 0; c < d.c; ++c)
      for (std::int64_t f = 0; f < d.f; ++f)
        dx[((n * d.h + ih) * d.w + iw) * d.c + c] +=
            static_cast<double>(dyv[((n * d.oh + oh) * d.ow + ow) * d.f + f]) *
            wv[((kh * d.kw + kw) * d.c + c) * d.f + f];
  });
  return to_float(dx);
}

std::vector<float> reference_conv_backward_weights(const Tensor& x, const Tensor& w,
                                                   const Tensor& dy, const Conv2dArgs& a) {
  auto d = conv_dims(x, w, a);
  auto xv = x.to_vector<float>(), dyv = dy.to_vector<float>();
  std::vector<double> dw(static_cast<std::size_t>(w.numel()), 0.0);
  for_each_tap(d, a, [&](auto n, auto oh, auto ow, auto kh, auto kw, auto ih, auto iw) {
    for (std::int64_t c = 0; c < d.c; ++c)
      for (std::int64_t f = 0; f < d.f; ++f)
        dw[((kh * d.kw + kw) * d.c + c) * d.f + f] +=
            static_cast<double>(xv[((n * d.h + ih) * d.w + iw) * d.c + c]) *
            dyv[((n * d.oh + oh) * d.ow + ow) * d.f + f];
  });
  return to_float(dw);
}

std::vector<float> reference_bias_grad(const Tensor& dy) {
  auto dyv = dy.to_vector<float>();
  std::int64_t f = dy.shape()[3];
  std::vector<double> db(static_cast<std::size_t>(f), 0.0);
  for (std::size_t i = 0; i < dyv.size(); ++i) db[i % static_cast<std::size_t>(f)] += dyv[i];
  return to_float(db);
}

Conv2dArgs conv_args(const Shape& x, const Shape& w, int stride, bool same) {
  Conv2dArgs a{.stride_h = stride, .stride_w = stride};
  if (same) {
    same_padding(x[1], static_cast<int>(w[0]), stride, a.pad_top, a.pad_bottom);
    same_padding(x[2], static_cast<int>(w[1]), stride, a.pad_left, a.pad_right);
  }
  return a;
}

// Pooling reference: forward values and, given dy, the input gradient.
struct PoolReference {
  std::vector<float> y, dx;
};

PoolReference reference_pool(const Tensor& x, const Tensor& dy, const Pool2dArgs& a) {
  auto xv = x.to_vector<float>(), dyv = dy.to_vector<float>();
  const Shape& s = x.shape();
  std::int64_t n_ = s[0], h = s[1], w = s[2], c_ = s[3];
  Shape ys = pool2d_output_shape(s, a);
  std::int64_t oh_ = ys[1], ow_ = ys[2];
  PoolReference r{std::vector<float>(static_cast<std::size_t>(ys.numel())),
                  std::vector<float>(xv.size(), 0.0f)};
  std::vector<double> dx(xv.size(), 0.0);
  for (std::int64_t n = 0; n < n_; ++n)
    for (std::int64_t oh = 0; oh < oh_; ++oh)
      for (std::int64_t ow = 0; ow < ow_; ++ow)
        for (std::int64_t c = 0; c < c_; ++c) {
          std::vector<std::int64_t> taps;  // flat indices of x inside the window, row-major
          for (std::int64_t kh = 0; kh < a.window_h; ++kh)
            for (std::int64_t kw = 0; kw < a.window_w; ++kw) {
              std::int64_t ih = oh * a.stride_h - a.pad_top + kh;
              std::int64_t iw = ow * a.stride_w - a.pad_left + kw;
              if (ih >= 0 && ih < h && iw >= 0 && iw < w) taps.push_back(((n * h + ih) * w + iw) * c_ + c);
            }
          std::int64_t out = ((n * oh_ + oh) * ow_ + ow) * c_ + c;
          if (a.kind == PoolKind::max) {
            std::int64_t best = taps.front();
            for (auto t : taps)
              if (xv[t] > xv[best]) best = t;  // the first maximum wins a tie
            r.y[out] = xv[best];
            dx[best] += dyv[out];
          } else {
            double sum = 0;
            for (auto t : taps) sum += xv[t];
            r.y[out] = static_cast<float>(sum / static_cast<double>(taps.size()));
            for (auto t : taps) dx[t] += dyv[out] / static_cast<double>(taps.size());
          }
        }
  r.dx = to_float(dx);
  return r;
}

// Softmax reference over `axis`, viewing the shape as [outer, n, inner].
struct AxisView {
  std::int64_t outer = 1, n = 1, inner = 1;
  AxisView(const Shape& s, int axis) : n(s[axis]) {
    for (int i = 0; i < axis; ++i) outer *= s[i];
    for (int i = axis + 1; i < s.rank(); ++i) inner *= s[i];
  }
  std::size_t at(std::int64_t o, std::int64_t j, std::int64_t i) const {
    return static_cast<std::size_t>((o * n + j) * inner + i);
  }
};

std::vector<float> reference_softmax(const Tensor& x, int axis, bool log) {
  auto xv = x.to_vector<float>();
  AxisView v(x.shape(), axis);
  std::vector<float> y(xv.size());
  for (std::int64_t o = 0; o < v.outer; ++o)
    for (std::int64_t i = 0; i < v.inner; ++i) {
      double max = -INFINITY, sum = 0;
      for (std::int64_t j = 0; j < v.n; ++j) max = std::max<double>(max, xv[v.at(o, j, i)]);
      for (std::int64_t j = 0; j < v.n; ++j) sum += std::exp(xv[v.at(o, j, i)] - max);
      for (std::int64_t j = 0; j < v.n; ++j) {
        double z = xv[v.at(o, j, i)] - max;
        y[v.at(o, j, i)] = static_cast<float>(log ? z - std::log(sum) : std::exp(z) / sum);
      }
    }
  return y;
}

// softmax: dx = y * (dy - sum(dy * y)); log-softmax: dx = dy - exp(y) * sum(dy).
std::vector<float> reference_softmax_backward(const Tensor& y, const Tensor& dy, int axis, bool log) {
  auto yv = y.to_vector<float>(), dyv = dy.to_vector<float>();
  AxisView v(y.shape(), axis);
  std::vector<float> dx(yv.size());
  for (std::int64_t o = 0; o < v.outer; ++o)
    for (std::int64_t i = 0; i < v.inner; ++i) {
      double sum = 0;
      for (std::int64_t j = 0; j < v.n; ++j) {
        auto k = v.at(o, j, i);
        sum += log ? static_cast<double>(dyv[k]) : static_cast<double>(dyv[k]) * yv[k];
      }
      for (std::int64_t j = 0; j < v.n; ++j) {
        auto k = v.at(o, j, i);
        dx[k] = static_cast<float>(log ? dyv[k] - std::exp(static_cast<double>(yv[k])) * sum
                                       : yv[k] * (dyv[k] - sum));
      }
    }
  return dx;
}

struct LayerNormReference {
  std::vector<float> y, mean, rstd, dx, dgamma, dbeta;
};

LayerNormReference reference_layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                        const Tensor& dy, float epsilon) {
  auto xv = x.to_vector<float>(), gv = gamma.to_vector<float>(), bv = beta.to_vector<float>();
  auto dyv = dy.to_vector<float>();
  std::int64_t d = gamma.numel(), rows = x.numel() / d;
  LayerNormReference r;
  r.y.resize(xv.size());
  r.dx.resize(xv.size());
  std::vector<double> dgamma(static_cast<std::size_t>(d), 0.0), dbeta(static_cast<std::size_t>(d), 0.0);
  for (std::int64_t row = 0; row < rows; ++row) {
    const float* xr = &xv[row * d];
    const float* dyr = &dyv[row * d];
    double mean = 0, var = 0;
    for (std::int64_t i = 0; i < d; ++i) mean += xr[i];
    mean /= static_cast<double>(d);
    for (std::int64_t i = 0; i < d; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= static_cast<double>(d);
    double rstd = 1.0 / std::sqrt(var + epsilon);
    r.mean.push_back(static_cast<float>(mean));
    r.rstd.push_back(static_cast<float>(rstd));
    // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma.
    double mean_g = 0, mean_gx = 0;
    for (std::int64_t i = 0; i < d; ++i) {
      double xhat = (xr[i] - mean) * rstd;
      double g = static_cast<double>(dyr[i]) * gv[i];
      r.y[row * d + i] = static_cast<float>(xhat * gv[i] + bv[i]);
      mean_g += g / static_cast<double>(d);
      mean_gx += g * xhat / static_cast<double>(d);
      dgamma[i] += dyr[i] * xhat;
      dbeta[i] += dyr[i];
    }
    for (std::int64_t i = 0; i < d; ++i) {
      double xhat = (xr[i] - mean) * rstd;
      double g = static_cast<double>(dyr[i]) * gv[i];
      r.dx[row * d + i] = static_cast<float>(rstd * (g - mean_g - xhat * mean_gx));
    }
  }
  r.dgamma = to_float(dgamma);
  r.dbeta = to_float(dbeta);
  return r;
}

CpuBackend& cpu_backend() { return dynamic_cast<CpuBackend&>(backend_for(Device::cpu(0))); }

}  // namespace

TEST_CASE("conv2d forward with strides 1 and 2, valid and same padding, with and without bias") {
  Backend& cpu = backend_for(Device::cpu(0));
  Tensor x = random_tensor({2, 7, 6, 3}, 11);
  // A 3x2 kernel makes "same" padding asymmetric along the width.
  Tensor w = random_tensor({3, 2, 3, 4}, 12);
  Tensor bias = random_tensor({4}, 13);
  for (int stride : {1, 2})
    for (bool same : {false, true})
      for (bool with_bias : {false, true}) {
        CAPTURE(stride);
        CAPTURE(same);
        CAPTURE(with_bias);
        auto args = conv_args(x.shape(), w.shape(), stride, same);
        Tensor y = Tensor::empty(conv2d_output_shape(x.shape(), w.shape(), args), DType::f32);
        if (same) CHECK(y.shape() == Shape{2, (7 + stride - 1) / stride, (6 + stride - 1) / stride, 4});
        const Tensor* b = with_bias ? &bias : nullptr;
        cpu.conv2d_forward(x, w, b, y, args);
        check_close(y, reference_conv(x, w, b, args), 1e-4, 1e-5);
      }
}

TEST_CASE("conv2d forward applies a fused activation after the bias") {
  Backend& cpu = backend_for(Device::cpu(0));
  Tensor x = random_tensor({2, 7, 6, 3}, 21), w = random_tensor({3, 2, 3, 4}, 22), bias = random_tensor({4}, 23);
  for (Activation act : {Activation::relu, Activation::tanh, Activation::sigmoid, Activation::gelu_erf})
    for (bool with_bias : {false, true}) {
      CAPTURE(name(act));
      CAPTURE(with_bias);
      auto args = conv_args(x.shape(), w.shape(), 1, /*same=*/true);
      Tensor plain = Tensor::empty(conv2d_output_shape(x.shape(), w.shape(), args), DType::f32);
      Tensor want = Tensor::empty(plain.shape(), DType::f32), fused = Tensor::empty(plain.shape(), DType::f32);
      const Tensor* b = with_bias ? &bias : nullptr;
      cpu.conv2d_forward(x, w, b, plain, args);
      cpu.unary(activation_unary(act), plain, want);
      args.activation = act;
      cpu.conv2d_forward(x, w, b, fused, args);
      check_close(fused, want.to_vector<float>(), 1e-5, 1e-5);
    }
}

TEST_CASE("conv2d forward over few input channels through register tiles matches reference loops") {
  if (!vector_isa_runs(VectorIsa::avx512)) {
    MESSAGE("no AVX-512 on this CPU: the direct forward convolution does not run here");
    CHECK_FALSE(conv_forward_direct(DType::f32, {1, 8, 8, 1}, {3, 3, 1, 16}, Activation::none));
    return;
  }
  // One, three and four channels in; 16, 48 and 80 out (one, three and 4 + 1
  // vectors); rows of 7 and 11 positions (a tile of 6 and a last one of 1 or
  // 5), a 3x2 kernel whose "same" padding is unequal side by side, and three
  // threads on 3 output rows (stride 2) that leave one with none.
  struct Case {
    Shape x, w;
  };
  for (const Case& c : {Case{{2, 9, 9, 1}, {3, 3, 1, 16}}, Case{{1, 6, 13, 3}, {3, 2, 3, 48}},
                        Case{{2, 5, 9, 4}, {2, 3, 4, 80}}})
    for (int stride : {1, 2})
      for (bool same : {false, true})
        for (int threads : {1, 2, 3})
          for (bool with_bias : {false, true})
            for (Activation act : {Activation::none, Activation::relu}) {
              CAPTURE(c.x);
              CAPTURE(c.w);
              CAPTURE(stride);
              CAPTURE(same);
              CAPTURE(threads);
              CAPTURE(with_bias);
              CAPTURE(name(act));
              Tensor x = random_tensor(c.x, 61), w = random_tensor(c.w, 62), bias = random_tensor({c.w[3]}, 63);
              auto args = conv_args(x.shape(), w.shape(), stride, same);
              args.activation = act;
              REQUIRE(conv_forward_direct(DType::f32, x.shape(), w.shape(), act));
              Tensor y = random_tensor(conv2d_output_shape(x.shape(), w.shape(), args), 64);  // garbage to overwrite
              std::vector<float> scratch(std::max<std::size_t>(conv_forward_direct_scratch(x.shape(), args), 1), NAN);
              const Tensor* b = with_bias ? &bias : nullptr;
              conv2d_forward_direct(x, w, b, y, args, scratch.data(), threads);
              std::vector<float> want = reference_conv(x, w, b, args);
              if (act == Activation::relu)
                for (float& v : want) v = std::max(v, 0.0f);
              check_close(y, want, 1e-4, 1e-5);
            }
  // The backend takes it for f32, few channels, windows of up to 196
  // inputs, whole vectors out, no activation or a ReLU, and then makes no
  // oneDNN primitive.
  CHECK_FALSE(conv_forward_direct(DType::f32, {1, 8, 8, 5}, {3, 3, 5, 16}, Activation::none));
  CHECK_FALSE(conv_forward_direct(DType::f32, {1, 8, 8, 3}, {3, 3, 3, 20}, Activation::none));
  CHECK_FALSE(conv_forward_direct(DType::bf16, {1, 8, 8, 3}, {3, 3, 3, 16}, Activation::none));
  CHECK_FALSE(conv_forward_direct(DType::f32, {1, 8, 8, 3}, {3, 3, 3, 16}, Activation::gelu_erf));
  CHECK(conv_forward_direct(DType::f32, {1, 16, 16, 4}, {7, 7, 4, 16}, Activation::none));
  CHECK_FALSE(conv_forward_direct(DType::f32, {1, 16, 16, 4}, {8, 7, 4, 16}, Activation::none));
  CpuBackend& cpu = cpu_backend();
  Tensor x = random_tensor({2, 8, 8, 1}, 65), w = random_tensor({3, 3, 1, 32}, 66), bias = random_tensor({32}, 67);
  x.data<float>()[0] = NAN;  // in the first window of the first image only
  Conv2dArgs args{.activation = Activation::relu};
  Tensor y = Tensor::empty(conv2d_output_shape(x.shape(), w.shape(), args), DType::f32);
  const auto primitives = cpu.primitive_count();
  cpu.conv2d_forward(x, w, &bias, y, args);
  CHECK(cpu.primitive_count() == primitives);
  // The ReLU zeroes the NaN as oneDNN's does: the same convolution over five
  // channels (four of them zero), which oneDNN runs, gives what this gives.
  Tensor x5 = zeros({2, 8, 8, 5}), w5 = zeros({3, 3, 5, 32});
  for (std::int64_t p = 0; p < 2 * 8 * 8; ++p) x5.data<float>()[p * 5] = x.data<float>()[p];
  for (std::int64_t t = 0; t < 9; ++t)
    for (std::int64_t f = 0; f < 32; ++f) w5.data<float>()[t * 5 * 32 + f] = w.data<float>()[t * 32 + f];
  Tensor y5 = Tensor::empty(y.shape(), DType::f32);
  cpu.conv2d_forward(x5, w5, &bias, y5, args);
  for (std::int64_t f = 0; f < 32; ++f) CHECK(y.data<float>()[f] == 0.0f);
  check_close(y, y5.to_vector<float>(), 1e-5, 1e-5);
  std::vector<float> want = reference_conv(x, w, &bias, args);
  for (float& v : want) v = std::max(v, 0.0f);
  std::vector<float> got = y.to_vector<float>();
  for (std::size_t i = 32; i < got.size(); ++i)  // no other window reads the NaN
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-4));
}

TEST_CASE("conv2d weight gradient through the ReLU after it takes dy as the ReLU's gradient would") {
  CpuBackend& cpu = cpu_backend();
  const Backend& backend = cpu;  // the query is the backend interface's
  if (!vector_isa_runs(VectorIsa::avx512)) {
    MESSAGE("no AVX-512 on this CPU: the weight gradient through a ReLU does not run here");
    CHECK_FALSE(backend.takes_conv_weight_gradient_through_relu(DType::f32, {3, 3, 1, 16}));
    return;
  }
  // A first layer's shapes (one and three channels in), 16 and 80 outputs,
  // stride 1 and 2, runs of rows that split unevenly among threads, and rows
  // of 128 positions (4 rows a run: several runs per thread, and a short
  // last one); y about half positive, a zero among it.
  const int threads_before = cpu.threads();
  struct Case {
    Shape x, w;
  };
  for (const Case& c : {Case{{2, 9, 9, 1}, {3, 3, 1, 16}}, Case{{3, 7, 6, 3}, {3, 2, 3, 80}},
                        Case{{1, 14, 130, 1}, {3, 3, 1, 16}}})
    for (int stride : {1, 2})
      for (bool same : {false, true})
        for (int threads : {1, 2, 3})
          for (bool with_bias : {false, true}) {
            CAPTURE(c.x);
            CAPTURE(stride);
            CAPTURE(same);
            CAPTURE(threads);
            CAPTURE(with_bias);
            cpu.set_threads(threads);
            Tensor x = random_tensor(c.x, 71), w = random_tensor(c.w, 72);
            auto args = conv_args(x.shape(), w.shape(), stride, same);
            const Shape out = conv2d_output_shape(x.shape(), w.shape(), args);
            Tensor y = random_tensor(out, 73), g = random_tensor(out, 74), dy = Tensor::empty(out, DType::f32);
            y.data<float>()[1] = 0.0f;  // not positive: no gradient
            cpu.unary_backward(UnaryOp::relu, y, g, dy);
            Tensor dw = Tensor::empty(w.shape(), DType::f32), db = Tensor::empty({w.shape()[3]}, DType::f32);
            REQUIRE(backend.takes_conv_weight_gradient_through_relu(DType::f32, dw.shape()));
            cpu.conv2d_backward_weights_through_relu(x, y, g, dw, with_bias ? &db : nullptr, args);
            check_close(dw, reference_conv_backward_weights(x, w, dy, args), 1e-4, 1e-5);
            if (with_bias) check_close(db, reference_bias_grad(dy), 1e-4, 1e-5);
          }
  cpu.set_threads(threads_before);
  // NaN and inf: a NaN or inf gradient where y <= 0, and a NaN y, give what
  // the ReLU's gradient then the weight gradient give (NaN in the first two
  // channels' sums, the third's gradient passed through as it is).
  {
    Tensor x = random_tensor({2, 9, 9, 1}, 79), w = random_tensor({3, 3, 1, 16}, 80);
    const Shape out = conv2d_output_shape(x.shape(), w.shape(), {});
    Tensor y = random_tensor(out, 81), g = random_tensor(out, 82), dy = Tensor::empty(out, DType::f32);
    y.data<float>()[0] = -1.0f;
    g.data<float>()[0] = NAN;
    y.data<float>()[1] = -0.5f;
    g.data<float>()[1] = INFINITY;
    y.data<float>()[2] = NAN;
    cpu.unary_backward(UnaryOp::relu, y, g, dy);
    Tensor want_dw = Tensor::empty(w.shape(), DType::f32), want_db = Tensor::empty({16}, DType::f32);
    Tensor dw = Tensor::empty(w.shape(), DType::f32), db = Tensor::empty({16}, DType::f32);
    cpu.conv2d_backward_weights(x, dy, want_dw, &want_db, {});
    cpu.conv2d_backward_weights_through_relu(x, y, g, dw, &db, {});
    for (const auto& [got, want] : {std::pair{&dw, &want_dw}, {&db, &want_db}})
      for (std::int64_t i = 0; i < got->numel(); ++i) {
        const float a = got->data<float>()[i], b = want->data<float>()[i];
        CAPTURE(i);
        CHECK(std::isnan(a) == std::isnan(b));
        CHECK(std::isnan(a) == (i % 16 < 2));
        if (!std::isnan(b)) CHECK(a == doctest::Approx(b).epsilon(1e-5));
      }
  }
  // Bad operands: y of another shape, or a kernel the backend has no masking kernel for.
  Tensor x = random_tensor({1, 6, 6, 1}, 75), g = random_tensor({1, 4, 4, 16}, 76);
  Tensor dw = Tensor::empty({3, 3, 1, 16}, DType::f32);
  Tensor y_wrong = random_tensor({1, 4, 5, 16}, 77);
  CHECK_THROWS_WITH_AS(cpu.conv2d_backward_weights_through_relu(x, y_wrong, g, dw, nullptr, {}),
                       doctest::Contains("conv2d_backward_weights through relu: y"), ShapeError);
  Tensor g5 = random_tensor({1, 4, 4, 5}, 78), dw5 = Tensor::empty({3, 3, 1, 5}, DType::f32);
  CHECK_FALSE(backend.takes_conv_weight_gradient_through_relu(DType::f32, dw5.shape()));
  CHECK_THROWS_AS(cpu.conv2d_backward_weights_through_relu(x, g5, g5, dw5, nullptr, {}), UnsupportedError);
}

TEST_CASE("conv2d backward data as a forward convolution over the turned kernel matches reference loops") {
  // 3x3 kernels with the reference CNN's second convolution's channels,
  // where oneDNN runs its brgemm forward kernel (conv2d.cpp): valid, same,
  // and padding unequal side by side (turned: 1, 2 top and bottom, 2, 0
  // left and right). The rest keep oneDNN's backward-data kernel: 32
  // output channels (the turned way lost there), stride 2, padding past
  // the kernel (turned padding -1), and a kernel size not measured.
  struct Case {
    Shape kernel;
    Conv2dArgs args;
    bool turns;
  };
  const Conv2dArgs same{.pad_top = 1, .pad_bottom = 1, .pad_left = 1, .pad_right = 1};
  const std::vector<Case> cases{
      {{3, 3, 32, 64}, {}, true},
      {{3, 3, 32, 64}, same, true},
      {{3, 3, 32, 64}, {.pad_top = 1, .pad_bottom = 0, .pad_left = 0, .pad_right = 2}, true},
      {{3, 3, 32, 32}, same, false},
      {{3, 3, 32, 64}, {.stride_h = 2, .stride_w = 2, .pad_top = 1, .pad_bottom = 1, .pad_left = 1, .pad_right = 1},
       false},
      {{3, 3, 32, 64}, {.pad_top = 3, .pad_bottom = 0, .pad_left = 0, .pad_right = 0}, false},
      {{2, 2, 32, 64}, {}, false},
  };
  CpuBackend& cpu = cpu_backend();
  Tensor x = random_tensor({2, 9, 8, 32}, 41);
  for (const Case& c : cases) {
    CAPTURE(c.kernel);
    CAPTURE(c.args.stride_h);
    CAPTURE(c.args.pad_top);
    CAPTURE(c.args.pad_right);
    Tensor w = random_tensor(c.kernel, 42);
    Tensor dy = random_tensor(conv2d_output_shape(x.shape(), w.shape(), c.args), 43);
    Tensor dx = random_tensor(x.shape(), 44);  // garbage the kernel must overwrite
    const std::string kernel_name = cpu.conv2d_backward_data_kernel(dy, w, dx, c.args);
    CAPTURE(kernel_name);
    const bool turned = kernel_name.ends_with("(forward, kernel turned)");
    if (!c.turns) CHECK_FALSE(turned);
    // On AVX-512 oneDNN 2.6's backward-data kernel is jit, its forward brgemm.
    if (c.turns && widest_vector_isa() == VectorIsa::avx512 && !onednn_runs_avx2())
      CHECK((turned || kernel_name.starts_with("brg")));
    cpu.conv2d_backward_data(dy, w, dx, c.args);
    check_close(dx, reference_conv_backward_data(x, w, dy, c.args), 1e-4, 1e-5);
    // Again, with the primitives and buffers made: none made anew, the same result.
    const auto primitives = cpu.primitive_count();
    const auto allocations = cpu.allocator().stats().allocations;
    cpu.conv2d_backward_data(dy, w, dx, c.args);
    CHECK(cpu.primitive_count() == primitives);
    CHECK(cpu.allocator().stats().allocations == allocations);
    check_close(dx, reference_conv_backward_data(x, w, dy, c.args), 1e-4, 1e-5);
  }
}

TEST_CASE("conv2d backward data skips input rows no window reaches") {
  // Stride 3 with a 2x2 kernel leaves every third row and column out of all
  // windows: their gradient must be written as zero, not left as garbage.
  Backend& cpu = backend_for(Device::cpu(0));
  Tensor x = random_tensor({1, 8, 8, 2}, 31), w = random_tensor({2, 2, 2, 3}, 32);
  Conv2dArgs args{.stride_h = 3, .stride_w = 3};
  Tensor dy = random_tensor(conv2d_output_shape(x.shape(), w.shape(), args), 33);
  Tensor dx = random_tensor(x.shape(), 34);  // garbage the kernel must overwrite
  cpu.conv2d_backward_data(dy, w, dx, args);
  check_close(dx, reference_conv_backward_data(x, w, dy, args), 1e-4, 1e-5);
}

TEST_CASE("max and avg pool2d forward and backward, with and without padding") {
  Backend& cpu = backend_for(Device::cpu(0));
  struct Case {
    const char* name;
    Pool2dArgs args;
  };
  const std::vector<Case> cases{
      {"max 2x2/2", {.kind = PoolKind::max}},
      {"avg 2x2/2", {.kind = PoolKind::avg}},
      // Overlapping windows: one input can be the max of several windows.
      {"max 3x3/2 pad 1", {PoolKind::max, 3, 3, 2, 2, 1, 1, 1, 1}},
      // Padding excluded from the divisor, so border windows average fewer taps.
      {"avg 3x3/1 pad 1", {PoolKind::avg, 3, 3, 1, 1, 1, 1, 1, 1}},
      {"avg 3x2/2 pad 0,1,1,0", {PoolKind::avg, 3, 2, 2, 2, 0, 1, 1, 0}},
  };
  // 7 rows: 2x2/2 windows leave the last row out; 8 rows: they tile x.
  for (const Shape& shape : {Shape{2, 7, 6, 3}, Shape{2, 8, 6, 3}})
    for (const auto& c : cases) {
      CAPTURE(shape.str());
      CAPTURE(c.name);
      Tensor x = random_tensor(shape, 41);
      Tensor y = Tensor::empty(pool2d_output_shape(x.shape(), c.args), DType::f32);
      Tensor dy = random_tensor(y.shape(), 42);
      auto ref = reference_pool(x, dy, c.args);
      cpu.pool2d_forward(x, y, c.args);
      check_close(y, ref.y, 1e-5, 1e-6);
      Tensor dx = random_tensor(x.shape(), 43);  // garbage the kernel must overwrite
      cpu.pool2d_backward(x, dy, dx, c.args);
      check_close(dx, ref.dx, 1e-5, 1e-6);
    }
}

TEST_CASE("max pool2d backward through the ReLU before it zeroes dx where x is not positive") {
  Backend& cpu = backend_for(Device::cpu(0));
  // x as a ReLU's output: zeros (ties among them too) and positives.
  auto relu_of_random = [&](const Shape& shape, unsigned seed) {
    Tensor x = Tensor::empty(shape, DType::f32);
    cpu.unary(UnaryOp::relu, random_tensor(shape, seed), x);
    return x;
  };
  // The reference's dx, zero where x is not positive.
  auto reference_dx = [](const Tensor& x, const Tensor& dy, const Pool2dArgs& args) {
    auto dx = reference_pool(x, dy, args).dx;
    auto xv = x.to_vector<float>();
    for (std::size_t i = 0; i < xv.size(); ++i)
      if (!(xv[i] > 0.0f)) dx[i] = 0.0f;
    return dx;
  };
  const Pool2dArgs tiling{.kind = PoolKind::max, .relu_before = true},       // 2x2/2: tile an even x
      overlapping{PoolKind::max, 3, 3, 2, 2, 1, 1, 1, 1, true};
  // 70 channels: whole vectors of every width and a rest; 8 rows: 2x2/2 windows tile x.
  for (const Shape& shape : {Shape{3, 7, 6, 70}, Shape{3, 8, 6, 70}})
    for (const Pool2dArgs& args : {tiling, overlapping}) {
      CAPTURE(shape.str());
      CAPTURE(args.window_h);
      Tensor x = relu_of_random(shape, 44);
      Tensor dy = random_tensor(pool2d_output_shape(x.shape(), args), 45);
      Tensor dx = random_tensor(x.shape(), 46);  // garbage the kernel must overwrite
      cpu.pool2d_backward(x, dy, dx, args);
      check_close(dx, reference_dx(x, dy, args), 1e-5, 1e-6);
    }
  SUBCASE("one image, its 16-channel blocks split over 2 threads") {
    auto& backend = dynamic_cast<CpuBackend&>(cpu);
    const int saved = backend.threads();
    Tensor one = relu_of_random({1, 40, 30, 70}, 48);  // above the parallel threshold
    for (const Pool2dArgs& args : {tiling, overlapping}) {
      CAPTURE(args.window_h);
      Tensor dy = random_tensor(pool2d_output_shape(one.shape(), args), 49);
      Tensor dx = random_tensor(one.shape(), 50);
      backend.set_threads(2);
      cpu.pool2d_backward(one, dy, dx, args);
      backend.set_threads(saved);
      check_close(dx, reference_dx(one, dy, args), 1e-5, 1e-6);
    }
  }
  Tensor x = relu_of_random({3, 7, 6, 70}, 44);
  Pool2dArgs avg{.kind = PoolKind::avg, .relu_before = true};
  Tensor dy = random_tensor(pool2d_output_shape(x.shape(), avg), 47);
  Tensor dx = Tensor::empty(x.shape(), DType::f32);
  CHECK_THROWS_WITH_AS(cpu.pool2d_backward(x, dy, dx, avg),
                       doctest::Contains("relu_before needs f32 max pooling"), UnsupportedError);
}

TEST_CASE("softmax and log-softmax forward and backward over the last and a middle axis") {
  Backend& cpu = backend_for(Device::cpu(0));
  auto& backend = dynamic_cast<CpuBackend&>(cpu);
  const int saved = backend.threads();
  backend.set_threads(2);
  // Rows of 7; 130 rows of 131 (vector lanes and a tail, split over the
  // threads); and an axis followed only by a 1, which is innermost too.
  for (const Shape& shape : {Shape{3, 5, 7}, Shape{2, 65, 131}, Shape{4, 9, 1}}) {
    Tensor x = random_tensor(shape, 51, -4.0f, 4.0f);
    Tensor dy = random_tensor(x.shape(), 52);
    for (int axis : {-1, 1, 0})
      for (bool log : {false, true}) {
        CAPTURE(shape.str());
        CAPTURE(axis);
        CAPTURE(log);
        int a = x.shape().normalize_axis(axis);
        if (x.shape()[a] == 1) continue;  // oneDNN's log-softmax of one element gives 1.4e-6, its log(1)
        Tensor y = Tensor::empty(x.shape(), DType::f32);
        cpu.softmax(x, y, axis, log);
        check_close(y, reference_softmax(x, a, log), 1e-5, 1e-6);
        Tensor dx = Tensor::empty(x.shape(), DType::f32);
        cpu.softmax_backward(y, dy, dx, axis, log);
        check_close(dx, reference_softmax_backward(y, dy, a, log), 1e-4, 1e-6);
      }
  }
  backend.set_threads(saved);
}

TEST_CASE("log-softmax backward: -inf log-probabilities weigh 0, a NaN one gives NaN, and dx may be dy") {
  Backend& cpu = backend_for(Device::cpu(0));
  // Rows of 37 (two whole vectors of 16 and a tail): row 0 has a masked
  // element (-inf) and row 1 a NaN, each in a whole vector and in the tail.
  const Shape shape{3, 37};
  Tensor x = random_tensor(shape, 61, -4.0f, 4.0f);
  Tensor y = Tensor::empty(shape, DType::f32);
  cpu.softmax(x, y, -1, true);
  float* py = y.data<float>();
  py[5] = py[35] = -INFINITY;
  py[37 + 3] = py[37 + 36] = NAN;
  Tensor dy = random_tensor(shape, 62);
  Tensor dx = Tensor::empty(shape, DType::f32);
  cpu.softmax_backward(y, dy, dx, -1, true);
  const auto expected = reference_softmax_backward(y, dy, 1, true);
  const auto got = dx.to_vector<float>();
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    if (i / 37 == 1) {
      CHECK(std::isnan(got[i]) == (i == 37 + 3 || i == 37 + 36));  // only where y is NaN: dy's sum is finite
      if (std::isnan(got[i])) continue;
    }
    CHECK(got[i] == doctest::Approx(expected[i]).epsilon(1e-5).scale(1e-6));
  }
  cpu.softmax_backward(y, dy, dy, -1, true);  // in place
  const auto in_place = dy.to_vector<float>();
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK((in_place[i] == got[i] || (std::isnan(in_place[i]) && std::isnan(got[i]))));
  }
}

TEST_CASE("causal softmax equals softmax after adding a mask of -1e9 where keys lie past the query") {
  Backend& cpu = backend_for(Device::cpu(0));
  // Square [5, 5]; 3 queries that are the last 3 of 7 positions; rows enough
  // for the masking pass to split over threads.
  for (const Shape& shape : {Shape{2, 3, 5, 5}, Shape{2, 3, 7}, Shape{2, 130, 300}}) {
    CAPTURE(shape.str());
    const std::int64_t m = shape[shape.rank() - 2], n = shape[shape.rank() - 1];
    Tensor x = random_tensor(shape, 57, -4.0f, 4.0f), masked = Tensor::empty(shape, DType::f32);
    auto xv = x.to_vector<float>();
    for (std::size_t e = 0; e < xv.size(); ++e) {
      const std::int64_t i = static_cast<std::int64_t>(e) / n % m, j = static_cast<std::int64_t>(e) % n;
      masked.data<float>()[e] = xv[e] + (j > i + n - m ? -1e9f : 0.0f);
    }
    Tensor y = Tensor::empty(shape, DType::f32), want = Tensor::empty(shape, DType::f32);
    cpu.softmax(x, y, -1, false, /*causal=*/true);
    cpu.softmax(masked, want, -1, false);
    CHECK(y.to_vector<float>() == want.to_vector<float>());  // bit for bit: the mask's exp is 0 either way
    check_close(y, reference_softmax(masked, shape.rank() - 1, false), 1e-5, 1e-6);
    auto yv = y.to_vector<float>();
    std::size_t masked_nonzero = 0;
    for (std::size_t e = 0; e < yv.size(); ++e)
      if (static_cast<std::int64_t>(e) % n > static_cast<std::int64_t>(e) / n % m + n - m && yv[e] != 0.0f) ++masked_nonzero;
    CHECK(masked_nonzero == 0);
    Tensor in_place = Tensor::from_vector(xv, shape);
    cpu.softmax(in_place, in_place, -1, false, true);
    CHECK(in_place.to_vector<float>() == y.to_vector<float>());
  }
  Tensor x = random_tensor({2, 4, 3}, 58), y = Tensor::empty({2, 4, 3}, DType::f32);
  CHECK_THROWS_AS(cpu.softmax(x, y, -1, false, true), ShapeError);  // 4 queries of 3 keys
  Tensor square = random_tensor({2, 3, 3}, 59), out = Tensor::empty({2, 3, 3}, DType::f32);
  CHECK_THROWS_AS(cpu.softmax(square, out, 1, false, true), ShapeError);  // not over the keys
  CHECK_THROWS_WITH_AS(cpu.softmax(square, out, -1, true, true), doctest::Contains("log"), ShapeError);
}

namespace {

// out[b, h, t] = softmax_j(scale * q . keys[j]) values[j] over j <= positions[b] + t, in double.
std::vector<float> reference_cached_attention(const Tensor& q, const Tensor& keys, const Tensor& values,
                                              const std::vector<std::int32_t>& positions, double scale) {
  const Shape& s = q.shape();
  const std::int64_t heads = s[1], queries = s[2], width = s[3], capacity = keys.shape()[2];
  const auto qv = q.to_vector<float>(), kv = keys.to_vector<float>(), vv = values.to_vector<float>();
  std::vector<float> out(qv.size());
  for (std::int64_t row = 0; row < s[0] * heads * queries; ++row) {
    const std::int64_t sequence_head = row / queries, t = row % queries;
    const std::int64_t n = positions[static_cast<std::size_t>(sequence_head / heads)] + t + 1;
    std::vector<double> score(static_cast<std::size_t>(n));
    double max = -INFINITY, sum = 0;
    for (std::int64_t j = 0; j < n; ++j) {
      double dot = 0;
      for (std::int64_t i = 0; i < width; ++i)
        dot += double{qv[static_cast<std::size_t>(row * width + i)]} *
               kv[static_cast<std::size_t>((sequence_head * capacity + j) * width + i)];
      score[static_cast<std::size_t>(j)] = scale * dot;
      max = std::max(max, scale * dot);
    }
    for (double& e : score) sum += e = std::exp(e - max);
    for (std::int64_t i = 0; i < width; ++i) {
      double acc = 0;
      for (std::int64_t j = 0; j < n; ++j)
        acc += score[static_cast<std::size_t>(j)] * vv[static_cast<std::size_t>((sequence_head * capacity + j) * width + i)];
      out[static_cast<std::size_t>(row * width + i)] = static_cast<float>(acc / sum);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("cached attention attends over each sequence's filled cache rows and never reads the others") {
  CpuBackend& cpu = cpu_backend();
  const int saved = cpu.threads();
  // One query per sequence (a decode step) and three (the last three written);
  // a width of 67 leaves a tail after the vector lanes.
  for (const Shape& cache : {Shape{3, 2, 9, 67}, Shape{2, 4, 16, 8}})
    for (std::int64_t queries : {1, 3})
      for (int threads : {1, 2}) {
        CAPTURE(cache.str());
        CAPTURE(queries);
        CAPTURE(threads);
        cpu.set_threads(threads);
        const Shape shape{cache[0], cache[1], queries, cache[3]};
        const std::vector<std::int32_t> positions = cache[0] == 3 ? std::vector<std::int32_t>{0, 4, 6}
                                                                  : std::vector<std::int32_t>{13, 2};
        Tensor q = random_tensor(shape, 81, -2.0f, 2.0f);
        Tensor keys = random_tensor(cache, 82, -2.0f, 2.0f), values = random_tensor(cache, 83);
        // Rows past each sequence's last query hold NaN: reading one would show.
        for (std::int64_t e = 0; e < cache.numel(); ++e) {
          const std::int64_t row = e / cache[3] % cache[2], sequence = e / (cache[1] * cache[2] * cache[3]);
          if (row > positions[static_cast<std::size_t>(sequence)] + queries - 1)
            keys.data<float>()[e] = values.data<float>()[e] = NAN;
        }
        Tensor out = Tensor::empty(shape, DType::f32);
        cpu.cached_attention(q, keys, values, Tensor::from_vector(positions, {cache[0], 1}), out, 0.3f);
        check_close(out, reference_cached_attention(q, keys, values, positions, 0.3), 1e-5, 1e-6);
      }
  cpu.set_threads(saved);
  Tensor q = random_tensor({2, 1, 2, 4}, 84), keys = random_tensor({2, 1, 5, 4}, 85), out = Tensor::empty({2, 1, 2, 4}, DType::f32);
  // Sequence 1's second query would be at position 5 of 5.
  CHECK_THROWS_WITH_AS(cpu.cached_attention(q, keys, keys, Tensor::from_vector(std::vector<std::int32_t>{0, 4}, {2, 1}), out, 1.0f),
                       doctest::Contains("sequence 1 has 2 queries at position 4 of a cache of 5"), ShapeError);
  Tensor wide = random_tensor({2, 1, 6, 4}, 86), out_wide = Tensor::empty({2, 1, 6, 4}, DType::f32);
  CHECK_THROWS_WITH_AS(cpu.cached_attention(wide, keys, keys, Tensor::from_vector(std::vector<std::int32_t>{0, 0}, {2, 1}), out_wide, 1.0f),
                       doctest::Contains("T at most C"), ShapeError);
}

TEST_CASE("layer norm forward (y, mean, rstd) and backward (dx, dgamma, dbeta)") {
  Backend& cpu = backend_for(Device::cpu(0));
  const float epsilon = 1e-5f;
  // An offset mean checks that the variance is not computed as E[x^2] - E[x]^2.
  Tensor x = random_tensor({2, 3, 24}, 61, 2.0f, 4.0f);
  Tensor gamma = random_tensor({24}, 62, 0.5f, 1.5f), beta = random_tensor({24}, 63);
  Tensor dy = random_tensor(x.shape(), 64);
  auto ref = reference_layer_norm(x, gamma, beta, dy, epsilon);

  Tensor y = Tensor::empty(x.shape(), DType::f32);
  Tensor mean = Tensor::empty({6}, DType::f32), rstd = Tensor::empty({6}, DType::f32);
  cpu.layer_norm(x, gamma, beta, y, mean, rstd, epsilon);
  check_close(mean, ref.mean, 1e-5, 1e-6);
  check_close(rstd, ref.rstd, 1e-4, 1e-5);
  check_close(y, ref.y, 1e-4, 1e-5);

  Tensor dx = Tensor::empty(x.shape(), DType::f32);
  Tensor dgamma = Tensor::empty({24}, DType::f32), dbeta = Tensor::empty({24}, DType::f32);
  cpu.layer_norm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
  check_close(dx, ref.dx, 1e-3, 1e-5);
  check_close(dgamma, ref.dgamma, 1e-4, 1e-5);
  check_close(dbeta, ref.dbeta, 1e-5, 1e-5);

  SUBCASE("a rank-1 input is one row") {
    Tensor x1 = random_tensor({24}, 65), dy1 = random_tensor({24}, 66);
    auto ref1 = reference_layer_norm(x1, gamma, beta, dy1, epsilon);
    Tensor y1 = Tensor::empty({24}, DType::f32);
    Tensor mean1 = Tensor::empty({1}, DType::f32), rstd1 = Tensor::empty({1}, DType::f32);
    cpu.layer_norm(x1, gamma, beta, y1, mean1, rstd1, epsilon);
    check_close(y1, ref1.y, 1e-4, 1e-5);
    Tensor dx1 = Tensor::empty({24}, DType::f32);
    cpu.layer_norm_backward(x1, gamma, mean1, rstd1, dy1, dx1, dgamma, dbeta);
    check_close(dx1, ref1.dx, 1e-3, 1e-5);
    check_close(dgamma, ref1.dgamma, 1e-4, 1e-5);
  }
}

// Mixed precision's cast fused into the op that computes a matmul operand
// (fusion.hpp): a bf16 y is the f32 result rounded, bit for bit, as the
// separate cast rounds it.
TEST_CASE("layer norm and unary ops into a bf16 y give the f32 result cast to bf16, bit for bit") {
  Backend& cpu = backend_for(Device::cpu(0));
  const Tensor x = random_tensor({5, 3, 40}, 91, -3.0f, 3.0f);
  const Tensor gamma = random_tensor({40}, 92, 0.5f, 1.5f), beta = random_tensor({40}, 93);
  const auto cast_of = [&](const Tensor& f32) {
    Tensor b = Tensor::empty(f32.shape(), DType::bf16);
    cpu.cast(f32, b);
    return bf16_bits(b);
  };
  Tensor y = Tensor::empty(x.shape(), DType::f32), y16 = Tensor::empty(x.shape(), DType::bf16);
  Tensor mean = Tensor::empty({15}, DType::f32), rstd = Tensor::empty({15}, DType::f32);
  Tensor mean16 = Tensor::empty({15}, DType::f32), rstd16 = Tensor::empty({15}, DType::f32);
  cpu.layer_norm(x, gamma, beta, y, mean, rstd, 1e-5f);
  cpu.layer_norm(x, gamma, beta, y16, mean16, rstd16, 1e-5f);
  CHECK(bf16_bits(y16) == cast_of(y));
  CHECK(mean16.to_vector<float>() == mean.to_vector<float>());
  CHECK(rstd16.to_vector<float>() == rstd.to_vector<float>());
  for (UnaryOp op : {UnaryOp::gelu_erf, UnaryOp::gelu_tanh, UnaryOp::relu, UnaryOp::exp}) {
    CAPTURE(name(op));
    cpu.unary(op, x, y);
    cpu.unary(op, x, y16);
    CHECK(bf16_bits(y16) == cast_of(y));
  }
  // The other way (a bf16 x into an f32 y) is no fused cast: an error as before.
  CHECK_THROWS_AS(cpu.unary(UnaryOp::relu, y16, y), DTypeError);
  CHECK_THROWS_AS(cpu.layer_norm(y16, gamma, beta, y, mean, rstd, 1e-5f), DTypeError);
}

TEST_CASE("network kernels called twice with the same shapes create no primitive and allocate nothing") {
  CpuBackend& cpu = cpu_backend();
  Tensor x = random_tensor({2, 8, 8, 3}, 71), w = random_tensor({3, 3, 3, 4}, 72);
  Tensor bias = random_tensor({4}, 73);
  auto conv = conv_args(x.shape(), w.shape(), 1, true);
  Tensor y = Tensor::empty(conv2d_output_shape(x.shape(), w.shape(), conv), DType::f32);
  Tensor dy = random_tensor(y.shape(), 74);
  Tensor dx = Tensor::empty(x.shape(), DType::f32), dw = Tensor::empty(w.shape(), DType::f32);
  Tensor db = Tensor::empty({4}, DType::f32);
  Pool2dArgs pool{PoolKind::max, 3, 3, 2, 2, 1, 1, 1, 1};
  Tensor py = Tensor::empty(pool2d_output_shape(x.shape(), pool), DType::f32);
  Tensor pdy = random_tensor(py.shape(), 75);
  Tensor gamma = random_tensor({3}, 76), beta = random_tensor({3}, 77);
  Tensor ln_y = Tensor::empty(x.shape(), DType::f32);
  Tensor mean = Tensor::empty({128}, DType::f32), rstd = Tensor::empty({128}, DType::f32);
  Tensor dgamma = Tensor::empty({3}, DType::f32), dbeta = Tensor::empty({3}, DType::f32);
  Tensor sdx = Tensor::empty(y.shape(), DType::f32);

  auto step = [&] {
    cpu.conv2d_forward(x, w, &bias, y, conv);
    cpu.conv2d_backward_data(dy, w, dx, conv);
    cpu.conv2d_backward_weights(x, dy, dw, &db, conv);
    cpu.pool2d_forward(x, py, pool);
    cpu.pool2d_backward(x, pdy, dx, pool);
    cpu.softmax(x, dx, 1, true);
    cpu.softmax_backward(y, dy, sdx, -1, false);  // f32 over the last axis: a loop of the backend's own
    cpu.softmax_backward(y, dy, sdx, 0, false);   // oneDNN's primitive
    cpu.layer_norm(x, gamma, beta, ln_y, mean, rstd, 1e-5f);
    cpu.layer_norm_backward(x, gamma, mean, rstd, ln_y, dx, dgamma, dbeta);
  };
  step();
  auto primitives = cpu.primitive_count();
  auto allocations = cpu.allocator().stats().allocations;
  step();
  CHECK(cpu.primitive_count() == primitives);
  CHECK(cpu.allocator().stats().allocations == allocations);
}
