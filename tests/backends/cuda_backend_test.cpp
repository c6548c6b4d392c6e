// The CUDA backend against host references and the CPU backend.
//
// Tests that need a GPU belong to the test suite "gpu": a plain run skips them,
// `tessera_tests --gpu-suite` runs them (CTest reports that entry as skipped
// where no GPU is found). The error-reporting and device-checking tests need
// only the CUDA libraries and run everywhere the backend is built.
#include <doctest/doctest.h>

#include "tessera_features.hpp"
#if TESSERA_HAVE_CUDA

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/registry.hpp"
#include "tests/gpu_test_util.hpp"
#include "tests/test_util.hpp"

using namespace tessera;
using namespace tessera::test;

namespace {


// Host tensor of `dtype` with distinct, exactly representable values.
Tensor host_pattern(const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    auto v = static_cast<float>((i * 37) % 1001) - 500.0f;
    switch (dtype) {
      case DType::f32: t.data<float>()[i] = v * 0.25f; break;
      case DType::bf16: t.data<bf16>()[i] = to_bf16(v); break;
      case DType::i32: t.data<std::int32_t>()[i] = static_cast<std::int32_t>(i * 7919 - 3); break;
      case DType::i64: t.data<std::int64_t>()[i] = (i << 33) - 5; break;
    }
  }
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// The CPU backend's result for the same host operands.
Tensor cpu_matmul(const Tensor& a, const Tensor& b, const Tensor* bias, const MatmulArgs& args) {
  Tensor out = Tensor::empty(matmul_output_shape(a.shape(), b.shape(), args), DType::f32);
  backend_for(Device::cpu(0)).matmul(a, b, bias, out, args);
  return out;
}

// The CUDA backend's result for host operands (copied over and back).
Tensor gpu_matmul(const Tensor& a, const Tensor& b, const Tensor* bias, const MatmulArgs& args,
                  DType out_dtype = DType::f32) {
  Tensor da = to_gpu(a), db = to_gpu(b);
  Tensor dbias = bias != nullptr ? to_gpu(*bias) : Tensor();
  Tensor out = Tensor::empty(matmul_output_shape(a.shape(), b.shape(), args), out_dtype,
                             Device::cuda(0));
  gpu().matmul(da, db, bias != nullptr ? &dbias : nullptr, out, args);
  return to_host(out);
}

// t rounded to bf16, and those values back in f32 (what an f32 reference computes on).
std::pair<Tensor, Tensor> bf16_rounded(const Tensor& t) {
  Tensor r = Tensor::empty(t.shape(), DType::bf16), back = Tensor::empty(t.shape(), DType::f32);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    r.data<bf16>()[i] = to_bf16(t.data<float>()[i]);
    back.data<float>()[i] = to_f32(r.data<bf16>()[i]);
  }
  return {r, back};
}

Shape operand_shape(std::vector<std::int64_t> batch, std::int64_t rows, std::int64_t cols,
                    bool transposed) {
  batch.push_back(transposed ? cols : rows);
  batch.push_back(transposed ? rows : cols);
  return Shape(std::move(batch));
}

}  // namespace

// --- without a GPU ----------------------------------------------------------

TEST_CASE("cuda errors name the call, its location and the error") {
  CHECK_THROWS_WITH_AS(TESSERA_CUDA_CHECK(cudaErrorInvalidValue),
                       doctest::Contains("tests/backends/cuda_backend_test.cpp:"), Error);
  CHECK_THROWS_WITH_AS(TESSERA_CUDA_CHECK(cudaErrorInvalidValue),
                       doctest::Contains("cudaErrorInvalidValue failed: cudaErrorInvalidValue ("),
                       Error);
  CHECK_THROWS_WITH_AS(TESSERA_CUBLAS_CHECK(CUBLAS_STATUS_NOT_SUPPORTED),
                       doctest::Contains("cuBLAS error at tests/backends/cuda_backend_test.cpp:"),
                       Error);
  CHECK_THROWS_WITH_AS(TESSERA_CUBLAS_CHECK(CUBLAS_STATUS_NOT_SUPPORTED),
                       doctest::Contains("CUBLAS_STATUS_NOT_SUPPORTED"), Error);
  CHECK_NOTHROW(TESSERA_CUDA_CHECK(cudaSuccess));
  CHECK_NOTHROW(TESSERA_CUBLAS_CHECK(CUBLAS_STATUS_SUCCESS));
}

TEST_CASE("cuda backend of a GPU that does not exist is a DeviceError") {
  const int count = cuda_device_count();
  CHECK_THROWS_AS(backend_for(Device::cuda(count)), DeviceError);
  CHECK_THROWS_AS(make_cuda_backend(Device::cuda(count), count, 1), DeviceError);
  CHECK_THROWS_WITH_AS(make_cuda_backend(Device::cuda(0), count, 2), doctest::Contains("would run on GPU"), DeviceError);
  CHECK_THROWS_AS(CudaAllocator(Device::cpu(0), 0), DeviceError);
  CHECK(cuda_compiled());
}

// --- on a GPU ---------------------------------------------------------------

TEST_CASE("cuda backend: name, device and capabilities" * doctest::test_suite("gpu") * skip_without_gpu()) {
  Backend& b = gpu();
  CHECK(b.name() == "cuda");
  CHECK(b.device() == Device::cuda(0));
  CHECK(&allocator_for(Device::cuda(0)) == &b.allocator());
  CHECK(b.supports(OpKind::fill, DType::bf16));
  CHECK(b.supports(OpKind::matmul, DType::f32));
  CHECK_FALSE(b.supports(OpKind::matmul, DType::i32));
  CHECK(b.supports(OpKind::cast, DType::f32));
  CHECK(b.supports(OpKind::conv2d, DType::f32));
  CHECK_FALSE(b.supports(OpKind::unary, DType::bf16));
  Tensor x = Tensor::empty({4}, DType::bf16, Device::cuda(0));
  CHECK_THROWS_AS(b.unary(UnaryOp::neg, x, x), UnsupportedError);
  b.synchronize();
}

TEST_CASE("cuda copy round trip host → device → device → host for every dtype" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  for (DType dtype : {DType::f32, DType::bf16, DType::i32, DType::i64})
    for (const Shape& shape : {Shape{}, Shape{1}, Shape{7, 13}, Shape{3, 1000, 33}, Shape{0, 4}}) {
      CAPTURE(std::string(dtype_name(dtype)));
      CAPTURE(shape.str());
      Tensor host = host_pattern(shape, dtype);
      Tensor d1 = to_gpu(host);
      Tensor d2 = Tensor::empty(shape, dtype, Device::cuda(0));
      gpu().copy(d1, d2);
      Tensor back = to_host(d2);
      CHECK(same_bytes(host, back));
    }
}

TEST_CASE("cuda copy checks its operands" * doctest::test_suite("gpu") * skip_without_gpu()) {
  Tensor host = host_pattern({4, 4}, DType::f32);
  Tensor other_host = Tensor::empty({4, 4}, DType::f32);
  CHECK_THROWS_AS(gpu().copy(host, other_host), DeviceError);  // neither side on the GPU
  Tensor wrong_shape = Tensor::empty({16}, DType::f32, Device::cuda(0));
  CHECK_THROWS_AS(gpu().copy(host, wrong_shape), ShapeError);
  Tensor wrong_dtype = Tensor::empty({4, 4}, DType::i32, Device::cuda(0));
  CHECK_THROWS_AS(gpu().copy(host, wrong_dtype), DTypeError);
}

TEST_CASE("cuda fill writes every element for f32, bf16, i32 and i64" * doctest::test_suite("gpu") * skip_without_gpu()) {
  // 100003 elements: several blocks and a partial one.
  const std::int64_t n = 100003;
  Tensor f = Tensor::empty({n}, DType::f32, Device::cuda(0));
  gpu().fill(f, -2.5);
  CHECK(to_host(f).to_vector<float>() == std::vector<float>(n, -2.5f));

  Tensor h = Tensor::empty({n}, DType::bf16, Device::cuda(0));
  gpu().fill(h, 3.14159);
  auto hv = to_host(h).to_vector<bf16>();
  bool all_bf16 = true;
  for (auto v : hv) all_bf16 = all_bf16 && v.bits == to_bf16(3.14159f).bits;
  CHECK(all_bf16);

  Tensor i = Tensor::empty({n}, DType::i32, Device::cuda(0));
  gpu().fill(i, -7);
  CHECK(to_host(i).to_vector<std::int32_t>() == std::vector<std::int32_t>(n, -7));

  Tensor l = Tensor::empty({n}, DType::i64, Device::cuda(0));
  gpu().fill(l, 4294967296.0 * 3);  // needs the upper 32 bits
  CHECK(to_host(l).to_vector<std::int64_t>() == std::vector<std::int64_t>(n, 3LL << 32));

  // More elements than the capped grid has threads: the grid-stride loop.
  const std::int64_t big = 65535LL * 256 + 4099;
  Tensor g = Tensor::empty({big}, DType::i32, Device::cuda(0));
  gpu().fill(g, 0);
  gpu().fill(g, 11);
  auto gv = to_host(g).to_vector<std::int32_t>();
  CHECK(std::count(gv.begin(), gv.end(), 11) == big);

  Tensor empty = Tensor::empty({0}, DType::f32, Device::cuda(0));
  CHECK_NOTHROW(gpu().fill(empty, 1.0));
}

TEST_CASE("cuda matmul matches the CPU backend for every transpose and odd sizes" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  const std::int64_t sizes[] = {1, 7, 65};
  unsigned seed = 100;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto m : sizes)
        for (auto n : sizes)
          for (auto k : sizes) {
            CAPTURE(ta);
            CAPTURE(tb);
            CAPTURE(m);
            CAPTURE(n);
            CAPTURE(k);
            MatmulArgs args{.transpose_a = ta, .transpose_b = tb, .alpha = tb ? 0.5f : 1.0f};
            Tensor a = random_tensor(operand_shape({}, m, k, ta), seed++);
            Tensor b = random_tensor(operand_shape({}, k, n, tb), seed++);
            check_close(gpu_matmul(a, b, nullptr, args), cpu_matmul(a, b, nullptr, args).to_vector<float>(),
                        1e-4, 1e-5);
          }
  // A larger problem, where cuBLAS picks a tiled kernel.
  Tensor a = random_tensor({257, 300}, 1), b = random_tensor({300, 129}, 2);
  check_close(gpu_matmul(a, b, nullptr, {}), cpu_matmul(a, b, nullptr, {}).to_vector<float>(), 1e-4,
              1e-4);
}

TEST_CASE("cuda batched matmul with equal and broadcast batch axes matches the CPU backend" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  struct Case {
    std::vector<std::int64_t> batch_a, batch_b;
  };
  const Case cases[] = {{{4}, {4}},       {{2, 3}, {2, 3}}, {{3}, {}},         {{}, {5}},
                        {{2, 3}, {3}},    {{2, 1}, {1, 3}}, {{3, 1}, {3, 4}},  {{1, 4}, {3, 1}},
                        {{2, 1, 3}, {1, 1}}};
  unsigned seed = 500;
  for (const auto& c : cases)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        MatmulArgs args{.transpose_a = ta, .transpose_b = tb};
        Tensor a = random_tensor(operand_shape(c.batch_a, 7, 9, ta), seed++);
        Tensor b = random_tensor(operand_shape(c.batch_b, 9, 5, tb), seed++);
        CAPTURE(a.shape().str());
        CAPTURE(b.shape().str());
        CAPTURE(ta);
        CAPTURE(tb);
        check_close(gpu_matmul(a, b, nullptr, args), cpu_matmul(a, b, nullptr, args).to_vector<float>(),
                    1e-4, 1e-5);
      }
}

// 19 columns: the epilogue's element kernel; 20: its four-a-thread one.
TEST_CASE("cuda matmul with bias and activation matches the CPU backend" * doctest::test_suite("gpu") * skip_without_gpu()) {
  const Activation activations[] = {Activation::none, Activation::relu, Activation::gelu_tanh,
                                    Activation::gelu_erf, Activation::tanh, Activation::sigmoid};
  for (std::int64_t cols : {19, 20})
  for (Activation act : activations) {
    Tensor a = random_tensor({2, 17, 33}, 7, -2.0f, 2.0f), b = random_tensor({33, cols}, 8, -2.0f, 2.0f);
    Tensor bias = random_tensor({cols}, 9);
    CAPTURE(cols);
    CAPTURE(std::string(name(act)));
    MatmulArgs args{.activation = act, .alpha = 0.5f};
    check_close(gpu_matmul(a, b, &bias, args), cpu_matmul(a, b, &bias, args).to_vector<float>(),
                1e-4, 1e-5);
    MatmulArgs no_bias{.activation = act};
    check_close(gpu_matmul(a, b, nullptr, no_bias), cpu_matmul(a, b, nullptr, no_bias).to_vector<float>(),
                1e-4, 1e-5);
  }
}

// The mixed-precision Dense layer's product: bf16 operands, a bias in the
// output's dtype (f32, or bf16), ReLU or not. Where
// TESSERA_CUDA_MATMUL_EPILOGUE=cublaslt asks, cuBLASLt adds them as it writes
// (lt_matmul.hpp), rounding a bf16 output once; otherwise a pass after the GEMM.
TEST_CASE("cuda bf16 matmul with a bias, and ReLU, into f32 and bf16 matches the CPU backend" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  const auto& cuda = dynamic_cast<const CudaBackend&>(gpu());
  const char* asked = std::getenv("TESSERA_CUDA_MATMUL_EPILOGUE");
  const bool lt = asked != nullptr && std::string(asked) == "cublaslt";
  const auto [bias16, bias] = bf16_rounded(random_tensor({48}, 43, -1.0f, 1.0f));
  for (bool transpose_a : {false, true})
    for (bool transpose_b : {false, true}) {
      // 128 x 96 by 96 x 48, each stored transposed where asked.
      const Shape as = transpose_a ? Shape{96, 128} : Shape{128, 96}, bs = transpose_b ? Shape{48, 96} : Shape{96, 48};
      const auto [a16, a] = bf16_rounded(random_tensor(as, 41, -2.0f, 2.0f));
      const auto [b16, b] = bf16_rounded(random_tensor(bs, 42, -2.0f, 2.0f));
      for (DType out : {DType::f32, DType::bf16})
        for (Activation act : {Activation::none, Activation::relu}) {
          CAPTURE(transpose_a);
          CAPTURE(transpose_b);
          CAPTURE(std::string(dtype_name(out)));
          CAPTURE(std::string(name(act)));
          const MatmulArgs args{.transpose_a = transpose_a, .transpose_b = transpose_b, .activation = act, .alpha = 0.5f};
          const std::vector<float> expected = cpu_matmul(a, b, &bias, args).to_vector<float>();
          const std::int64_t before = cuda.lt_epilogue_products();
          const Tensor got = gpu_matmul(a16, b16, out == DType::bf16 ? &bias16 : &bias, args, out);
          // Each operand is a cudaMalloc of its own (256-byte aligned): where asked, cuBLASLt takes them all.
          CHECK(cuda.lt_epilogue_products() - before == (lt ? 1 : 0));
          std::vector<float> values(static_cast<std::size_t>(got.numel()));
          for (std::size_t i = 0; i < values.size(); ++i)
            values[i] = out == DType::bf16 ? to_f32(got.data<bf16>()[i]) : got.data<float>()[i];
          if (out == DType::f32)
            check_close(values, expected, 1e-4, 1e-4);
          else
            check_close(values, expected, 1e-2, 2e-2);  // the GEMM's bf16 rounding (and the pass's, where it runs)
        }
    }
}

// Mixed precision's cast fused into a product (fusion.hpp): bf16 operands,
// an f32 bias, an activation, a bf16 out: the f32 result rounded once, as
// the CPU's f32 product then cast, within one rounding where the two GEMMs'
// sums differ in their last bits. cuBLASLt takes no f32 bias of a bf16 out.
TEST_CASE("cuda bf16 matmul into bf16 after an f32 bias and an activation is the f32 result rounded once" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  const auto& cuda = dynamic_cast<const CudaBackend&>(gpu());
  Backend& cpu = backend_for(Device::cpu(0));
  const auto [a16, a] = bf16_rounded(random_tensor({2, 64, 96}, 44, -2.0f, 2.0f));
  const auto [b16, b] = bf16_rounded(random_tensor({96, 40}, 45, -2.0f, 2.0f));
  const Tensor bias = random_tensor({40}, 46, -1.0f, 1.0f);
  for (Activation act : {Activation::none, Activation::relu, Activation::gelu_erf})
    for (bool with_bias : {true, false}) {
      CAPTURE(std::string(name(act)));
      CAPTURE(with_bias);
      if (!with_bias && act == Activation::none) continue;  // no pass: cuBLAS rounds its own sums
      const MatmulArgs args{.activation = act};
      Tensor product = Tensor::empty({2, 64, 40}, DType::f32), expected = Tensor::empty({2, 64, 40}, DType::bf16);
      cpu.matmul(a16, b16, with_bias ? &bias : nullptr, product, args);
      cpu.cast(product, expected);
      const std::int64_t before = cuda.lt_epilogue_products();
      const Tensor got = gpu_matmul(a16, b16, with_bias ? &bias : nullptr, args, DType::bf16);
      CHECK(cuda.lt_epilogue_products() == before);
      const auto want = bf16_bits(expected), have = bf16_bits(got);
      const auto ordered = [](std::uint16_t u) {  // bf16 bits as integers in the order of their values
        return (u & 0x8000u) != 0 ? -static_cast<int>(u & 0x7fffu) : static_cast<int>(u);
      };
      std::int64_t apart = 0, same = 0;
      for (std::size_t i = 0; i < want.size(); ++i) {
        const int ulps = std::abs(ordered(want[i]) - ordered(have[i]));
        apart += ulps > 1;
        same += ulps == 0;
      }
      CHECK(apart == 0);
      CHECK(same > static_cast<std::int64_t>(want.size()) * 9 / 10);
    }
}

TEST_CASE("cuda bf16 matmul accumulates in f32" * doctest::test_suite("gpu") * skip_without_gpu()) {
  // bf16 operands (rounded from f32), against an f32 matmul of the rounded values.
  Tensor a32 = random_tensor({9, 40}, 31), b32 = random_tensor({40, 11}, 32);
  auto [a16, a_rounded] = bf16_rounded(a32);
  auto [b16, b_rounded] = bf16_rounded(b32);
  auto expected = cpu_matmul(a_rounded, b_rounded, nullptr, {}).to_vector<float>();
  check_close(gpu_matmul(a16, b16, nullptr, {}, DType::f32), expected, 1e-4, 1e-5);

  auto out16 = gpu_matmul(a16, b16, nullptr, {}, DType::bf16).to_vector<bf16>();
  std::vector<float> out(out16.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = to_f32(out16[i]);
  check_close(out, expected, 1e-2, 1e-2);  // one bf16 rounding of the result

  // f32 operands into a bf16 output is not a cuBLAS combination.
  Tensor da = to_gpu(a32), db = to_gpu(b32);
  Tensor bad = Tensor::empty({9, 11}, DType::bf16, Device::cuda(0));
  CHECK_THROWS_AS(gpu().matmul(da, db, nullptr, bad), DTypeError);
}

TEST_CASE("cuda matmul with an empty contraction gives zeros plus bias" * doctest::test_suite("gpu") * skip_without_gpu()) {
  Tensor a = Tensor::empty({3, 0}, DType::f32), b = Tensor::empty({0, 4}, DType::f32);
  Tensor bias = Tensor::from_vector<float>({1, -2, 3, -4}, {4});
  auto out = gpu_matmul(a, b, &bias, {.activation = Activation::relu}).to_vector<float>();
  CHECK(out == std::vector<float>{1, 0, 3, 0, 1, 0, 3, 0, 1, 0, 3, 0});
}

// The profile's timer (cuda_op_timer.hpp): events on the stream, read after
// one wait; its event pool is reused from round to round.
TEST_CASE("cuda op timer times each op on the GPU: a 2048^3 matmul longer than a fill" * doctest::test_suite("gpu") *
          skip_without_gpu()) {
  std::unique_ptr<OpTimer> timer = gpu().make_op_timer();
  Tensor a = to_gpu(random_tensor({2048, 2048}, 3));
  Tensor c = Tensor::empty({2048, 2048}, DType::f32, Device::cuda(0));
  Tensor small = Tensor::empty({16}, DType::f32, Device::cuda(0));
  for (int round = 0; round < 2; ++round) {
    CAPTURE(round);
    timer->start();
    gpu().fill(small, 1.0);
    timer->stop();
    timer->start();
    gpu().matmul(a, a, nullptr, c);
    timer->stop();
    timer->start();  // an op that threw: its start alone is dropped
    timer->start();
    gpu().fill(small, 2.0);
    timer->stop();
    const std::vector<double> s = timer->seconds();
    REQUIRE(s.size() == 3);
    CHECK(s[0] > 0.0);
    CHECK(s[2] > 0.0);
    CHECK(s[1] > s[0]);
    CHECK(s[1] > s[2]);
    CHECK(s[1] < 1.0);
    CHECK(timer->seconds().empty());
  }
}

TEST_CASE("cuda matmul checks its operands" * doctest::test_suite("gpu") * skip_without_gpu()) {
  Tensor host = random_tensor({4, 4}, 1);
  Tensor d = to_gpu(host);
  Tensor out = Tensor::empty({4, 4}, DType::f32, Device::cuda(0));
  CHECK_THROWS_AS(gpu().matmul(host, d, nullptr, out), DeviceError);
  Tensor wrong = Tensor::empty({4, 5}, DType::f32, Device::cuda(0));
  CHECK_THROWS_AS(gpu().matmul(d, d, nullptr, wrong), ShapeError);
}

TEST_CASE("cuda allocator counts device memory and names the device when exhausted" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  Allocator& alloc = allocator_for(Device::cuda(0));
  auto before = alloc.stats();
  {
    Tensor t = Tensor::empty({1024}, DType::f32, Device::cuda(0));
    auto during = alloc.stats();
    CHECK(during.allocations == before.allocations + 1);
    CHECK(during.bytes_in_use == before.bytes_in_use + 4096);
  }
  auto after = alloc.stats();
  CHECK(after.frees == before.frees + 1);
  CHECK(after.bytes_in_use == before.bytes_in_use);

  const std::size_t huge = std::size_t{1} << 52;  // 4 PiB
  CHECK_THROWS_WITH_AS(alloc.allocate(huge),
                       doctest::Contains(("out of memory on cuda:0: " + std::to_string(huge)).c_str()),
                       Error);
  // The failure left no error behind: the device still works.
  Tensor t = Tensor::empty({8}, DType::f32, Device::cuda(0));
  gpu().fill(t, 1.0);
  CHECK(to_host(t).to_vector<float>() == std::vector<float>(8, 1.0f));
}

#endif  // TESSERA_HAVE_CUDA
