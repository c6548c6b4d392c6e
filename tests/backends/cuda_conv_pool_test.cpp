// The CUDA backend's direct convolution and pooling kernel bodies
// (backends/cuda/conv_pool.hpp), checked on the host against the CPU backend
// (oneDNN) on small odd shapes: batch 2, 5x7 images, 3 channels, 3x3 and 2x2
// windows, strides 1 and 2, "same" and "valid" padding. The cases at the end
// (test suite "gpu", CUDA builds only) run the kernels.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/conv_pool.hpp"
#include "backends/registry.hpp"
#include "tests/gpu_test_util.hpp"
#include "tests/test_util.hpp"
#include "tessera_features.hpp"

using namespace tessera;
using namespace tessera::test;

namespace {

Backend& cpu() { return backend_for(Device::cpu(0)); }

const Shape kInput{2, 5, 7, 3};

struct Window {
  int kh, kw, sh, sw;
  bool same;
};

const Window kWindows[] = {{3, 3, 1, 1, true},  {3, 3, 1, 1, false}, {3, 3, 2, 2, true},
                           {3, 3, 2, 2, false}, {2, 2, 1, 1, true},  {2, 2, 2, 2, false},
                           {2, 2, 2, 2, true},  {3, 2, 2, 1, true}};

std::string describe(const Window& win) {
  return std::to_string(win.kh) + "x" + std::to_string(win.kw) + "/" + std::to_string(win.sh) +
         "," + std::to_string(win.sw) + (win.same ? " same" : " valid");
}

Conv2dArgs conv_args(const Window& win) {
  Conv2dArgs a;
  a.stride_h = win.sh;
  a.stride_w = win.sw;
  if (win.same) {
    same_padding(kInput[1], win.kh, win.sh, a.pad_top, a.pad_bottom);
    same_padding(kInput[2], win.kw, win.sw, a.pad_left, a.pad_right);
  }
  return a;
}

Pool2dArgs pool_args(const Window& win, PoolKind kind) {
  const Conv2dArgs c = conv_args(win);
  return {kind, win.kh, win.kw, win.sh, win.sw, c.pad_top, c.pad_bottom, c.pad_left, c.pad_right};
}

template <typename F>
std::vector<float> each(std::int64_t count, F f) {
  std::vector<float> out(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) out[static_cast<std::size_t>(i)] = f(i);
  return out;
}

// Values in {0, 1, 2}: many ties inside every pooling window.
Tensor tied_tensor(const Shape& shape) {
  std::vector<float> v(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7 + i / 5) % 3);
  return Tensor::from_vector(v, shape);
}

const int kFilters = 4;

// A pooling's backward as it is, and for max pooling also through a ReLU
// before it (Pool2dArgs::relu_before).
std::vector<Pool2dArgs> backward_args(const Pool2dArgs& args) {
  std::vector<Pool2dArgs> all{args};
  if (args.kind == PoolKind::max) {
    all.push_back(args);
    all.back().relu_before = true;
  }
  return all;
}

}  // namespace

TEST_CASE("cuda conv2d element functions match the CPU backend") {
  const Tensor x = random_tensor(kInput, 51);
  for (const Window& win : kWindows) {
    CAPTURE(describe(win));
    const Conv2dArgs args = conv_args(win);
    const Tensor w = random_tensor(Shape{win.kh, win.kw, kInput[3], kFilters}, 52);
    const Tensor bias = random_tensor(Shape{kFilters}, 53);
    const Shape ys = conv2d_output_shape(kInput, w.shape(), args);
    const Tensor dy = random_tensor(ys, 54);
    const ConvGeometry g = conv_geometry(kInput, w.shape(), ys, args);

    Tensor y = Tensor::empty(ys, DType::f32);
    cpu().conv2d_forward(x, w, &bias, y, args);
    check_close(each(ys.numel(), [&](std::int64_t i) {
                  return conv2d_forward_element(x.data<float>(), w.data<float>(),
                                                bias.data<float>(), g, i);
                }),
                y.to_vector<float>(), 1e-5, 1e-5);
    cpu().conv2d_forward(x, w, nullptr, y, args);
    check_close(each(ys.numel(), [&](std::int64_t i) {
                  return conv2d_forward_element(x.data<float>(), w.data<float>(), nullptr, g, i);
                }),
                y.to_vector<float>(), 1e-5, 1e-5);

    Tensor dx = Tensor::empty(kInput, DType::f32);
    cpu().conv2d_backward_data(dy, w, dx, args);
    check_close(each(kInput.numel(), [&](std::int64_t i) {
                  return conv2d_backward_data_element(dy.data<float>(), w.data<float>(), g, i);
                }),
                dx.to_vector<float>(), 1e-5, 1e-5);

    Tensor dw = Tensor::empty(w.shape(), DType::f32);
    Tensor db = Tensor::empty(bias.shape(), DType::f32);
    cpu().conv2d_backward_weights(x, dy, dw, &db, args);
    check_close(each(w.shape().numel(), [&](std::int64_t i) {
                  return conv2d_backward_weights_element(x.data<float>(), dy.data<float>(), g, i);
                }),
                dw.to_vector<float>(), 1e-5, 1e-5);
    check_close(each(kFilters, [&](std::int64_t f) {
                  return conv2d_backward_bias_element(dy.data<float>(), g, f);
                }),
                db.to_vector<float>(), 1e-5, 1e-5);
  }
}

TEST_CASE("cuda pool2d element functions match the CPU backend, ties included") {
  for (bool tied : {false, true}) {
    const Tensor x = tied ? tied_tensor(kInput) : random_tensor(kInput, 61);
    for (const Window& win : kWindows)
      for (PoolKind kind : {PoolKind::max, PoolKind::avg}) {
        CAPTURE(describe(win));
        CAPTURE(name(kind));
        CAPTURE(tied);
        const Pool2dArgs args = pool_args(win, kind);
        const Shape ys = pool2d_output_shape(kInput, args);
        const Tensor dy = random_tensor(ys, 62);
        const ConvGeometry g = pool_geometry(kInput, ys, args);

        Tensor y = Tensor::empty(ys, DType::f32);
        cpu().pool2d_forward(x, y, args);
        check_close(each(ys.numel(), [&](std::int64_t i) {
                      return pool2d_forward_element(kind, x.data<float>(), g, i);
                    }),
                    y.to_vector<float>(), 1e-6, 1e-6);

        for (const Pool2dArgs& backward : backward_args(args)) {
          CAPTURE(backward.relu_before);
          Tensor dx = Tensor::empty(kInput, DType::f32);
          cpu().pool2d_backward(x, dy, dx, backward);
          check_close(each(kInput.numel(), [&](std::int64_t i) {
                        return pool2d_backward_element(kind, x.data<float>(), dy.data<float>(), g, i,
                                                       backward.relu_before);
                      }),
                      dx.to_vector<float>(), 1e-5, 1e-6);
        }
      }
  }
}

// --- the kernels on a GPU --------------------------------------------------------

#if TESSERA_HAVE_CUDA

TEST_CASE("cuda backend supports f32 conv2d and pool2d, not bf16 yet" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  for (OpKind k : {OpKind::conv2d, OpKind::conv2d_grad_input,
                   OpKind::conv2d_grad_weight, OpKind::pool2d,
                   OpKind::pool2d_grad}) {
    CHECK(gpu().supports(k, DType::f32));
    CHECK_FALSE(gpu().supports(k, DType::bf16));
  }
  Tensor x = Tensor::empty(kInput, DType::bf16, Device::cuda(0));
  Tensor y = Tensor::empty(pool2d_output_shape(kInput, Pool2dArgs{}), DType::bf16, Device::cuda(0));
  CHECK_THROWS_AS(gpu().pool2d_forward(x, y, Pool2dArgs{}), UnsupportedError);
}

TEST_CASE("cuda conv2d kernels match the CPU backend" * doctest::test_suite("gpu") *
          skip_without_gpu()) {
  const Tensor x = random_tensor(kInput, 71);
  const Tensor gx = to_gpu(x);
  for (const Window& win : kWindows) {
    CAPTURE(describe(win));
    const Conv2dArgs args = conv_args(win);
    const Tensor w = random_tensor(Shape{win.kh, win.kw, kInput[3], kFilters}, 72);
    const Tensor bias = random_tensor(Shape{kFilters}, 73);
    const Shape ys = conv2d_output_shape(kInput, w.shape(), args);
    const Tensor dy = random_tensor(ys, 74);
    const Tensor gw = to_gpu(w), gbias = to_gpu(bias), gdy = to_gpu(dy);

    Tensor y = Tensor::empty(ys, DType::f32);
    Tensor gy = Tensor::empty(ys, DType::f32, Device::cuda(0));
    cpu().conv2d_forward(x, w, &bias, y, args);
    gpu().conv2d_forward(gx, gw, &gbias, gy, args);
    check_close(to_host(gy).to_vector<float>(), y.to_vector<float>(), 1e-5, 1e-5);
    Conv2dArgs relu = args;  // the fused activation (an epilogue of the executor)
    relu.activation = Activation::relu;
    cpu().conv2d_forward(x, w, &bias, y, relu);
    gpu().conv2d_forward(gx, gw, &gbias, gy, relu);
    check_close(to_host(gy).to_vector<float>(), y.to_vector<float>(), 1e-5, 1e-5);

    Tensor dx = Tensor::empty(kInput, DType::f32);
    Tensor gdx = Tensor::empty(kInput, DType::f32, Device::cuda(0));
    cpu().conv2d_backward_data(dy, w, dx, args);
    gpu().conv2d_backward_data(gdy, gw, gdx, args);
    check_close(to_host(gdx).to_vector<float>(), dx.to_vector<float>(), 1e-5, 1e-5);

    Tensor dw = Tensor::empty(w.shape(), DType::f32);
    Tensor db = Tensor::empty(bias.shape(), DType::f32);
    Tensor gdw = Tensor::empty(w.shape(), DType::f32, Device::cuda(0));
    Tensor gdb = Tensor::empty(bias.shape(), DType::f32, Device::cuda(0));
    cpu().conv2d_backward_weights(x, dy, dw, &db, args);
    gpu().conv2d_backward_weights(gx, gdy, gdw, &gdb, args);
    check_close(to_host(gdw).to_vector<float>(), dw.to_vector<float>(), 1e-5, 1e-5);
    check_close(to_host(gdb).to_vector<float>(), db.to_vector<float>(), 1e-5, 1e-5);
  }
}

TEST_CASE("cuda pool2d kernels match the CPU backend, ties included" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  for (bool tied : {false, true}) {
    const Tensor x = tied ? tied_tensor(kInput) : random_tensor(kInput, 81);
    const Tensor gx = to_gpu(x);
    for (const Window& win : kWindows)
      for (PoolKind kind : {PoolKind::max, PoolKind::avg}) {
        CAPTURE(describe(win));
        CAPTURE(name(kind));
        CAPTURE(tied);
        const Pool2dArgs args = pool_args(win, kind);
        const Shape ys = pool2d_output_shape(kInput, args);
        const Tensor dy = random_tensor(ys, 82);
        const Tensor gdy = to_gpu(dy);

        Tensor y = Tensor::empty(ys, DType::f32);
        Tensor gy = Tensor::empty(ys, DType::f32, Device::cuda(0));
        cpu().pool2d_forward(x, y, args);
        gpu().pool2d_forward(gx, gy, args);
        check_close(to_host(gy).to_vector<float>(), y.to_vector<float>(), 1e-6, 1e-6);

        for (const Pool2dArgs& backward : backward_args(args)) {
          CAPTURE(backward.relu_before);
          Tensor dx = Tensor::empty(kInput, DType::f32);
          Tensor gdx = Tensor::empty(kInput, DType::f32, Device::cuda(0));
          cpu().pool2d_backward(x, dy, dx, backward);
          gpu().pool2d_backward(gx, gdy, gdx, backward);
          check_close(to_host(gdx).to_vector<float>(), dx.to_vector<float>(), 1e-5, 1e-6);
        }
      }
  }
}

#endif  // TESSERA_HAVE_CUDA
