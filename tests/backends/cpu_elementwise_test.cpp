// The CPU backend's elementwise and layout kernels (unary and its backward,
// broadcasting binary ops, reductions, broadcast, transpose, cast, fill, copy)
// against plain reference loops written here, computing in double where the
// kernel computes in float.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/registry.hpp"
#include "tests/test_util.hpp"

using namespace tessera;
using namespace tessera::test;

namespace {

Backend& cpu() { return backend_for(Device::cpu(0)); }

constexpr UnaryOp kUnaryOps[] = {UnaryOp::neg,  UnaryOp::abs,     UnaryOp::relu,
                                 UnaryOp::gelu_tanh, UnaryOp::gelu_erf, UnaryOp::tanh,
                                 UnaryOp::sigmoid, UnaryOp::exp,  UnaryOp::log,
                                 UnaryOp::sqrt, UnaryOp::rsqrt,   UnaryOp::square,
                                 UnaryOp::reciprocal};
static_assert(std::size(kUnaryOps) == kUnaryOpCount, "test every UnaryOp");

constexpr BinaryOp kBinaryOps[] = {BinaryOp::add, BinaryOp::sub, BinaryOp::mul,
                                   BinaryOp::div, BinaryOp::max, BinaryOp::min, BinaryOp::equal,
                                   BinaryOp::greater};
static_assert(std::size(kBinaryOps) == kBinaryOpCount, "test every BinaryOp");

const double kSqrt2OverPi = std::sqrt(2.0 / 3.14159265358979323846);

double unary_ref(UnaryOp op, double x) {
  switch (op) {
    case UnaryOp::neg: return -x;
    case UnaryOp::abs: return std::fabs(x);
    case UnaryOp::relu: return x > 0 ? x : 0.0;
    case UnaryOp::gelu_tanh:
      return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
    case UnaryOp::gelu_erf: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case UnaryOp::tanh: return std::tanh(x);
    case UnaryOp::sigmoid: return 1.0 / (1.0 + std::exp(-x));
    case UnaryOp::exp: return std::exp(x);
    case UnaryOp::log: return std::log(x);
    case UnaryOp::sqrt: return std::sqrt(x);
    case UnaryOp::rsqrt: return 1.0 / std::sqrt(x);
    case UnaryOp::square: return x * x;
    case UnaryOp::reciprocal: return 1.0 / x;
  }
  return 0;
}

// f'(x), by hand.
double unary_derivative(UnaryOp op, double x) {
  switch (op) {
    case UnaryOp::neg: return -1.0;
    case UnaryOp::abs: return x > 0 ? 1.0 : -1.0;
    case UnaryOp::relu: return x > 0 ? 1.0 : 0.0;
    case UnaryOp::gelu_tanh: {
      double t = std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x));
      return 0.5 * (1.0 + t) +
             0.5 * x * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * 0.044715 * x * x);
    }
    case UnaryOp::gelu_erf:
      return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) +
             x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * 3.14159265358979323846);
    case UnaryOp::tanh: {
      double t = std::tanh(x);
      return 1.0 - t * t;
    }
    case UnaryOp::sigmoid: {
      double s = 1.0 / (1.0 + std::exp(-x));
      return s * (1.0 - s);
    }
    case UnaryOp::exp: return std::exp(x);
    case UnaryOp::log: return 1.0 / x;
    case UnaryOp::sqrt: return 0.5 / std::sqrt(x);
    case UnaryOp::rsqrt: return -0.5 / (x * std::sqrt(x));
    case UnaryOp::square: return 2.0 * x;
    case UnaryOp::reciprocal: return -1.0 / (x * x);
  }
  return 0;
}

// Inputs inside each op's domain: positive for log/sqrt/rsqrt, away from 0
// (either sign) for reciprocal, [-3, 3) otherwise. Values near 0 are nudged off
// it so abs' and relu' are not asked at their kink.
Tensor unary_input(UnaryOp op, const Shape& shape, unsigned seed) {
  bool positive = op == UnaryOp::log || op == UnaryOp::sqrt || op == UnaryOp::rsqrt;
  Tensor x = positive ? random_tensor(shape, seed, 0.05f, 4.0f) : random_tensor(shape, seed, -3.0f, 3.0f);
  float* p = x.data<float>();
  for (std::int64_t i = 0; i < x.numel(); ++i)
    if (std::fabs(p[i]) < 0.1f) p[i] = p[i] < 0 ? -0.1f : 0.1f;
  return x;
}

// Index into `operand` of element `flat` of `out`, under NumPy broadcasting
// (operand axes align right; an extent-1 axis repeats).
std::int64_t broadcast_source(const Shape& operand, const Shape& out, std::int64_t flat) {
  std::vector<std::int64_t> index(static_cast<std::size_t>(out.rank()));
  for (int axis = out.rank() - 1; axis >= 0; --axis) {
    index[static_cast<std::size_t>(axis)] = flat % out[axis];
    flat /= out[axis];
  }
  std::int64_t source = 0;
  int shift = out.rank() - operand.rank();
  for (int axis = 0; axis < operand.rank(); ++axis) {
    std::int64_t i = operand[axis] == 1 ? 0 : index[static_cast<std::size_t>(axis + shift)];
    source = source * operand[axis] + i;
  }
  return source;
}

float binary_ref(BinaryOp op, float a, float b) {
  switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::sub: return a - b;
    case BinaryOp::mul: return a * b;
    case BinaryOp::div: return a / b;
    case BinaryOp::max: return a > b ? a : b;
    case BinaryOp::min: return a < b ? a : b;
    case BinaryOp::equal: return a == b ? 1.0 : 0.0;
    case BinaryOp::greater: return a > b ? 1.0 : 0.0;
  }
  return 0;
}

// Divisors and second operands: magnitude in [0.5, 2), alternating sign.
Tensor second_operand(const Shape& shape, unsigned seed) {
  Tensor b = random_tensor(shape, seed, 0.5f, 2.0f);
  float* p = b.data<float>();
  for (std::int64_t i = 0; i < b.numel(); i += 2) p[i] = -p[i];
  return b;
}

std::vector<float> as_f32(const std::vector<bf16>& v) {
  std::vector<float> out;
  for (bf16 x : v) out.push_back(to_f32(x));
  return out;
}

Tensor to_bf16_tensor(const Tensor& f32) {
  std::vector<bf16> v;
  for (float x : f32.to_vector<float>()) v.push_back(to_bf16(x));
  return Tensor::from_vector(v, f32.shape());
}

// `v` rounded to `bits` significant bits, nearest with ties to even (the
// default floating-point environment), in long double so that every i64 is
// exact. Independent of the engine's to_bf16.
static_assert(std::numeric_limits<long double>::digits >= 64, "the reference needs exact i64");
long double round_to_bits(long double v, int bits) {
  if (v == 0) return v;
  int e = 0;
  long double m = std::frexp(v, &e);  // v = m * 2^e, |m| in [0.5, 1)
  return std::ldexp(std::nearbyint(std::ldexp(m, bits)), e - bits);
}

std::uint16_t bf16_bits_of(long double v) {
  float f = static_cast<float>(round_to_bits(v, 8));  // exact: 8 bits fit a float
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  REQUIRE((u & 0xffffu) == 0u);
  return static_cast<std::uint16_t>(u >> 16);
}

float f32_from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Permutes row-major x of `shape` so out.shape[i] = shape[perm[i]].
template <typename T>
std::vector<T> transpose_ref(const std::vector<T>& x, const Shape& shape, const std::vector<int>& perm) {
  int rank = shape.rank();
  std::vector<std::int64_t> out_dims(static_cast<std::size_t>(rank));
  for (int i = 0; i < rank; ++i) out_dims[static_cast<std::size_t>(i)] = shape[perm[static_cast<std::size_t>(i)]];
  std::vector<std::int64_t> x_strides(static_cast<std::size_t>(rank), 1);
  for (int i = rank - 2; i >= 0; --i) x_strides[static_cast<std::size_t>(i)] = x_strides[static_cast<std::size_t>(i) + 1] * shape[i + 1];
  std::vector<T> out(x.size());
  for (std::size_t flat = 0; flat < x.size(); ++flat) {
    std::int64_t rest = static_cast<std::int64_t>(flat), source = 0;
    for (int i = rank - 1; i >= 0; --i) {
      std::int64_t index = rest % out_dims[static_cast<std::size_t>(i)];
      rest /= out_dims[static_cast<std::size_t>(i)];
      source += index * x_strides[static_cast<std::size_t>(perm[static_cast<std::size_t>(i)])];
    }
    out[flat] = x[static_cast<std::size_t>(source)];
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------- unary ----

TEST_CASE("unary: every op against its formula") {
  const Shape shape{13, 77};  // 1001 elements: vector body and tail
  for (UnaryOp op : kUnaryOps) {
    CAPTURE(name(op));
    Tensor x = unary_input(op, shape, 11);
    if (op == UnaryOp::reciprocal) {  // away from zero, both signs
      float* p = x.data<float>();
      for (std::int64_t i = 0; i < x.numel(); ++i) p[i] = p[i] < 0 ? p[i] - 0.2f : p[i] + 0.2f;
    }
    Tensor y = Tensor::empty(shape, DType::f32);
    cpu().unary(op, x, y);
    std::vector<float> expected;
    for (float v : x.to_vector<float>()) expected.push_back(static_cast<float>(unary_ref(op, v)));
    // oneDNN's JIT log is a polynomial with an absolute error up to ~4e-6 (relative
    // error is unbounded near x = 1, where log crosses 0); the others are within
    // a few float ulps of the exact value.
    check_close(y, expected, 2e-5, op == UnaryOp::log ? 1e-5 : 2e-6);
  }
}

TEST_CASE("unary: exact cases of neg, abs, relu and square") {
  Tensor x = Tensor::from_vector<float>({-2.5f, -0.0f, 0.0f, 1.5f, 3.0f, -7.0f}, {6});
  Tensor y = Tensor::empty({6}, DType::f32);
  cpu().unary(UnaryOp::neg, x, y);
  check_close(y, {2.5f, 0.0f, -0.0f, -1.5f, -3.0f, 7.0f}, 0, 0);
  cpu().unary(UnaryOp::abs, x, y);
  check_close(y, {2.5f, 0.0f, 0.0f, 1.5f, 3.0f, 7.0f}, 0, 0);
  cpu().unary(UnaryOp::relu, x, y);
  check_close(y, {0.0f, 0.0f, 0.0f, 1.5f, 3.0f, 0.0f}, 0, 0);
  cpu().unary(UnaryOp::square, x, y);
  check_close(y, {6.25f, 0.0f, 0.0f, 2.25f, 9.0f, 49.0f}, 0, 0);
}

TEST_CASE("unary_backward: dx = dy * f'(x) for every op") {
  const Shape shape{7, 131};
  for (UnaryOp op : kUnaryOps) {
    CAPTURE(name(op));
    Tensor x = unary_input(op, shape, 21);
    if (op == UnaryOp::reciprocal) {
      float* p = x.data<float>();
      for (std::int64_t i = 0; i < x.numel(); ++i) p[i] = p[i] < 0 ? p[i] - 0.2f : p[i] + 0.2f;
    }
    Tensor dy = random_tensor(shape, 22);
    Tensor dx = Tensor::empty(shape, DType::f32);
    cpu().unary_backward(op, x, dy, dx);
    auto xv = x.to_vector<float>(), dyv = dy.to_vector<float>();
    std::vector<float> expected;
    for (std::size_t i = 0; i < xv.size(); ++i)
      expected.push_back(static_cast<float>(dyv[i] * unary_derivative(op, xv[i])));
    check_close(dx, expected, 5e-5, 5e-6);
  }
}

// --------------------------------------------------------------- binary ----

namespace {

struct BroadcastCase {
  Shape a, b, out;
};

const std::vector<BroadcastCase>& broadcast_cases() {
  static const std::vector<BroadcastCase> cases = {
      {{3, 1, 4}, {5, 1}, {3, 5, 4}},
      {{4}, {2, 3, 4}, {2, 3, 4}},
      {{2, 3}, {}, {2, 3}},          // scalar b
      {{}, {3, 2}, {3, 2}},          // scalar a
      {{2, 3}, {2, 3}, {2, 3}},      // identical shapes
      {{1, 4}, {3, 1}, {3, 4}},      // both operands broadcast
      {{80, 1, 33}, {7, 33}, {80, 7, 33}},  // enough rows to run on several threads
      {{}, {}, {}},
  };
  return cases;
}

}  // namespace

TEST_CASE("binary: every op with NumPy broadcasting, f32") {
  for (const auto& c : broadcast_cases()) {
    CAPTURE(c.a.str());
    CAPTURE(c.b.str());
    Tensor a = random_tensor(c.a, 31, -2.0f, 2.0f);
    Tensor b = second_operand(c.b, 32);
    auto av = a.to_vector<float>(), bv = b.to_vector<float>();
    for (BinaryOp op : kBinaryOps) {
      CAPTURE(name(op));
      Tensor out = Tensor::empty(c.out, DType::f32);
      cpu().binary(op, a, b, out);
      REQUIRE(out.shape() == binary_output_shape(c.a, c.b, "test"));
      std::vector<float> expected(static_cast<std::size_t>(c.out.numel()));
      for (std::int64_t i = 0; i < c.out.numel(); ++i)
        expected[static_cast<std::size_t>(i)] =
            binary_ref(op, av[static_cast<std::size_t>(broadcast_source(c.a, c.out, i))],
                       bv[static_cast<std::size_t>(broadcast_source(c.b, c.out, i))]);
      check_close(out, expected, 0, 0);  // one IEEE operation: exact
    }
  }
}

TEST_CASE("binary: every op on bf16 operands") {
  for (const auto& c : broadcast_cases()) {
    CAPTURE(c.a.str());
    CAPTURE(c.b.str());
    Tensor a = to_bf16_tensor(random_tensor(c.a, 41, -2.0f, 2.0f));
    Tensor b = to_bf16_tensor(second_operand(c.b, 42));
    auto av = as_f32(a.to_vector<bf16>()), bv = as_f32(b.to_vector<bf16>());
    for (BinaryOp op : kBinaryOps) {
      CAPTURE(name(op));
      Tensor out = Tensor::empty(c.out, DType::bf16);
      cpu().binary(op, a, b, out);
      std::vector<float> expected(static_cast<std::size_t>(c.out.numel()));
      for (std::int64_t i = 0; i < c.out.numel(); ++i) {
        float r = binary_ref(op, av[static_cast<std::size_t>(broadcast_source(c.a, c.out, i))],
                             bv[static_cast<std::size_t>(broadcast_source(c.b, c.out, i))]);
        expected[static_cast<std::size_t>(i)] = to_f32(to_bf16(r));
      }
      // Computed in f32 and rounded once: within one bf16 step (2^-8 relative).
      check_close(as_f32(out.to_vector<bf16>()), expected, 1.0 / 256, 0);
    }
  }
}

// --------------------------------------------------------------- reduce ----

namespace {

// Reduction of x into `out_shape` (keepdims: reduced axes have extent 1).
std::vector<float> reduce_ref(ReduceOp op, const Tensor& x, const Shape& out_shape) {
  auto xv = x.to_vector<float>();
  auto n = static_cast<std::size_t>(out_shape.numel());
  std::vector<double> acc(n, op == ReduceOp::max ? -std::numeric_limits<double>::infinity() : 0.0);
  std::vector<std::int64_t> count(n, 0);
  // Each element of x lands in the out element that broadcasts onto it.
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    auto o = static_cast<std::size_t>(broadcast_source(out_shape, x.shape(), i));
    double v = xv[static_cast<std::size_t>(i)];
    acc[o] = op == ReduceOp::max ? std::max(acc[o], v) : acc[o] + v;
    ++count[o];
  }
  std::vector<float> out(n);
  for (std::size_t o = 0; o < n; ++o)
    out[o] = static_cast<float>(op == ReduceOp::mean ? acc[o] / static_cast<double>(count[o]) : acc[o]);
  return out;
}

}  // namespace

TEST_CASE("reduce: sum, mean and max over single and multiple axes") {
  Tensor x = random_tensor({3, 4, 5}, 51);
  const std::vector<std::pair<std::vector<int>, Shape>> cases = {
      {{0, 2}, {1, 4, 1}}, {{2}, {3, 4, 1}}, {{-1}, {3, 4, 1}}, {{0}, {1, 4, 5}},
      {{1}, {3, 1, 5}},    {{0, 1}, {1, 1, 5}}, {{0, 1, 2}, {1, 1, 1}}, {{}, {3, 4, 5}},
  };
  for (const auto& c : cases) {
    const std::vector<int>& axes = c.first;
    const Shape& shape = c.second;
    CAPTURE(shape.str());
    REQUIRE(reduce_output_shape(x.shape(), axes, "test") == shape);
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max}) {
      CAPTURE(name(op));
      Tensor out = Tensor::empty(shape, DType::f32);
      cpu().reduce(op, x, out);
      check_close(out, reduce_ref(op, x, shape), 1e-5, 1e-6);
    }
  }
}

TEST_CASE("reduce: a larger tensor over its leading and trailing axes") {
  Tensor x = random_tensor({64, 33, 17}, 52, -4.0f, 4.0f);
  for (const Shape& shape : {Shape{1, 33, 17}, Shape{64, 33, 1}, Shape{1, 33, 1}, Shape{64, 1, 17}})
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max}) {
      CAPTURE(shape.str());
      CAPTURE(name(op));
      Tensor out = Tensor::empty(shape, DType::f32);
      cpu().reduce(op, x, out);
      check_close(out, reduce_ref(op, x, shape), 1e-5, 1e-5);
    }
}

TEST_CASE("reduce: a bias gradient's few columns over many rows, at 1, 2 and 3 threads") {
  // [N*H*W, C] to [1, C]: the rows split over the threads (partial rows, then
  // their sum), per outer index; one thread count gives the same bits every time.
  auto& backend = dynamic_cast<CpuBackend&>(cpu());
  const int saved = backend.threads();
  const std::vector<std::pair<Shape, Shape>> cases = {{{4099, 2, 16}, {1, 2, 16}}, {{2, 4099, 16}, {2, 1, 16}}};
  for (const auto& c : cases) {
    const Shape& shape = c.second;
    const Tensor x = random_tensor(c.first, 53, -4.0f, 4.0f);
    for (int threads : {1, 2, 3})
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max}) {
        CAPTURE(shape.str());
        CAPTURE(threads);
        CAPTURE(name(op));
        backend.set_threads(threads);
        Tensor out = Tensor::empty(shape, DType::f32), again = Tensor::empty(shape, DType::f32);
        cpu().reduce(op, x, out);
        cpu().reduce(op, x, again);
        backend.set_threads(saved);
        check_close(out, reduce_ref(op, x, shape), 1e-5, 1e-4);
        CHECK(out.to_vector<float>() == again.to_vector<float>());
      }
  }
}

// ------------------------------------------------ broadcast and transpose ----

TEST_CASE("broadcast_to repeats extent-1 and missing leading axes") {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 1}, {2, 3, 4}}, {{}, {2, 2}}, {{4}, {3, 4}}, {{1, 4, 1}, {2, 4, 3}},
      {{2, 3}, {2, 3}},    {{5, 1, 1}, {5, 70, 3}},
  };
  for (const auto& c : cases) {
    const Shape &from = c.first, &to = c.second;
    CAPTURE(from.str());
    CAPTURE(to.str());
    Tensor x = random_tensor(from, 61);
    Tensor out = Tensor::empty(to, DType::f32);
    cpu().broadcast_to(x, out);
    auto xv = x.to_vector<float>();
    std::vector<float> expected;
    for (std::int64_t i = 0; i < to.numel(); ++i)
      expected.push_back(xv[static_cast<std::size_t>(broadcast_source(from, to, i))]);
    check_close(out, expected, 0, 0);
  }
  SUBCASE("i64 and bf16 elements") {
    Tensor ids = Tensor::from_vector<std::int64_t>({1, -2, (std::int64_t{1} << 40) + 3}, {3, 1});
    Tensor wide = Tensor::empty({2, 3, 2}, DType::i64);
    cpu().broadcast_to(ids, wide);
    CHECK(wide.to_vector<std::int64_t>() ==
          std::vector<std::int64_t>{1, 1, -2, -2, (std::int64_t{1} << 40) + 3, (std::int64_t{1} << 40) + 3,
                                    1, 1, -2, -2, (std::int64_t{1} << 40) + 3, (std::int64_t{1} << 40) + 3});
    Tensor h = to_bf16_tensor(random_tensor({4}, 62));
    Tensor hout = Tensor::empty({3, 4}, DType::bf16);
    cpu().broadcast_to(h, hout);
    auto hv = bf16_bits(h), ov = bf16_bits(hout);
    for (std::size_t i = 0; i < ov.size(); ++i) CHECK(ov[i] == hv[i % 4]);
  }
}

TEST_CASE("transpose permutes axes for f32, i64 and bf16") {
  SUBCASE("rank 2") {
    Tensor x = random_tensor({5, 7}, 71);
    Tensor out = Tensor::empty({7, 5}, DType::f32);
    cpu().transpose(x, out, {1, 0});
    check_close(out, transpose_ref(x.to_vector<float>(), x.shape(), {1, 0}), 0, 0);
  }
  SUBCASE("rank 4, f32") {
    for (const std::vector<int>& perm : {std::vector<int>{0, 2, 1, 3}, std::vector<int>{3, 1, 0, 2},
                                         std::vector<int>{0, 1, 2, 3}}) {
      Tensor x = random_tensor({2, 3, 4, 5}, 72);
      Tensor out = Tensor::empty(transpose_output_shape(x.shape(), perm), DType::f32);
      cpu().transpose(x, out, perm);
      check_close(out, transpose_ref(x.to_vector<float>(), x.shape(), perm), 0, 0);
    }
  }
  SUBCASE("rank 4, i64") {
    const Shape shape{2, 3, 4, 5};
    std::vector<std::int64_t> v;
    for (std::int64_t i = 0; i < shape.numel(); ++i) v.push_back((i << 33) - 7 * i);
    Tensor x = Tensor::from_vector(v, shape);
    Tensor out = Tensor::empty({2, 4, 3, 5}, DType::i64);
    cpu().transpose(x, out, {0, 2, 1, 3});
    CHECK(out.to_vector<std::int64_t>() == transpose_ref(v, shape, {0, 2, 1, 3}));
  }
  SUBCASE("rank 4, bf16") {
    Tensor x = to_bf16_tensor(random_tensor({3, 2, 5, 4}, 73));
    Tensor out = Tensor::empty({3, 5, 2, 4}, DType::bf16);
    cpu().transpose(x, out, {0, 2, 1, 3});
    CHECK(bf16_bits(out) == transpose_ref(bf16_bits(x), x.shape(), {0, 2, 1, 3}));
  }
  SUBCASE("rank 3, large enough for several threads") {
    Tensor x = random_tensor({40, 30, 20}, 74);
    Tensor out = Tensor::empty({20, 40, 30}, DType::f32);
    cpu().transpose(x, out, {2, 0, 1});
    check_close(out, transpose_ref(x.to_vector<float>(), x.shape(), {2, 0, 1}), 0, 0);
  }
}

// ----------------------------------------------------------------- cast ----

TEST_CASE("cast f32 -> bf16 rounds to nearest, ties to even") {
  std::vector<float> v = {
      f32_from_bits(0x3f808000u),  // halfway 0x3f80|0x3f81: tie goes down to even 0x3f80
      f32_from_bits(0x3f818000u),  // halfway 0x3f81|0x3f82: tie goes up to even 0x3f82
      f32_from_bits(0x3f808001u),  // just above halfway: up
      f32_from_bits(0x3f807fffu),  // just below halfway: down
      f32_from_bits(0xbf818000u),  // negative tie: away from the odd neighbour
      f32_from_bits(0x7f7fffffu),  // FLT_MAX rounds up to +inf
      1.0f, -0.0f, 3.14159265f, -1e-3f, 65504.0f, 1e30f,
  };
  auto r = random_tensor({100}, 81, -100.0f, 100.0f).to_vector<float>();
  v.insert(v.end(), r.begin(), r.end());
  Tensor x = Tensor::from_vector(v, {static_cast<std::int64_t>(v.size())});
  Tensor out = Tensor::empty(x.shape(), DType::bf16);
  cpu().cast(x, out);
  auto got = bf16_bits(out);
  CHECK(got[0] == 0x3f80);
  CHECK(got[1] == 0x3f82);
  CHECK(got[2] == 0x3f81);
  CHECK(got[3] == 0x3f80);
  CHECK(got[4] == 0xbf82);
  CHECK(got[5] == 0x7f80);
  for (std::size_t i = 6; i < v.size(); ++i) {
    CAPTURE(i);
    CAPTURE(v[i]);
    CHECK(got[i] == bf16_bits_of(v[i]));
  }

  SUBCASE("and bf16 -> f32 widens exactly") {
    Tensor back = Tensor::empty(x.shape(), DType::f32);
    cpu().cast(out, back);
    auto bv = back.to_vector<float>();
    for (std::size_t i = 0; i < v.size(); ++i) {
      std::uint32_t u;
      std::memcpy(&u, &bv[i], sizeof u);
      CHECK(u == static_cast<std::uint32_t>(got[i]) << 16);
    }
  }
}

TEST_CASE("cast f32 <-> bf16 of a long tensor: every bit pattern class as to_bf16 and to_f32 give it") {
  // Long enough for the threaded, vectorized loops and their remainders; NaNs
  // (quiet, signalling, negative) stay NaN and quiet, subnormals round as
  // numbers, infinities stay.
  const std::vector<std::uint32_t> special = {0x7fc00000u, 0x7f800001u, 0xffbfffffu, 0x7f800000u, 0xff800000u,
                                              0x00000001u, 0x00400000u, 0x807fffffu, 0x00008000u, 0x00018000u,
                                              0x7f7fffffu, 0x3f808000u, 0x80000000u, 0x00000000u};
  const std::int64_t n = 3 * 65536 + 7;
  std::vector<float> v = random_tensor({n}, 82, -3.0f, 3.0f).to_vector<float>();
  for (std::size_t i = 0; i < v.size(); i += 997) v[i] = f32_from_bits(special[(i / 997) % special.size()]);
  for (std::size_t i = 0; i < special.size(); ++i) v[v.size() - 1 - i] = f32_from_bits(special[i]);
  const Tensor x = Tensor::from_vector(v, {n});
  Tensor narrow = Tensor::empty({n}, DType::bf16), wide = Tensor::empty({n}, DType::f32);
  cpu().cast(x, narrow);
  cpu().cast(narrow, wide);
  const auto got = bf16_bits(narrow);
  const auto back = wide.to_vector<float>();
  std::int64_t wrong = 0, wrong_back = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::size_t at = static_cast<std::size_t>(i);
    wrong += got[at] != to_bf16(v[at]).bits;
    wrong_back += std::bit_cast<std::uint32_t>(back[at]) != std::bit_cast<std::uint32_t>(to_f32(bf16{got[at]}));
  }
  CHECK(wrong == 0);
  CHECK(wrong_back == 0);
  CHECK(got[v.size() - 1] == 0x7fc0);  // quiet NaN
  CHECK(got[v.size() - 2] == 0x7fc0);  // signalling NaN made quiet
  CHECK(got[v.size() - 3] == 0xffff);  // negative NaN: payload kept, quiet bit set
  CHECK(got[v.size() - 6] == 0x0000);  // the least subnormal rounds to zero
}

TEST_CASE("cast between floating and integer dtypes") {
  SUBCASE("f32 -> i32 and i64 truncate toward zero") {
    std::vector<float> v = {0.0f, 2.7f, -2.7f, 0.5f, -0.5f, 123456.9f, -1e9f, 2147483520.0f};
    Tensor x = Tensor::from_vector(v, {8});
    Tensor i32 = Tensor::empty({8}, DType::i32);
    Tensor i64 = Tensor::empty({8}, DType::i64);
    cpu().cast(x, i32);
    cpu().cast(x, i64);
    std::vector<std::int32_t> e32;
    std::vector<std::int64_t> e64;
    for (float f : v) {
      e32.push_back(static_cast<std::int32_t>(std::trunc(f)));
      e64.push_back(static_cast<std::int64_t>(std::trunc(f)));
    }
    CHECK(i32.to_vector<std::int32_t>() == e32);
    CHECK(i64.to_vector<std::int64_t>() == e64);
    Tensor big = Tensor::from_vector<float>({3e12f, -5e15f}, {2});
    Tensor big64 = Tensor::empty({2}, DType::i64);
    cpu().cast(big, big64);
    CHECK(big64.to_vector<std::int64_t>() ==
          std::vector<std::int64_t>{static_cast<std::int64_t>(3e12f), static_cast<std::int64_t>(-5e15f)});
  }
  SUBCASE("floats beyond an integer's range saturate and NaN is 0, in casts and fills") {
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    Tensor x = Tensor::from_vector<float>({nan, inf, -inf, 3e9f, -3e9f, 1e20f, -1e20f}, {7});
    Tensor i32 = Tensor::empty({7}, DType::i32), i64 = Tensor::empty({7}, DType::i64);
    cpu().cast(x, i32);
    cpu().cast(x, i64);
    constexpr auto max32 = std::numeric_limits<std::int32_t>::max(), min32 = std::numeric_limits<std::int32_t>::min();
    constexpr auto max64 = std::numeric_limits<std::int64_t>::max(), min64 = std::numeric_limits<std::int64_t>::min();
    CHECK(i32.to_vector<std::int32_t>() == std::vector<std::int32_t>{0, max32, min32, max32, min32, max32, min32});
    CHECK(i64.to_vector<std::int64_t>() ==
          std::vector<std::int64_t>{0, max64, min64, 3000000000, -3000000000, max64, min64});
    Tensor filled = Tensor::empty({1}, DType::i32);
    cpu().fill(filled, 1e10);
    CHECK(filled.to_vector<std::int32_t>()[0] == max32);
  }
  SUBCASE("bf16 -> i32 truncates") {
    std::vector<float> v = {2.75f, -2.75f, 384.0f, -0.5f};
    Tensor x = to_bf16_tensor(Tensor::from_vector(v, {4}));
    Tensor out = Tensor::empty({4}, DType::i32);
    cpu().cast(x, out);
    CHECK(out.to_vector<std::int32_t>() == std::vector<std::int32_t>{2, -2, 384, 0});
  }
  SUBCASE("i32 and i64 -> f32 round once to nearest even") {
    std::vector<std::int32_t> v32 = {0, 1, -7, 16777217, -16777219, 2147483647, -2147483647 - 1, 123456789};
    std::vector<std::int64_t> v64 = {
        0, -5, (std::int64_t{1} << 24) + 1,
        (std::int64_t{1} << 60) + (std::int64_t{1} << 36) + 1,  // above a tie by far less than a double ulp
        -((std::int64_t{1} << 55) + (std::int64_t{1} << 31) + 1),
        std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::min(),
        (std::int64_t{1} << 53) + 1};
    Tensor x32 = Tensor::from_vector(v32, {8}), x64 = Tensor::from_vector(v64, {8});
    Tensor o32 = Tensor::empty({8}, DType::f32), o64 = Tensor::empty({8}, DType::f32);
    cpu().cast(x32, o32);
    cpu().cast(x64, o64);
    std::vector<float> e32, e64;
    for (auto i : v32) e32.push_back(static_cast<float>(round_to_bits(static_cast<long double>(i), 24)));
    for (auto i : v64) e64.push_back(static_cast<float>(round_to_bits(static_cast<long double>(i), 24)));
    check_close(o32, e32, 0, 0);
    check_close(o64, e64, 0, 0);
  }
  SUBCASE("i32 and i64 -> bf16 round once to nearest even") {
    std::vector<std::int32_t> v32 = {0,   1,   -3,  255, 257,  // 257 ties to 256
                                     259, 385, -385,
                                     (1 << 24) + (1 << 16) + 1,  // above a tie by less than a float ulp
                                     -((1 << 26) + (1 << 18) + 1), 2147483647};
    std::vector<std::int64_t> v64 = {7, -1000001, (std::int64_t{1} << 40) + (std::int64_t{1} << 32) + 1,
                                     (std::int64_t{1} << 62) + (std::int64_t{1} << 54) + 1,
                                     std::numeric_limits<std::int64_t>::min()};
    Tensor x32 = Tensor::from_vector(v32, {static_cast<std::int64_t>(v32.size())});
    Tensor x64 = Tensor::from_vector(v64, {static_cast<std::int64_t>(v64.size())});
    Tensor o32 = Tensor::empty(x32.shape(), DType::bf16), o64 = Tensor::empty(x64.shape(), DType::bf16);
    cpu().cast(x32, o32);
    cpu().cast(x64, o64);
    auto g32 = bf16_bits(o32), g64 = bf16_bits(o64);
    for (std::size_t i = 0; i < v32.size(); ++i) {
      CAPTURE(v32[i]);
      CHECK(g32[i] == bf16_bits_of(v32[i]));
    }
    for (std::size_t i = 0; i < v64.size(); ++i) {
      CAPTURE(v64[i]);
      CHECK(g64[i] == bf16_bits_of(static_cast<long double>(v64[i])));
    }
  }
  SUBCASE("i32 <-> i64 keep the value") {
    std::vector<std::int32_t> v32 = {0, -1, 2147483647, -2147483647 - 1, 42};
    Tensor x = Tensor::from_vector(v32, {5});
    Tensor wide = Tensor::empty({5}, DType::i64), narrow = Tensor::empty({5}, DType::i32);
    cpu().cast(x, wide);
    CHECK(wide.to_vector<std::int64_t>() == std::vector<std::int64_t>(v32.begin(), v32.end()));
    cpu().cast(wide, narrow);
    CHECK(narrow.to_vector<std::int32_t>() == v32);
  }
  SUBCASE("same dtype copies, and a large cast runs on several threads") {
    Tensor x = random_tensor({300, 301}, 82, -50.0f, 50.0f);
    Tensor same = Tensor::empty(x.shape(), DType::f32), ints = Tensor::empty(x.shape(), DType::i32);
    cpu().cast(x, same);
    check_close(same, x.to_vector<float>(), 0, 0);
    cpu().cast(x, ints);
    auto xv = x.to_vector<float>();
    auto iv = ints.to_vector<std::int32_t>();
    for (std::size_t i = 0; i < xv.size(); ++i)
      if (iv[i] != static_cast<std::int32_t>(std::trunc(xv[i]))) {
        FAIL_CHECK("element " << i << ": " << xv[i] << " cast to " << iv[i]);
        break;
      }
  }
}

// ------------------------------------------------------------ fill, copy ----

TEST_CASE("fill writes the value in every dtype") {
  const Shape shape{300, 257};  // large enough for the parallel loop
  SUBCASE("f32") {
    Tensor t = Tensor::empty(shape, DType::f32);
    cpu().fill(t, -2.5);
    check_close(t, std::vector<float>(static_cast<std::size_t>(shape.numel()), -2.5f), 0, 0);
    cpu().fill(t, 0.1);
    check_close(t, std::vector<float>(static_cast<std::size_t>(shape.numel()), 0.1f), 0, 0);
  }
  SUBCASE("bf16: the nearest bf16 to the value") {
    Tensor t = Tensor::empty(shape, DType::bf16);
    for (double value : {0.1, -3.0, 1e-3, 1.0 + 1.0 / 256 + 1.0 / (1 << 30), 12345.678}) {
      CAPTURE(value);
      cpu().fill(t, value);
      auto bits = bf16_bits(t);
      std::uint16_t want = bf16_bits_of(static_cast<long double>(value));
      CHECK(bits.front() == want);
      CHECK(std::count(bits.begin(), bits.end(), want) == shape.numel());
    }
  }
  SUBCASE("i32") {
    Tensor t = Tensor::empty(shape, DType::i32);
    cpu().fill(t, -123456.0);
    CHECK(t.to_vector<std::int32_t>() == std::vector<std::int32_t>(static_cast<std::size_t>(shape.numel()), -123456));
  }
  SUBCASE("i64") {
    Tensor t = Tensor::empty(shape, DType::i64);
    auto value = (std::int64_t{1} << 45) + 17;
    cpu().fill(t, static_cast<double>(value));
    CHECK(t.to_vector<std::int64_t>() == std::vector<std::int64_t>(static_cast<std::size_t>(shape.numel()), value));
  }
  SUBCASE("a scalar tensor") {
    Tensor t = Tensor::empty({}, DType::f32);
    cpu().fill(t, 4.0);
    check_close(t, {4.0f}, 0, 0);
  }
}

TEST_CASE("copy duplicates the elements of every dtype") {
  Tensor x = random_tensor({17, 9}, 91);
  Tensor y = Tensor::empty(x.shape(), DType::f32);
  cpu().copy(x, y);
  check_close(y, x.to_vector<float>(), 0, 0);

  std::vector<std::int64_t> v64 = {1, -1, std::int64_t{1} << 50};
  Tensor a = Tensor::from_vector(v64, {3}), b = Tensor::empty({3}, DType::i64);
  cpu().copy(a, b);
  CHECK(b.to_vector<std::int64_t>() == v64);

  Tensor h = to_bf16_tensor(random_tensor({5}, 92)), h2 = Tensor::empty({5}, DType::bf16);
  cpu().copy(h, h2);
  CHECK(bf16_bits(h2) == bf16_bits(h));

  Tensor i = Tensor::from_vector<std::int32_t>({3, 1, 4}, {3}), i2 = Tensor::empty({3}, DType::i32);
  cpu().copy(i, i2);
  CHECK(i2.to_vector<std::int32_t>() == std::vector<std::int32_t>{3, 1, 4});

  // A copy onto itself leaves the data as it was.
  cpu().copy(x, x);
  check_close(x, y.to_vector<float>(), 0, 0);
}
