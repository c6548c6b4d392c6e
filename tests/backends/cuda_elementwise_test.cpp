// The CUDA backend's elementwise kernel bodies, checked on the host: the
// unary/binary element functions (elementwise.hpp) against the CPU backend on
// the same inputs, the broadcast index mapper (broadcast_index.hpp) against a
// NumPy-rule reference, and the grid-stride launch configurations (launch.hpp)
// by simulating the loop. None of this needs a GPU or the CUDA toolkit.
//
// The cases at the end (test suite "gpu", built with CUDA only) run the kernels
// themselves against the CPU backend; `tessera_tests --gpu-suite` runs them.
#include <doctest/doctest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backends/cuda/broadcast_index.hpp"
#include "backends/cuda/elementwise.hpp"
#include "backends/cuda/launch.hpp"
#include "backends/registry.hpp"
#include "tests/gpu_test_util.hpp"
#include "tests/test_util.hpp"
#include "tessera_features.hpp"

using namespace tessera;
using namespace tessera::test;

namespace {

Backend& cpu() { return backend_for(Device::cpu(0)); }

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// oneDNN's exp/log/tanh/erf are polynomial approximations, off by up to about
// 1e-6 absolutely near 0 (log(1) is -1.4e-6): hence the atol of comparisons
// with the CPU backend.
constexpr double kCpuAtol = 5e-6;

// Like check_close, and also equal non-finite values: NaN where the reference
// has NaN, the same infinity where it has one (a NaN difference would pass a
// plain tolerance check).
void check_matches(const std::vector<float>& got, const std::vector<float>& want,
                   const std::vector<float>& inputs, const std::string& what,
                   double rtol = 1e-5, double atol = 1e-6) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    bool ok;
    if (std::isnan(want[i]))
      ok = std::isnan(got[i]);
    else if (std::isinf(want[i]))
      ok = got[i] == want[i];
    else
      ok = std::isfinite(got[i]) &&
           std::abs(static_cast<double>(got[i]) - want[i]) <= atol + rtol * std::abs(static_cast<double>(want[i]));
    if (!ok) {
      FAIL_CHECK(what << " at x = " << inputs[i] << ": got " << got[i] << ", expected " << want[i]);
      return;
    }
  }
}

const std::vector<UnaryOp> kUnaryOps = {
    UnaryOp::neg,  UnaryOp::abs, UnaryOp::relu, UnaryOp::gelu_tanh, UnaryOp::gelu_erf,
    UnaryOp::tanh, UnaryOp::sigmoid, UnaryOp::exp, UnaryOp::log, UnaryOp::sqrt,
    UnaryOp::rsqrt, UnaryOp::square, UnaryOp::reciprocal};
const std::vector<BinaryOp> kBinaryOps = {BinaryOp::add, BinaryOp::sub, BinaryOp::mul,
                                          BinaryOp::div, BinaryOp::max, BinaryOp::min,
                                          BinaryOp::equal, BinaryOp::greater};

bool positive_domain(UnaryOp op) {
  return op == UnaryOp::log || op == UnaryOp::sqrt || op == UnaryOp::rsqrt;
}

// Inputs in each op's domain: around 0 and negative, and large magnitudes
// (exp overflowing to inf, sigmoid and tanh saturating).
std::vector<float> unary_inputs(UnaryOp op) {
  if (positive_domain(op))
    return {1e-30f, 1e-7f, 1e-3f, 0.3f, 1.0f, 1.5f, 5.0f, 20.0f, 100.0f, 1e6f, 1e30f};
  std::vector<float> v = {-100.0f, -50.0f, -20.0f, -5.0f, -1.5f, -1.0f, -0.3f, -1e-3f, -1e-7f,
                          1e-7f,   1e-3f,  0.3f,   1.0f,  1.5f,  5.0f,  20.0f, 50.0f, 100.0f};
  if (op != UnaryOp::reciprocal) v.push_back(0.0f);
  if (op == UnaryOp::exp) v.push_back(88.0f);  // near float's largest e^x
  return v;
}

std::vector<float> cpu_unary(UnaryOp op, const std::vector<float>& x) {
  Shape shape{static_cast<std::int64_t>(x.size())};
  Tensor y = Tensor::empty(shape, DType::f32);
  cpu().unary(op, Tensor::from_vector(x, shape), y);
  return y.to_vector<float>();
}

std::vector<float> cpu_unary_backward(UnaryOp op, const std::vector<float>& x,
                                      const std::vector<float>& dy) {
  Shape shape{static_cast<std::int64_t>(x.size())};
  Tensor dx = Tensor::empty(shape, DType::f32);
  cpu().unary_backward(op, Tensor::from_vector(x, shape), Tensor::from_vector(dy, shape), dx);
  return dx.to_vector<float>();
}

// dy values of both signs and magnitudes, one per input.
std::vector<float> upstream(std::size_t count) {
  std::vector<float> dy(count);
  for (std::size_t i = 0; i < count; ++i) dy[i] = (i % 2 == 0 ? 1.0f : -0.5f) * (1.0f + 0.25f * static_cast<float>(i % 5));
  return dy;
}

// out[i] for the output flat index i, by the NumPy rules written out: the
// output multi-index, right-aligned against the operand, coordinate 0 on its
// extent-1 axes.
std::int64_t reference_offset(const std::vector<std::int64_t>& operand,
                              const std::vector<std::int64_t>& out, std::int64_t out_index) {
  std::vector<std::int64_t> coord(out.size());
  for (std::size_t d = out.size(); d-- > 0;) {
    coord[d] = out_index % out[d];
    out_index /= out[d];
  }
  std::int64_t offset = 0;
  const std::size_t lead = out.size() - operand.size();
  for (std::size_t d = 0; d < operand.size(); ++d)
    offset = offset * operand[d] + (operand[d] == 1 ? 0 : coord[lead + d]);
  return offset;
}

std::int64_t numel(const std::vector<std::int64_t>& dims) {
  std::int64_t n = 1;
  for (auto d : dims) n *= d;
  return n;
}

void check_broadcast_index(const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b,
                           const std::vector<std::int64_t>& out) {
  const BroadcastIndex index = make_broadcast_index(a, b, out);
  CHECK(index.rank <= BroadcastIndex::kMaxDims);
  CHECK(index.narrow(numel(out)));
  for (std::int64_t i = 0; i < numel(out); ++i) {
    const BroadcastOffsets o = index(i), narrow = index.at(static_cast<std::uint32_t>(i));
    if (o.a != reference_offset(a, out, i) || o.b != reference_offset(b, out, i) || narrow.a != o.a ||
        narrow.b != o.b) {
      FAIL_CHECK("output element " << i << ": offsets (" << o.a << ", " << o.b << "), expected ("
                                   << reference_offset(a, out, i) << ", "
                                   << reference_offset(b, out, i) << ")");
      return;
    }
  }
}

// The grid-stride loop of the kernels run on the host: how often each element
// is visited (every one must be, exactly once).
std::vector<int> simulate_grid_stride(const LaunchConfig& cfg, std::int64_t count) {
  std::vector<int> visits(static_cast<std::size_t>(count), 0);
  const std::int64_t stride = static_cast<std::int64_t>(cfg.blocks) * cfg.threads;
  for (std::int64_t block = 0; block < cfg.blocks; ++block)
    for (std::int64_t thread = 0; thread < cfg.threads; ++thread)
      for (std::int64_t i = block * cfg.threads + thread; i < count; i += stride)
        ++visits[static_cast<std::size_t>(i)];
  return visits;
}

}  // namespace

// --- element functions against the CPU backend --------------------------------

TEST_CASE("cuda unary_forward matches the CPU backend for every op") {
  for (UnaryOp op : kUnaryOps) {
    CAPTURE(name(op));
    std::vector<float> x = unary_inputs(op), got;
    for (float v : x) got.push_back(unary_forward(op, v));
    check_matches(got, cpu_unary(op, x), x, std::string(name(op)), 1e-5, kCpuAtol);
  }
}

TEST_CASE("cuda unary_forward outside the domain gives the CPU backend's NaN and infinities") {
  // log(0) = -inf, log(-1), sqrt(-1) NaN, rsqrt(0) = inf, reciprocal(±0) = ±inf.
  const std::vector<float> x = {0.0f, -1.0f, -0.0f};
  for (UnaryOp op : {UnaryOp::log, UnaryOp::sqrt, UnaryOp::rsqrt}) {
    CAPTURE(name(op));
    std::vector<float> got;
    for (float v : x) got.push_back(unary_forward(op, v));
    check_matches(got, cpu_unary(op, x), x, std::string(name(op)));
  }
  CHECK(unary_forward(UnaryOp::reciprocal, 0.0f) == kInf);
  CHECK(unary_forward(UnaryOp::reciprocal, -0.0f) == -kInf);
}

TEST_CASE("cuda unary_backward matches the CPU backend for every op") {
  for (UnaryOp op : kUnaryOps) {
    CAPTURE(name(op));
    std::vector<float> x = unary_inputs(op), got;
    std::vector<float> dy = upstream(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) got.push_back(unary_backward(op, x[i], dy[i]));
    check_matches(got, cpu_unary_backward(op, x, dy), x, std::string(name(op)) + " backward",
                  1e-5, kCpuAtol);
  }
}

TEST_CASE("cuda unary_backward matches central finite differences of unary_forward") {
  // Away from kinks (0 for abs and relu) and inside each op's domain.
  const std::vector<float> general = {-2.5f, -1.2f, -0.4f, 0.35f, 0.9f, 1.7f, 2.8f};
  const std::vector<float> positive = {0.05f, 0.4f, 1.0f, 2.5f, 7.0f};
  for (UnaryOp op : kUnaryOps) {
    CAPTURE(name(op));
    for (float x : positive_domain(op) ? positive : general) {
      CAPTURE(x);
      const double h = 1e-3 * std::max(1.0, std::abs(static_cast<double>(x)));
      auto f = [&](double v) { return static_cast<double>(unary_forward(op, static_cast<float>(v))); };
      const double numeric = (f(x + h) - f(x - h)) / (2 * h);
      const double analytic = unary_backward(op, x, 1.0f);
      CHECK(analytic == doctest::Approx(numeric).epsilon(2e-3).scale(1.0));
      // Linear in dy.
      CHECK(unary_backward(op, x, -3.0f) == doctest::Approx(-3.0 * analytic).epsilon(1e-6));
    }
  }
}

TEST_CASE("cuda binary_apply matches the CPU backend for every op, NaN and infinities included") {
  const std::vector<float> a = {-3.0f, -1.0f, -0.0f, 0.0f, 0.5f, 2.0f, 2.0f, 1e30f, kInf, -kInf, kNaN, 1.0f, 7.0f};
  const std::vector<float> b = {2.0f, -1.0f, 0.0f, -0.0f, -4.0f, 2.0f, 0.0f, 1e30f, 1.0f, kInf, 1.0f, kNaN, -0.0f};
  const Shape shape{static_cast<std::int64_t>(a.size())};
  for (BinaryOp op : kBinaryOps) {
    CAPTURE(name(op));
    Tensor out = Tensor::empty(shape, DType::f32);
    cpu().binary(op, Tensor::from_vector(a, shape), Tensor::from_vector(b, shape), out);
    std::vector<float> got;
    for (std::size_t i = 0; i < a.size(); ++i) got.push_back(binary_apply(op, a[i], b[i]));
    check_matches(got, out.to_vector<float>(), a, std::string(name(op)), 0.0, 0.0);
  }
}

// --- broadcast index -------------------------------------------------------------

TEST_CASE("cuda broadcast index maps output elements to NumPy operand elements") {
  check_broadcast_index({2, 1, 3}, {4, 3}, {2, 4, 3});
  check_broadcast_index({4, 3}, {2, 1, 3}, {2, 4, 3});
  check_broadcast_index({}, {2, 3}, {2, 3});          // scalar a
  check_broadcast_index({2, 3}, {}, {2, 3});          // scalar b
  check_broadcast_index({}, {}, {});                  // both scalars
  check_broadcast_index({1}, {5}, {5});
  check_broadcast_index({5, 1}, {1, 4}, {5, 4});      // outer product
  check_broadcast_index({1, 4, 1}, {3, 1, 5}, {3, 4, 5});
  check_broadcast_index({2, 3, 4}, {2, 3, 4}, {2, 3, 4});
  check_broadcast_index({3, 1, 5, 1, 2, 1}, {1, 6, 1, 3, 1, 7}, {3, 6, 5, 3, 2, 7});  // 6 axes left
  check_broadcast_index({2, 1, 1, 3, 1, 1, 2, 2}, {1, 1, 4, 3, 1, 1, 2, 2}, {2, 1, 4, 3, 1, 1, 2, 2});
}

TEST_CASE("cuda broadcast index merges contiguous axes and drops extent-1 axes") {
  CHECK(make_broadcast_index({2, 3, 4, 5, 6, 7, 8, 9}, {2, 3, 4, 5, 6, 7, 8, 9},
                             {2, 3, 4, 5, 6, 7, 8, 9}).rank == 1);
  CHECK(make_broadcast_index({}, {}, {}).rank == 0);
  CHECK(make_broadcast_index({1, 1}, {}, {1, 1}).rank == 0);
  CHECK(make_broadcast_index({2, 3, 4}, {}, {2, 3, 4}).rank == 1);
  const BroadcastIndex index = make_broadcast_index({2, 1, 3}, {4, 3}, {2, 4, 3});
  REQUIRE(index.rank == 3);
  CHECK(index.a_stride[0] == 3);
  CHECK(index.a_stride[1] == 0);
  CHECK(index.a_stride[2] == 1);
  CHECK(index.b_stride[0] == 0);
  CHECK(index.b_stride[1] == 3);
  CHECK(index.b_stride[2] == 1);
}

TEST_CASE("cuda broadcast index takes 32-bit arithmetic only where every offset fits") {
  const std::int64_t big = std::int64_t{1} << 31;
  CHECK(make_broadcast_index({big}, {1}, {big}).narrow(big));
  CHECK(make_broadcast_index({2, big - 1}, {big - 1}, {2, big - 1}).narrow(2 * (big - 1)));
  // 2^32 elements: one merged axis of extent 2^32 would be a 32-bit divisor of 0.
  CHECK_FALSE(make_broadcast_index({2 * big}, {1}, {2 * big}).narrow(2 * big));
  CHECK_FALSE(make_broadcast_index({2, big}, {big}, {2, big}).narrow(2 * big));
  CHECK_FALSE(make_broadcast_index({4, big}, {1}, {4, big}).narrow(4 * big));
}

TEST_CASE("cuda broadcast index with more than 6 unmergeable axes is an UnsupportedError") {
  CHECK_THROWS_AS(make_broadcast_index({3, 1, 5, 1, 2, 1, 4}, {1, 6, 1, 3, 1, 7, 1},
                                       {3, 6, 5, 3, 2, 7, 4}),
                  UnsupportedError);
}

TEST_CASE("cuda broadcast index with binary_apply matches the CPU backend's broadcasting") {
  const std::vector<std::vector<std::int64_t>> shapes[] = {
      {{2, 1, 3}, {4, 3}, {2, 4, 3}}, {{}, {2, 3}, {2, 3}}, {{3, 1}, {}, {3, 1}}, {{1, 4, 1}, {3, 1, 5}, {3, 4, 5}}};
  for (const auto& s : shapes) {
    Tensor a = random_tensor(Shape(s[0]), 11, -2.0f, 2.0f), b = random_tensor(Shape(s[1]), 12, 0.5f, 2.0f);
    const BroadcastIndex index = make_broadcast_index(s[0], s[1], s[2]);
    const std::vector<float> va = a.to_vector<float>(), vb = b.to_vector<float>();
    for (BinaryOp op : kBinaryOps) {
      CAPTURE(name(op));
      Tensor out = Tensor::empty(Shape(s[2]), DType::f32);
      cpu().binary(op, a, b, out);
      std::vector<float> got;
      for (std::int64_t i = 0; i < out.numel(); ++i) {
        const BroadcastOffsets o = index(i);
        got.push_back(binary_apply(op, va[static_cast<std::size_t>(o.a)], vb[static_cast<std::size_t>(o.b)]));
      }
      check_matches(got, out.to_vector<float>(), got, std::string(name(op)), 0.0, 0.0);
    }
  }
}

// --- launch configurations ------------------------------------------------------

TEST_CASE("launch config of 0 elements launches nothing") {
  CHECK(launch_config(0).blocks == 0);
  CHECK(launch_config(-1).blocks == 0);
}

TEST_CASE("launch config grid-stride loop covers every element exactly once") {
  for (std::int64_t count : {1, 7, 255, 256, 257, 65537}) {
    CAPTURE(count);
    const LaunchConfig cfg = launch_config(count);
    CHECK(cfg.threads == 256);
    CHECK(cfg.blocks == (count + 255) / 256);  // one thread per element below the cap
    const std::vector<int> visits = simulate_grid_stride(cfg, count);
    CHECK(std::count(visits.begin(), visits.end(), 1) == count);
  }
}

TEST_CASE("launch config past the block cap loops with the grid stride") {
  for (std::int64_t count : {7, 257, 65537}) {
    CAPTURE(count);
    const LaunchConfig cfg = launch_config(count, 3);
    CHECK(cfg.blocks == std::min<std::int64_t>(3, (count + 255) / 256));
    const std::vector<int> visits = simulate_grid_stride(cfg, count);
    CHECK(std::count(visits.begin(), visits.end(), 1) == count);
  }
}

TEST_CASE("launch config of 2^31 + 3 elements: capped grid, 64-bit indices cover all") {
  const std::int64_t count = (std::int64_t{1} << 31) + 3;
  const LaunchConfig cfg = launch_config(count);
  CHECK(cfg.blocks == kLaunchMaxBlocks);
  CHECK(cfg.threads == 256);
  const std::int64_t stride = static_cast<std::int64_t>(cfg.blocks) * cfg.threads;
  // Thread t handles t, t + stride, ...: the threads' first indices are
  // 0 .. stride - 1 (each below INT_MAX, as the kernel computes them), so
  // together they cover [0, stride * ceil(count / stride)) ⊇ [0, count).
  CHECK(stride - 1 <= INT_MAX);
  const std::int64_t rounds = (count + stride - 1) / stride;
  CHECK(rounds * stride >= count);
  CHECK((rounds - 1) * stride < count);  // the last round is needed: no idle round
  // The last element is visited by exactly one (block, thread, round).
  const std::int64_t last = count - 1;
  CHECK(last / stride == rounds - 1);
  // Without a cap the block count still fits an int (gridDim.x allows 2^31 - 1).
  const LaunchConfig uncapped = launch_config(count, INT_MAX);
  CHECK(uncapped.blocks == (count + 255) / 256);
  CHECK(static_cast<std::int64_t>(uncapped.blocks) * uncapped.threads >= count);
}

// for_each_quad (launch.hpp) on the host: thread t of the grid takes quads t,
// t + stride, ... and then element 4 * (count / 4) + t if there is one.
std::vector<int> simulate_quads(const LaunchConfig& cfg, std::int64_t count) {
  std::vector<int> visits(static_cast<std::size_t>(count), 0);
  const std::int64_t stride = static_cast<std::int64_t>(cfg.blocks) * cfg.threads, quads = count / 4;
  for (std::int64_t t = 0; t < stride; ++t) {
    for (std::int64_t q = t; q < quads; q += stride)
      for (std::int64_t k = 0; k < 4; ++k) ++visits[static_cast<std::size_t>(4 * q + k)];
    if (quads * 4 + t < count) ++visits[static_cast<std::size_t>(quads * 4 + t)];
  }
  return visits;
}

TEST_CASE("quad launches cover the whole quads and the tail once, from aligned pointers only") {
  for (std::int64_t count : {1, 3, 4, 7, 1024, 1027, 65537}) {
    CAPTURE(count);
    const LaunchConfig cfg = quad_launch_config(count);
    CHECK(cfg.blocks == (count + 1023) / 1024);  // a thread for every quad and part quad
    const std::vector<int> visits = simulate_quads(cfg, count);
    CHECK(std::count(visits.begin(), visits.end(), 1) == count);
  }
  CHECK(quad_launch_config(0).blocks == 0);
  alignas(16) float buffer[8] = {};
  CHECK(aligned_for_quads(buffer, buffer + 4, static_cast<const float*>(nullptr)));
  CHECK_FALSE(aligned_for_quads(buffer, buffer + 1));
  CHECK_FALSE(aligned_for_quads(buffer + 2));
}

// --- the kernels on a GPU --------------------------------------------------------

#if TESSERA_HAVE_CUDA

namespace {


const std::int64_t kOddSizes[] = {1, 7, 65537};

}  // namespace

TEST_CASE("cuda backend supports f32 unary and binary ops, not bf16 yet" * doctest::test_suite("gpu") *
          skip_without_gpu()) {
  for (OpKind k : {OpKind::unary, OpKind::unary_grad, OpKind::binary}) {
    CHECK(gpu().supports(k, DType::f32));
    CHECK_FALSE(gpu().supports(k, DType::bf16));
  }
  Tensor x = Tensor::empty({4}, DType::bf16, Device::cuda(0));
  CHECK_THROWS_AS(gpu().unary(UnaryOp::relu, x, x), UnsupportedError);
  CHECK_THROWS_AS(gpu().binary(BinaryOp::add, x, x, x), UnsupportedError);
}

TEST_CASE("cuda unary kernels match the CPU backend for 1, 7 and 65537 elements" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  for (std::int64_t n : kOddSizes) {
    for (UnaryOp op : kUnaryOps) {
      CAPTURE(n);
      CAPTURE(name(op));
      const bool positive = positive_domain(op);
      Tensor x = random_tensor(Shape{n}, 21, positive ? 0.01f : -6.0f, positive ? 10.0f : 6.0f);
      Tensor dy = random_tensor(Shape{n}, 22);
      Tensor y = Tensor::empty(x.shape(), DType::f32), dx = Tensor::empty(x.shape(), DType::f32);
      cpu().unary(op, x, y);
      cpu().unary_backward(op, x, dy, dx);
      Tensor gx = to_gpu(x), gdy = to_gpu(dy);
      Tensor gy = Tensor::empty(x.shape(), DType::f32, Device::cuda(0));
      Tensor gdx = Tensor::empty(x.shape(), DType::f32, Device::cuda(0));
      gpu().unary(op, gx, gy);
      gpu().unary_backward(op, gx, gdy, gdx);
      const std::vector<float> xs = x.to_vector<float>();
      check_matches(to_host(gy).to_vector<float>(), y.to_vector<float>(), xs, "forward", 2e-5, kCpuAtol);
      check_matches(to_host(gdx).to_vector<float>(), dx.to_vector<float>(), xs, "backward", 2e-5, kCpuAtol);
    }
  }
}

// A bf16 y (mixed precision's cast fused into the op): within one bf16
// rounding of the CPU's, whose f32 result differs from the GPU's by float noise.
TEST_CASE("cuda unary kernels into a bf16 y match the CPU's for 1, 7 and 65537 elements" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  const auto widened = [](const Tensor& t) {
    Tensor f = Tensor::empty(t.shape(), DType::f32);
    cpu().cast(t, f);
    return f.to_vector<float>();
  };
  for (std::int64_t n : kOddSizes)
    for (UnaryOp op : {UnaryOp::gelu_erf, UnaryOp::gelu_tanh, UnaryOp::relu, UnaryOp::tanh}) {
      CAPTURE(n);
      CAPTURE(name(op));
      const Tensor x = random_tensor(Shape{n}, 25, -6.0f, 6.0f);
      Tensor y = Tensor::empty(x.shape(), DType::bf16);
      cpu().unary(op, x, y);
      Tensor gy = Tensor::empty(x.shape(), DType::bf16, Device::cuda(0));
      gpu().unary(op, to_gpu(x), gy);
      check_close(widened(to_host(gy)), widened(y), 1.0 / 128, kCpuAtol);
    }
}

// Views that start one float into their buffers: the kernels' element loops
// (the four-a-thread ones need 16-byte aligned pointers).
TEST_CASE("cuda unary and binary kernels on views that are not 16-byte aligned match the CPU backend" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  const std::int64_t n = 65537;
  Tensor x = random_tensor(Shape{n}, 23, -6.0f, 6.0f), dy = random_tensor(Shape{n}, 24);
  Tensor gx = to_gpu(x), gdy = to_gpu(dy);
  Tensor gy = Tensor::empty(x.shape(), DType::f32, Device::cuda(0));
  const Tensor xv = x.rows(1, n - 1), dyv = dy.rows(1, n - 1);
  const Tensor gxv = gx.rows(1, n - 1), gdyv = gdy.rows(1, n - 1), gyv = gy.rows(1, n - 1);
  Tensor y = Tensor::empty(xv.shape(), DType::f32);
  cpu().unary(UnaryOp::gelu_erf, xv, y);
  gpu().unary(UnaryOp::gelu_erf, gxv, gyv);
  check_matches(to_host(gyv).to_vector<float>(), y.to_vector<float>(), xv.to_vector<float>(), "forward", 2e-5,
                kCpuAtol);
  cpu().unary_backward(UnaryOp::gelu_erf, xv, dyv, y);
  gpu().unary_backward(UnaryOp::gelu_erf, gxv, gdyv, gyv);
  check_matches(to_host(gyv).to_vector<float>(), y.to_vector<float>(), xv.to_vector<float>(), "backward", 2e-5,
                kCpuAtol);
  cpu().binary(BinaryOp::add, xv, dyv, y);
  gpu().binary(BinaryOp::add, gxv, gdyv, gyv);
  const std::vector<float> got = to_host(gyv).to_vector<float>();
  check_matches(got, y.to_vector<float>(), got, "add", 0.0, 0.0);
}

TEST_CASE("cuda binary kernels match the CPU backend for 1, 7 and 65537 elements, broadcast too" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  for (std::int64_t n : kOddSizes) {
    const Shape cases[][2] = {{Shape{n}, Shape{n}}, {Shape{n}, Shape{}}, {Shape{}, Shape{n}},
                              {Shape{2, 1, n}, Shape{4, n}}, {Shape{n, 1}, Shape{1, 3}}};
    for (const auto& c : cases) {
      Tensor a = random_tensor(c[0], 31, -2.0f, 2.0f), b = random_tensor(c[1], 32, 0.5f, 2.0f);
      Tensor ga = to_gpu(a), gb = to_gpu(b);
      for (BinaryOp op : kBinaryOps) {
        CAPTURE(n);
        CAPTURE(name(op));
        Shape out_shape = binary_output_shape(a.shape(), b.shape(), "test");
        Tensor out = Tensor::empty(out_shape, DType::f32);
        Tensor gout = Tensor::empty(out_shape, DType::f32, Device::cuda(0));
        cpu().binary(op, a, b, out);
        gpu().binary(op, ga, gb, gout);
        const std::vector<float> got = to_host(gout).to_vector<float>();
        check_matches(got, out.to_vector<float>(), got, std::string(name(op)), 0.0, 0.0);
      }
    }
  }
}

#endif  // TESSERA_HAVE_CUDA
