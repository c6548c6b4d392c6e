// The CUDA backend's softmax kernel bodies (backends/cuda/softmax.hpp),
// checked on the host: softmax_row and softmax_backward_row run over every row
// match the CPU backend (oneDNN, or its own loop for f32 backward over the
// last axis) for softmax and log-softmax, over the first,
// a middle and the last axis, for odd sizes (1, 7, 65537) and ranks 1-4. The
// cases at the end (test suite "gpu", CUDA builds only) run the kernels.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "backends/cuda/softmax.hpp"
#include "backends/registry.hpp"
#include "tests/gpu_test_util.hpp"
#include "tests/test_util.hpp"

using namespace tessera;
using namespace tessera::test;

namespace {

Backend& cpu() { return backend_for(Device::cpu(0)); }

const std::vector<Shape> kShapes = {Shape{1},       Shape{7},          Shape{65537},
                                    Shape{3, 7},    Shape{2, 65537},   Shape{7, 1, 5},
                                    Shape{3, 5, 7}, Shape{2, 3, 4, 5}, Shape{65537, 2}};

// oneDNN's exp and log are polynomial approximations, off by up to a few 1e-6
// absolutely near 0 (log-softmax of a dominant logit, log(1 + tiny)), and it
// sums in another order.
constexpr double kRtol = 2e-5, kAtol = 5e-6;

SoftmaxRows rows_of(const Shape& s, int axis) { return make_softmax_rows(s.dims().data(), s.rank(), axis); }

std::vector<float> host_softmax(const Tensor& x, int axis, bool log) {
  const SoftmaxRows rows = rows_of(x.shape(), axis);
  std::vector<float> y(static_cast<std::size_t>(x.numel()));
  for (std::int64_t r = 0; r < rows.count(); ++r) softmax_row(x.data<float>(), y.data(), rows, r, log);
  return y;
}

std::vector<float> host_softmax_backward(const Tensor& y, const Tensor& dy, int axis, bool log) {
  const SoftmaxRows rows = rows_of(y.shape(), axis);
  std::vector<float> dx(static_cast<std::size_t>(y.numel()));
  for (std::int64_t r = 0; r < rows.count(); ++r)
    softmax_backward_row(y.data<float>(), dy.data<float>(), dx.data(), rows, r, log);
  return dx;
}

}  // namespace

TEST_CASE("cuda softmax rows cover every element once, along any axis") {
  const Shape s{2, 3, 4, 5};
  for (int axis = 0; axis < s.rank(); ++axis) {
    const SoftmaxRows rows = rows_of(s, axis);
    std::vector<int> visits(static_cast<std::size_t>(s.numel()), 0);
    for (std::int64_t r = 0; r < rows.count(); ++r)
      for (std::int64_t j = 0; j < rows.n; ++j) ++visits[static_cast<std::size_t>(rows.base(r) + j * rows.inner)];
    bool once = true;
    for (int v : visits) once = once && v == 1;
    CHECK(once);
  }
}

TEST_CASE("cuda softmax_row and softmax_backward_row match the CPU backend over first, middle, last axes") {
  for (const Shape& shape : kShapes) {
    // Large logits too: the max subtraction keeps exp finite.
    const Tensor x = random_tensor(shape, 51, -30.0f, 30.0f);
    const Tensor dy = random_tensor(shape, 52);
    for (int axis : {0, shape.rank() / 2, shape.rank() - 1})
      for (bool log : {false, true}) {
        CAPTURE(shape.str());
        CAPTURE(axis);
        CAPTURE(log);
        Tensor y = Tensor::empty(shape, DType::f32), dx = Tensor::empty(shape, DType::f32);
        cpu().softmax(x, y, axis, log);
        cpu().softmax_backward(y, dy, dx, axis, log);
        check_close(host_softmax(x, axis, log), y.to_vector<float>(), kRtol, kAtol);
        check_close(host_softmax_backward(y, dy, axis, log), dx.to_vector<float>(), kRtol, kAtol);
      }
  }
}

// --- the kernels on a GPU --------------------------------------------------------

#if TESSERA_HAVE_CUDA

TEST_CASE("cuda backend supports f32 softmax, not bf16 yet" * doctest::test_suite("gpu") *
          skip_without_gpu()) {
  for (OpKind k : {OpKind::softmax, OpKind::softmax_grad}) {
    CHECK(gpu().supports(k, DType::f32));
    CHECK_FALSE(gpu().supports(k, DType::bf16));
  }
  Tensor x = Tensor::empty({4}, DType::bf16, Device::cuda(0));
  CHECK_THROWS_AS(gpu().softmax(x, x, 0, false), UnsupportedError);
}

TEST_CASE("cuda softmax kernels match the CPU backend over first, middle, last axes" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  const Device cuda = Device::cuda(0);
  for (const Shape& shape : kShapes) {
    const Tensor x = random_tensor(shape, 53, -30.0f, 30.0f);
    const Tensor dy = random_tensor(shape, 54);
    const Tensor gx = to_gpu(x), gdy = to_gpu(dy);
    for (int axis : {0, shape.rank() / 2, shape.rank() - 1})
      for (bool log : {false, true}) {
        CAPTURE(shape.str());
        CAPTURE(axis);
        CAPTURE(log);
        Tensor y = Tensor::empty(shape, DType::f32), dx = Tensor::empty(shape, DType::f32);
        Tensor gy = Tensor::empty(shape, DType::f32, cuda), gdx = Tensor::empty(shape, DType::f32, cuda);
        cpu().softmax(x, y, axis, log);
        cpu().softmax_backward(y, dy, dx, axis, log);
        gpu().softmax(gx, gy, axis, log);
        gpu().softmax_backward(to_gpu(y), gdy, gdx, axis, log);  // the same y on both sides
        check_close(to_host(gy).to_vector<float>(), y.to_vector<float>(), kRtol, kAtol);
        check_close(to_host(gdx).to_vector<float>(), dx.to_vector<float>(), kRtol, kAtol);
      }
  }
}

#endif  // TESSERA_HAVE_CUDA
