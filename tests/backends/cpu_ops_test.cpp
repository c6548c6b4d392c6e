// Every CPU kernel's forward result against a plain reference loop.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/vector_math.hpp"
#include "backends/registry.hpp"
#include "tests/test_util.hpp"

using namespace tessera;
using namespace tessera::test;

namespace {

// Reference matmul over (optionally transposed) rank-2 operands.
std::vector<float> reference_matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  auto av = a.to_vector<float>(), bv = b.to_vector<float>();
  std::int64_t m = ta ? a.shape()[1] : a.shape()[0], k = ta ? a.shape()[0] : a.shape()[1];
  std::int64_t n = tb ? b.shape()[0] : b.shape()[1];
  std::vector<float> out(static_cast<std::size_t>(m * n), 0.0f);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (std::int64_t p = 0; p < k; ++p)
        acc += static_cast<double>(ta ? av[p * m + i] : av[i * k + p]) *
               static_cast<double>(tb ? bv[j * k + p] : bv[p * n + j]);
      out[i * n + j] = static_cast<float>(acc);
    }
  return out;
}

}  // namespace

TEST_CASE("matmul with either operand transposed") {
  Backend& cpu = backend_for(Device::cpu(0));
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      CAPTURE(ta);
      CAPTURE(tb);
      Tensor a = random_tensor(ta ? Shape{13, 7} : Shape{7, 13}, 1);
      Tensor b = random_tensor(tb ? Shape{5, 13} : Shape{13, 5}, 2);
      Tensor out = Tensor::empty({7, 5}, DType::f32);
      cpu.matmul(a, b, nullptr, out, {.transpose_a = ta, .transpose_b = tb});
      check_close(out, reference_matmul(a, b, ta, tb), 1e-5, 1e-5);
    }
}

TEST_CASE("weight gradients a^T b: through oneDNN's sgemm up to 512 rows on AVX-512, its primitive past them") {
  // backends/cpu/matmul.cpp (weight_gradient_by_sgemm): both paths against
  // the reference, with alpha, a K of one and tails, on 1-3 threads (513
  // rows split unevenly); where the CPU takes sgemm, no primitive is made.
  CpuBackend& cpu = dynamic_cast<CpuBackend&>(backend_for(Device::cpu(0)));
  const int saved = cpu.threads();
  const bool sgemm_here = onednn_runs_avx512();
  struct Case {
    std::int64_t k, m, n;
  };
  for (int threads : {1, 2, 3})
    for (const Case& c : {Case{1, 37, 16}, Case{300, 512, 100}, Case{300, 513, 100}, Case{64, 7, 1}})
      for (float alpha : {1.0f, 0.5f}) {
        CAPTURE(threads);
        CAPTURE(c.k);
        CAPTURE(c.m);
        CAPTURE(c.n);
        CAPTURE(alpha);
        cpu.set_threads(threads);
        Tensor a = random_tensor({c.k, c.m}, 11), b = random_tensor({c.k, c.n}, 12);
        Tensor out = Tensor::from_vector(std::vector<float>(static_cast<std::size_t>(c.m * c.n), NAN), {c.m, c.n});
        const auto primitives = cpu.primitive_count();
        cpu.matmul(a, b, nullptr, out, {.transpose_a = true, .alpha = alpha});
        auto ref = reference_matmul(a, b, true, false);
        for (float& r : ref) r *= alpha;
        check_close(out, ref, 1e-5, 1e-5);
        if (sgemm_here && c.m <= 512) CHECK(cpu.primitive_count() == primitives);
      }
  cpu.set_threads(saved);
}

TEST_CASE("products a b against a b of 1 MiB or more: through oneDNN's sgemm and a pass for bias and ReLU on AVX-512") {
  // backends/cpu/matmul.cpp (product_by_sgemm): every epilogue the path
  // takes (none, bias, ReLU, both; alpha) against the reference, with tails
  // of N off the vectors, one row and rows split unevenly on 1-3 threads; a
  // b just under the size threshold, and large ones of 255 and 128 columns,
  // go to the primitive (256 columns to sgemm). Where the CPU takes sgemm, no
  // primitive is made. An a of rank 3 against the 2-D b takes it as one
  // product over its rows. A NaN in a: ReLU gives 0, as oneDNN's post-op
  // does, the row stays NaN without it, and the other rows are untouched.
  CpuBackend& cpu = dynamic_cast<CpuBackend&>(backend_for(Device::cpu(0)));
  const int saved = cpu.threads();
  const bool sgemm_here = onednn_runs_avx512();
  struct Case {
    std::int64_t m, k, n;
  };
  for (const Case& c : {Case{7, 512, 512}, Case{130, 300, 1000}, Case{1, 1024, 257}, Case{8, 1024, 256},
                        Case{64, 511, 512}, Case{8, 1100, 255}, Case{9, 2304, 128}}) {
    Tensor a = random_tensor({c.m, c.k}, 31), b = random_tensor({c.k, c.n}, 32), bias = random_tensor({c.n}, 33);
    const auto product = reference_matmul(a, b, false, false);
    const auto bv = bias.to_vector<float>();
    const bool by_sgemm = sgemm_here && c.k * c.n >= 256 * 1024 && c.n >= 256;
    for (int threads : {1, 2, 3})
      for (bool biased : {false, true})
        for (Activation activation : {Activation::none, Activation::relu})
          for (float alpha : {1.0f, 0.5f}) {
            CAPTURE(threads);
            CAPTURE(c.m);
            CAPTURE(c.k);
            CAPTURE(c.n);
            CAPTURE(biased);
            CAPTURE(static_cast<int>(activation));
            CAPTURE(alpha);
            cpu.set_threads(threads);
            Tensor out = Tensor::from_vector(std::vector<float>(static_cast<std::size_t>(c.m * c.n), NAN), {c.m, c.n});
            const auto primitives = cpu.primitive_count();
            cpu.matmul(a, b, biased ? &bias : nullptr, out, {.activation = activation, .alpha = alpha});
            std::vector<float> ref(product.size());
            for (std::size_t i = 0; i < ref.size(); ++i) {
              const float x = alpha * product[i] + (biased ? bv[i % static_cast<std::size_t>(c.n)] : 0.0f);
              ref[i] = activation == Activation::relu ? std::max(0.0f, x) : x;
            }
            // f32 sums of K products round further from the double ones as K grows.
            check_close(out, ref, 1e-5, 1e-5 + 1e-6 * std::sqrt(static_cast<double>(c.k)));
            if (by_sgemm) CHECK(cpu.primitive_count() == primitives);
            if (!by_sgemm && threads == 1) CHECK(cpu.primitive_count() > primitives);  // its first call makes it
          }
  }
  cpu.set_threads(2);
  {
    Tensor a = random_tensor({2, 5, 512}, 37), b = random_tensor({512, 512}, 38), bias = random_tensor({512}, 39);
    Tensor out = Tensor::empty({2, 5, 512}, DType::f32);
    const auto primitives = cpu.primitive_count();
    cpu.matmul(a, b, &bias, out, {.activation = Activation::relu});
    auto ref = reference_matmul(a.reshape({10, 512}), b, false, false);
    const auto bv = bias.to_vector<float>();
    for (std::size_t i = 0; i < ref.size(); ++i) ref[i] = std::max(0.0f, ref[i] + bv[i % 512]);
    check_close(out, ref, 1e-5, 1e-5 + 1e-6 * std::sqrt(512.0));
    if (sgemm_here) CHECK(cpu.primitive_count() == primitives);
  }
  for (Activation activation : {Activation::none, Activation::relu}) {
    CAPTURE(static_cast<int>(activation));
    auto values = random_tensor({3, 512}, 34).to_vector<float>();
    values[512] = NAN;  // row 1
    Tensor a = Tensor::from_vector(values, {3, 512}), b = random_tensor({512, 600}, 35), bias = random_tensor({600}, 36);
    Tensor out = Tensor::empty({3, 600}, DType::f32);
    cpu.matmul(a, b, &bias, out, {.activation = activation});
    const auto y = out.to_vector<float>();
    for (std::size_t j = 0; j < y.size(); ++j) {
      CAPTURE(j);
      if (j < 600 || j >= 1200)
        CHECK(!std::isnan(y[j]));
      else if (activation == Activation::relu)
        CHECK(y[j] == 0.0f);
      else
        CHECK(std::isnan(y[j]));
    }
  }
  cpu.set_threads(saved);
}

TEST_CASE("matmul of few rows against weights whose rows lie 4 KiB apart") {
  // On a CPU where oneDNN runs its AVX2 sgemm, these run on the in-house
  // GEMM with a bias and ReLU, and against a transposed copy of b with tanh
  // (backends/cpu/matmul.cpp); elsewhere oneDNN's own path. K of 37 leaves
  // rows of b outside the 8x8 blocks; K of 784 is the MLP's first layer; 2
  // threads split the blocks.
  Backend& cpu = backend_for(Device::cpu(0));
  auto& backend = dynamic_cast<CpuBackend&>(cpu);
  const int saved = backend.threads();
  backend.set_threads(2);
  struct Case {
    std::int64_t m, k, n;
  };
  for (const Case& c : {Case{64, 37, 1024}, Case{100, 19, 2048}, Case{511, 8, 1024}, Case{64, 784, 1024}})
    for (Activation activation : {Activation::relu, Activation::tanh}) {
      const std::int64_t m = c.m, k = c.k, n = c.n;
      CAPTURE(m);
      CAPTURE(static_cast<int>(activation));
      Tensor a = random_tensor({m, k}, 8), b = random_tensor({k, n}, 9), bias = random_tensor({n}, 10);
      Tensor out = Tensor::empty({m, n}, DType::f32);
      cpu.matmul(a, b, &bias, out, {.activation = activation, .alpha = 0.5f});
      auto ref = reference_matmul(a, b, false, false);
      auto bv = bias.to_vector<float>();
      for (std::size_t i = 0; i < ref.size(); ++i) {
        const float x = 0.5f * ref[i] + bv[i % static_cast<std::size_t>(n)];
        ref[i] = activation == Activation::relu ? std::max(0.0f, x) : std::tanh(x);
      }
      check_close(out, ref, 1e-5, 1e-5);
    }
  backend.set_threads(saved);
}

TEST_CASE("matmul against a packed constant b computes what the row-major b gives, and checks its pack") {
  // Backend::pack_constant_b / matmul_packed (backends/cpu/matmul.cpp): where
  // oneDNN prefers a blocked b (AVX-512), K and N off its 16 x 64 blocks, b
  // transposed or not, one row or many, a of rank 3, a bias by bias or by
  // post-op (alpha), on 1 and 2 threads; elsewhere the backend packs nothing.
  CpuBackend& cpu = dynamic_cast<CpuBackend&>(backend_for(Device::cpu(0)));
  const int saved = cpu.threads();
  struct Case {
    Shape a;
    std::int64_t k, n;
  };
  bool packed_any = false;
  for (int threads : {1, 2})
    for (const Case& c : {Case{{1, 1024}, 1024, 1024}, Case{{3, 37}, 37, 65}, Case{{2, 5, 100}, 100, 130}, Case{{128, 16}, 16, 64}})
      for (bool tb : {false, true})
        for (float alpha : {1.0f, 0.5f}) {
          CAPTURE(threads);
          CAPTURE(c.a.str());
          CAPTURE(c.n);
          CAPTURE(tb);
          CAPTURE(alpha);
          cpu.set_threads(threads);
          const MatmulArgs args{.transpose_b = tb, .activation = Activation::relu, .alpha = alpha};
          const Shape b_shape = tb ? Shape{c.n, c.k} : Shape{c.k, c.n};
          Tensor a = random_tensor(c.a, 21), b = random_tensor(b_shape, 22), bias = random_tensor({c.n}, 23);
          const Shape out_shape = matmul_output_shape(c.a, b_shape, args);
          Tensor expected = Tensor::empty(out_shape, DType::f32), out = Tensor::empty(out_shape, DType::f32);
          cpu.matmul(a, b, &bias, expected, args);
          const std::int64_t floats = cpu.packed_b_floats(c.k, c.n);
          if (floats == 0) {
            CHECK(cpu.constant_b_form(c.a, b_shape, DType::f32, args) != ConstantB::packed);
            CHECK_THROWS_AS(cpu.matmul_packed(a, PackedMatrix{Tensor::empty({1}, DType::f32), c.k, c.n}, &bias, out, args),
                            UnsupportedError);
            continue;
          }
          packed_any = true;
          CHECK(floats >= c.k * c.n);
          PackedMatrix packed{Tensor::empty({floats}, DType::f32), c.k, c.n};
          cpu.pack_constant_b(b, args, packed);
          cpu.matmul_packed(a, packed, &bias, out, args);
          // Both against the sums in double: the plain product may run on
          // another kernel (product_by_sgemm), whose f32 sums over K = 1024
          // round apart from brgemm's by more than 1e-5.
          const Tensor a2 = a.reshape({c.a.rows(), c.k});
          auto ref = reference_matmul(a2, b, false, tb);
          const auto bv = bias.to_vector<float>();
          for (std::size_t i = 0; i < ref.size(); ++i)
            ref[i] = std::max(0.0f, alpha * ref[i] + bv[i % static_cast<std::size_t>(c.n)]);
          check_close(out, ref, 1e-5, 3e-5);
          check_close(expected, ref, 1e-5, 3e-5);
          // A pack of another matrix's shape, or an out of the wrong shape, is refused.
          PackedMatrix other{packed.data, c.k + 1, c.n};
          CHECK_THROWS_AS(cpu.pack_constant_b(b, args, other), ShapeError);
          CHECK_THROWS_AS(cpu.matmul_packed(a, packed, &bias, Tensor::empty({1, c.n + 1}, DType::f32), args), ShapeError);
        }
  cpu.set_threads(saved);
  if (!packed_any) MESSAGE("oneDNN packs no b on this CPU (AVX2): only the refusals were checked");
}

TEST_CASE("matmul fuses bias, activation and alpha") {
  Backend& cpu = backend_for(Device::cpu(0));
  Tensor a = random_tensor({6, 9}, 3), b = random_tensor({9, 4}, 4), bias = random_tensor({4}, 5);
  Tensor out = Tensor::empty({6, 4}, DType::f32);
  cpu.matmul(a, b, &bias, out, {.activation = Activation::relu, .alpha = 0.5f});
  auto ref = reference_matmul(a, b, false, false);
  auto bv = bias.to_vector<float>();
  for (std::size_t i = 0; i < ref.size(); ++i) ref[i] = std::max(0.0f, 0.5f * ref[i] + bv[i % 4]);
  check_close(out, ref, 1e-5, 1e-5);
}

TEST_CASE("batched matmul broadcasts a rank-2 weight") {
  Backend& cpu = backend_for(Device::cpu(0));
  Tensor a = random_tensor({3, 4, 6}, 6), b = random_tensor({6, 5}, 7);
  Tensor out = Tensor::empty({3, 4, 5}, DType::f32);
  cpu.matmul(a, b, nullptr, out);
  auto av = a.to_vector<float>();
  std::vector<float> expected;
  for (int batch = 0; batch < 3; ++batch) {
    std::vector<float> slice(av.begin() + batch * 24, av.begin() + (batch + 1) * 24);
    auto r = reference_matmul(Tensor::from_vector(slice, {4, 6}), b, false, false);
    expected.insert(expected.end(), r.begin(), r.end());
  }
  check_close(out, expected, 1e-5, 1e-5);
}

TEST_CASE("matmul reports mismatched operands by op, shapes and dtypes") {
  set_cpu_device_count(2);
  Backend& cpu = backend_for(Device::cpu(0));
  Tensor a = random_tensor({4, 3}, 1), b = random_tensor({5, 2}, 2);
  Tensor out = Tensor::empty({4, 2}, DType::f32);
  try {
    cpu.matmul(a, b, nullptr, out);
    FAIL("expected ShapeError");
  } catch (const ShapeError& e) {
    std::string m = e.what();
    CHECK(m.find("matmul") != std::string::npos);
    CHECK(m.find("[4, 3]") != std::string::npos);
    CHECK(m.find("[5, 2]") != std::string::npos);
  }
  Tensor ints = Tensor::empty({3, 2}, DType::i32);
  try {
    cpu.matmul(a, ints, nullptr, out);
    FAIL("expected DTypeError");
  } catch (const DTypeError& e) {
    std::string m = e.what();
    CHECK(m.find("f32[4, 3]") != std::string::npos);
    CHECK(m.find("i32[3, 2]") != std::string::npos);
  }
  // Logical CPU devices share the host's memory: a kernel of cpu:0 reads a
  // tensor of cpu:1 (how the devices of a mesh read one batch without
  // copies). Only other kinds of device are errors (the GPU suite checks those).
  Tensor other = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2}, Device::cpu(1));
  CHECK(shares_memory(Device::cpu(0), Device::cpu(1)));
  CHECK_FALSE(shares_memory(Device::cpu(0), Device::cuda(0)));
  CHECK_NOTHROW(cpu.matmul(a, other, nullptr, out));
  // An output or bias of another dtype is the engine's error, not oneDNN's.
  Tensor half = Tensor::empty({4, 2}, DType::bf16);
  CHECK_THROWS_WITH_AS(cpu.matmul(a, other, nullptr, half), doctest::Contains("out is bf16[4, 2]"), DTypeError);
  Tensor int_bias = Tensor::empty({2}, DType::i32);
  CHECK_THROWS_AS(cpu.matmul(a, other, &int_bias, out), DTypeError);
  set_cpu_device_count(1);
}

TEST_CASE("edge shapes: empty contractions and axes, and padding a window cannot see past") {
  Backend& cpu = backend_for(Device::cpu(0));
  // A batched matmul with an empty contraction (or no columns) against a shared weight.
  Tensor a = Tensor::empty({2, 3, 0}, DType::f32), b = Tensor::empty({0, 4}, DType::f32);
  Tensor bias = Tensor::from_vector<float>({1, -2, 3, -4}, {4}), out = Tensor::empty({2, 3, 4}, DType::f32);
  cpu.matmul(a, b, &bias, out);
  for (std::int64_t r = 0; r < 6; ++r)
    CHECK(std::vector<float>(out.data<float>() + r * 4, out.data<float>() + r * 4 + 4) == std::vector<float>{1, -2, 3, -4});
  Tensor no_columns = Tensor::empty({2, 3, 0}, DType::f32);
  CHECK_NOTHROW(cpu.matmul(random_tensor({2, 3, 4}, 5), Tensor::empty({4, 0}, DType::f32), nullptr, no_columns));
  // max over an empty axis is -inf (the identity), as on the GPU.
  Tensor m = Tensor::empty({1, 3}, DType::f32);
  cpu.reduce(ReduceOp::max, Tensor::empty({0, 3}, DType::f32), m);
  for (float v : m.to_vector<float>()) CHECK(v == -std::numeric_limits<float>::infinity());
  // layer_norm of rows without features: one mean and rstd per row still.
  Tensor x = Tensor::empty({3, 0}, DType::f32), none = Tensor::empty({0}, DType::f32);
  Tensor mean = Tensor::empty({3}, DType::f32), rstd = Tensor::empty({3}, DType::f32);
  CHECK_NOTHROW(cpu.layer_norm(x, none, none, Tensor::empty({3, 0}, DType::f32), mean, rstd, 1e-5f));
  // Average pooling whose top padding covers a whole window.
  Pool2dArgs pool{.kind = PoolKind::avg, .window_h = 2, .window_w = 1, .stride_h = 2, .stride_w = 1, .pad_top = 2};
  CHECK_THROWS_WITH_AS(cpu.pool2d_forward(Tensor::empty({1, 1, 1, 1}, DType::f32), Tensor::empty({1, 1, 1, 1}, DType::f32), pool),
                       doctest::Contains("must be smaller than the window"), ShapeError);
}

TEST_CASE("bf16 matmul accumulates in f32 and matches the f32 result of the rounded operands") {
  Backend& cpu = backend_for(Device::cpu(0));
  Tensor a = random_tensor({8, 32}, 11), b = random_tensor({32, 6}, 12);
  auto round = [](const Tensor& t) {
    Tensor r = Tensor::empty(t.shape(), DType::bf16);
    const float* src = t.data<float>();
    for (std::int64_t i = 0; i < t.numel(); ++i) r.data<bf16>()[i] = to_bf16(src[i]);
    return r;
  };
  auto widen = [](const Tensor& t) {
    std::vector<float> v(static_cast<std::size_t>(t.numel()));
    for (std::int64_t i = 0; i < t.numel(); ++i) v[i] = to_f32(t.data<bf16>()[i]);
    return Tensor::from_vector(v, t.shape());
  };
  Tensor a16 = round(a), b16 = round(b);
  auto expected = reference_matmul(widen(a16), widen(b16), false, false);
  Tensor out32 = Tensor::empty({8, 6}, DType::f32);
  cpu.matmul(a16, b16, nullptr, out32);
  check_close(out32, expected, 1e-4, 1e-4);
  Tensor out16 = Tensor::empty({8, 6}, DType::bf16);
  cpu.matmul(a16, b16, nullptr, out16);
  check_close(widen(out16), expected, 1e-2, 1e-2);  // one bf16 rounding of the result
}

TEST_CASE("bf16 matmul into bf16 after an f32 bias and an activation: the f32 result cast, bit for bit") {
  // Mixed precision's cast fused into a product (fusion.hpp) computes what
  // the f32 product and the cast compute. Other dtypes of bias stay refused.
  Backend& cpu = backend_for(Device::cpu(0));
  Tensor a16 = Tensor::empty({2, 24, 40}, DType::bf16), b16 = Tensor::empty({40, 36}, DType::bf16);
  cpu.cast(random_tensor({2, 24, 40}, 13, -2.0f, 2.0f), a16);
  cpu.cast(random_tensor({40, 36}, 14, -2.0f, 2.0f), b16);
  const Tensor bias = random_tensor({36}, 15, -1.0f, 1.0f);
  for (Activation act : {Activation::none, Activation::relu, Activation::gelu_erf})
    for (bool with_bias : {true, false}) {
      CAPTURE(std::string(name(act)));
      CAPTURE(with_bias);
      const MatmulArgs args{.activation = act, .alpha = 0.75f};
      Tensor product = Tensor::empty({2, 24, 36}, DType::f32), cast = Tensor::empty({2, 24, 36}, DType::bf16);
      cpu.matmul(a16, b16, with_bias ? &bias : nullptr, product, args);
      cpu.cast(product, cast);
      Tensor fused = Tensor::empty({2, 24, 36}, DType::bf16);
      cpu.matmul(a16, b16, with_bias ? &bias : nullptr, fused, args);
      if (with_bias || act != Activation::none) {
        CHECK(bf16_bits(fused) == bf16_bits(cast));
      } else {  // no pass: oneDNN rounds its own sums
        Tensor wide = Tensor::empty({2, 24, 36}, DType::f32);
        cpu.cast(fused, wide);
        check_close(wide, product.to_vector<float>(), 1e-2, 1e-2);
      }
    }
  Tensor out = Tensor::empty({2, 24, 36}, DType::bf16), f32_a = random_tensor({2, 24, 40}, 16);
  CHECK_THROWS_AS(cpu.matmul(f32_a, random_tensor({40, 36}, 17), &bias, out), DTypeError);  // f32 operands, bf16 out
  Tensor i32_bias = Tensor::empty({36}, DType::i32);
  CHECK_THROWS_AS(cpu.matmul(a16, b16, &i32_bias, out), DTypeError);
}

TEST_CASE("each thread share has primitives of its own, reused when the share comes back") {
  // A backend of its own: the registry's one holds what earlier tests cached
  // for other shares, which made this test fail when run after them.
  CpuBackend cpu(Device::cpu(0), 1);
  Tensor a = random_tensor({16, 16}, 1), b = random_tensor({16, 16}, 2);
  Tensor out = Tensor::empty({16, 16}, DType::f32);
  int threads = cpu.threads();
  cpu.matmul(a, b, nullptr, out);
  std::size_t cached = cpu.primitive_count();
  REQUIRE(cached > 0);
  cpu.set_threads(threads + 1);
  CHECK(cpu.primitive_count() == 0);
  cpu.matmul(a, b, nullptr, out);
  check_close(out, reference_matmul(a, b, false, false), 1e-5, 1e-5);
  CHECK(cpu.primitive_count() > 0);
  cpu.set_threads(threads);
  CHECK(cpu.primitive_count() == cached);  // the first share's primitives were kept
  cpu.matmul(a, b, nullptr, out);
  CHECK(cpu.primitive_count() == cached);
  check_close(out, reference_matmul(a, b, false, false), 1e-5, 1e-5);
}

TEST_CASE("matmul alphas that print alike get primitives of their own") {
  Backend& cpu = backend_for(Device::cpu(0));
  Tensor a = random_tensor({4, 4}, 1), b = random_tensor({4, 4}, 2);
  Tensor out = Tensor::empty({4, 4}, DType::f32);
  auto ref = reference_matmul(a, b, false, false);
  for (float alpha : {1e-7f, 1e-8f}) {  // both "0.000000" under %f
    cpu.matmul(a, b, nullptr, out, {.alpha = alpha});
    std::vector<float> expected;
    for (float r : ref) expected.push_back(alpha * r);
    check_close(out, expected, 1e-5, 1e-12);
  }
}

TEST_CASE("concat and slice move the right blocks and check their shapes") {
  Backend& cpu = backend_for(Device::cpu(0));
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}), b = Tensor::from_vector<float>({7, 8}, {2, 1});
  Tensor out = Tensor::empty({2, 4}, DType::f32);
  cpu.concat({a, b}, out, 1);
  check_close(out, {1, 2, 3, 7, 4, 5, 6, 8});
  Tensor part = Tensor::empty({2, 2}, DType::f32);
  cpu.slice(out, part, 1, 2);
  check_close(part, {3, 7, 6, 8});
  CHECK_THROWS_AS(cpu.slice(out, part, 1, 3), ShapeError);
  CHECK_THROWS_AS(cpu.concat({a, a}, out, 1), ShapeError);
}
