// The CUDA backend's softmax kernel bodies (backends/cuda/softmax.hpp),
// checked on the host: softmax_row and softmax_backward_row run over every row
// (the thread-per-row kernels), and the lane-split passes over 32 lanes
// combined in the warp kernels' shuffle tree, match the CPU backend (oneDNN,
// or its own loop for f32 backward over the last axis) for softmax and
// log-softmax, over the first, a middle and the last axis, for odd sizes
// (1, 7, 65537), rows of 768 and 1024, ranks 1-4, and causal rows. The cases
// at the end (test suite "gpu", CUDA builds only) run the kernels.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cuda/softmax.hpp"
#include "backends/registry.hpp"
#include "tests/gpu_test_util.hpp"
#include "tests/test_util.hpp"
#include "tessera_features.hpp"

using namespace tessera;
using namespace tessera::test;

namespace {

Backend& cpu() { return backend_for(Device::cpu(0)); }

const std::vector<Shape> kShapes = {Shape{1},       Shape{7},          Shape{65537},
                                    Shape{3, 7},    Shape{2, 65537},   Shape{7, 1, 5},
                                    Shape{3, 5, 7}, Shape{2, 3, 4, 5}, Shape{65537, 2},
                                    Shape{3, 1024}, Shape{5, 768}};

// oneDNN's exp and log are polynomial approximations, off by up to a few 1e-6
// absolutely near 0 (log-softmax of a dominant logit, log(1 + tiny)), and it
// sums in another order.
constexpr double kRtol = 2e-5, kAtol = 5e-6;

SoftmaxRows rows_of(const Shape& s, int axis) { return make_softmax_rows(s.dims().data(), s.rank(), axis); }

SoftmaxRows causal_rows(const Shape& s) { return make_causal_softmax_rows(s.dims().data(), s.rank()); }

std::vector<float> host_softmax(const Tensor& x, int axis, bool log, bool causal = false) {
  const SoftmaxRows rows = causal ? causal_rows(x.shape()) : rows_of(x.shape(), axis);
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

// The warp kernels' combine of the lanes' partials: lane 0's total after
// shuffles down by lanes / 2, ..., 2, 1 (lanes a power of 2).
template <typename Combine>
float tree_combine(std::vector<float> partials, Combine combine) {
  for (std::size_t offset = partials.size() / 2; offset > 0; offset /= 2)
    for (std::size_t l = 0; l < offset; ++l) partials[l] = combine(partials[l], partials[l + offset]);
  return partials[0];
}

float add(float a, float b) { return a + b; }

// The warp-per-row kernels on the host: each pass split over `lanes` lanes.
std::vector<float> host_softmax_lanes(const Tensor& x, int axis, bool log, std::int64_t lanes,
                                      bool causal = false) {
  const SoftmaxRows rows = causal ? causal_rows(x.shape()) : rows_of(x.shape(), axis);
  const float* in = x.data<float>();
  std::vector<float> y(static_cast<std::size_t>(x.numel()));
  std::vector<float> partials(static_cast<std::size_t>(lanes));
  for (std::int64_t r = 0; r < rows.count(); ++r) {
    for (std::int64_t l = 0; l < lanes; ++l)
      partials[static_cast<std::size_t>(l)] = softmax_partial_max(in, rows, r, l, lanes);
    const float max = tree_combine(partials, softmax_max_combine);
    for (std::int64_t l = 0; l < lanes; ++l)
      partials[static_cast<std::size_t>(l)] = softmax_partial_sum(in, rows, r, max, l, lanes);
    const float sum = tree_combine(partials, add);
    for (std::int64_t l = 0; l < lanes; ++l) softmax_write(in, y.data(), rows, r, max, sum, log, l, lanes);
  }
  return y;
}

std::vector<float> host_softmax_backward_lanes(const Tensor& y, const Tensor& dy, int axis, bool log,
                                               std::int64_t lanes) {
  const SoftmaxRows rows = rows_of(y.shape(), axis);
  std::vector<float> dx(static_cast<std::size_t>(y.numel()));
  std::vector<float> partials(static_cast<std::size_t>(lanes));
  for (std::int64_t r = 0; r < rows.count(); ++r) {
    for (std::int64_t l = 0; l < lanes; ++l)
      partials[static_cast<std::size_t>(l)] =
          softmax_backward_partial(y.data<float>(), dy.data<float>(), rows, r, log, l, lanes);
    const float sum = tree_combine(partials, add);
    for (std::int64_t l = 0; l < lanes; ++l)
      softmax_backward_write(y.data<float>(), dy.data<float>(), dx.data(), rows, r, sum, log, l, lanes);
  }
  return dx;
}

#if TESSERA_HAVE_CUDA
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
#endif

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

TEST_CASE("cuda softmax rows, by one lane and by 32, match the CPU backend over first, middle, last axes") {
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
        // Split over a warp's 32 lanes, as the warp kernels run a row.
        check_close(host_softmax_lanes(x, axis, log, 32), y.to_vector<float>(), kRtol, kAtol);
        check_close(host_softmax_backward_lanes(y, dy, axis, log, 32), dx.to_vector<float>(), kRtol, kAtol);
      }
  }
}

TEST_CASE("cuda softmax takes a warp per row over the last axis from 32 elements") {
  CHECK(softmax_warp_per_row(rows_of(Shape{64, 1024}, 1)));
  CHECK(softmax_warp_per_row(rows_of(Shape{65537}, 0)));
  CHECK(softmax_warp_per_row(rows_of(Shape{2, 3, 32}, 2)));
  CHECK_FALSE(softmax_warp_per_row(rows_of(Shape{2, 3, 31}, 2)));
  CHECK_FALSE(softmax_warp_per_row(rows_of(Shape{64, 1024}, 0)));  // inner 1024: a thread per row
  CHECK_FALSE(softmax_warp_per_row(rows_of(Shape{3, 64, 2}, 1)));
}

const std::vector<Shape> kCausalShapes = {Shape{2, 3, 5, 5}, Shape{2, 3, 7}, Shape{4, 64, 64}, Shape{2, 33, 100}};

TEST_CASE("cuda causal softmax rows, by one lane and by 32, match the CPU backend's causal softmax") {
  for (const Shape& shape : kCausalShapes) {
    CAPTURE(shape.str());
    const Tensor x = random_tensor(shape, 61, -30.0f, 30.0f);
    Tensor y = Tensor::empty(shape, DType::f32);
    cpu().softmax(x, y, -1, false, /*causal=*/true);
    const int last = shape.rank() - 1;
    check_close(host_softmax(x, last, false, true), y.to_vector<float>(), kRtol, kAtol);
    check_close(host_softmax_lanes(x, last, false, 32, true), y.to_vector<float>(), kRtol, kAtol);
    // Each row counts up to its query's position: the last query sees every key.
    const SoftmaxRows rows = causal_rows(shape);
    CHECK(rows.valid(0) == shape[last] - shape[last - 1] + 1);
    CHECK(rows.valid(shape[last - 1] - 1) == shape[last]);
    CHECK(rows.valid(shape[last - 1]) == rows.valid(0));  // the next block starts over
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

TEST_CASE("cuda softmax warp-per-row kernels match the CPU backend and repeat bit for bit" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  const Device cuda = Device::cuda(0);
  const std::vector<Shape> shapes = {Shape{64, 1024}, Shape{37, 1000}, Shape{2, 3, 33}, Shape{5, 768}};
  for (const Shape& shape : shapes) {
    const int axis = shape.rank() - 1;
    CAPTURE(shape.str());
    CHECK(softmax_warp_per_row(rows_of(shape, axis)));
    const Tensor x = random_tensor(shape, 55, -30.0f, 30.0f);
    const Tensor dy = random_tensor(shape, 56);
    const Tensor gx = to_gpu(x), gdy = to_gpu(dy);
    for (bool log : {false, true}) {
      CAPTURE(log);
      Tensor y = Tensor::empty(shape, DType::f32), dx = Tensor::empty(shape, DType::f32);
      cpu().softmax(x, y, axis, log);
      cpu().softmax_backward(y, dy, dx, axis, log);
      const Tensor gy_in = to_gpu(y);  // the same y on both sides
      std::vector<float> first_y, first_dx;
      for (int run = 0; run < 2; ++run) {
        CAPTURE(run);
        Tensor gy = Tensor::empty(shape, DType::f32, cuda), gdx = Tensor::empty(shape, DType::f32, cuda);
        gpu().softmax(gx, gy, axis, log);
        gpu().softmax_backward(gy_in, gdy, gdx, axis, log);
        const std::vector<float> got_y = to_host(gy).to_vector<float>();
        const std::vector<float> got_dx = to_host(gdx).to_vector<float>();
        check_close(got_y, y.to_vector<float>(), kRtol, kAtol);
        check_close(got_dx, dx.to_vector<float>(), kRtol, kAtol);
        if (run == 0) {
          first_y = got_y;
          first_dx = got_dx;
        } else {
          CHECK(same_bits(got_y, first_y));
          CHECK(same_bits(got_dx, first_dx));
        }
      }
    }
  }
}

TEST_CASE("cuda causal softmax matches the CPU backend's, thread and warp kernels" * doctest::test_suite("gpu") *
          skip_without_gpu()) {
  // Rows of 5 and 7 take a thread each, of 64 and 100 a warp.
  for (const Shape& shape : kCausalShapes) {
    CAPTURE(shape.str());
    const Tensor x = random_tensor(shape, 62, -30.0f, 30.0f);
    Tensor y = Tensor::empty(shape, DType::f32), gy = Tensor::empty(shape, DType::f32, Device::cuda(0));
    cpu().softmax(x, y, -1, false, /*causal=*/true);
    gpu().softmax(to_gpu(x), gy, -1, false, /*causal=*/true);
    check_close(to_host(gy).to_vector<float>(), y.to_vector<float>(), kRtol, kAtol);
  }
}

#endif  // TESSERA_HAVE_CUDA
