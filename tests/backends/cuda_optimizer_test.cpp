// The CUDA backend's optimizer element functions (backends/cuda/optimizer.hpp),
// checked on the host against the CPU backend: SGD (plain, momentum,
// nesterov, weight decay), Adam and AdamW over several steps, and the moving
// average, for 1, 7 and 65537 parameters. The cases at the end (test suite
// "gpu", CUDA builds only) run the kernels.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "backends/cuda/optimizer_steps.hpp"
#include "backends/registry.hpp"
#include "tests/gpu_test_util.hpp"
#include "tests/test_util.hpp"
#include "tessera_features.hpp"

using namespace tessera;
using namespace tessera::test;

namespace {

Backend& cpu() { return backend_for(Device::cpu(0)); }

const std::int64_t kSizes[] = {1, 7, 65537};

std::vector<SgdArgs> sgd_cases() {
  return {{0.1f, 0.0f, false, 0.0f}, {0.1f, 0.9f, false, 0.0f}, {0.05f, 0.9f, true, 1e-2f},
          {0.1f, 0.0f, false, 1e-2f}};
}

std::vector<AdamArgs> adam_cases() {
  AdamArgs adam, adam_l2, adamw;
  adam_l2.weight_decay = 1e-2f;
  adamw.weight_decay = 1e-2f;
  adamw.decoupled_weight_decay = true;
  return {adam, adam_l2, adamw};
}

Tensor copy_of(const Tensor& t) { return Tensor::from_vector(t.to_vector<float>(), t.shape()); }

}  // namespace

TEST_CASE("cuda sgd and adam steps match the CPU backend over three steps") {
  for (std::int64_t n : kSizes) {
    const Shape shape{n};
    for (const SgdArgs& args : sgd_cases()) {
      CAPTURE(n);
      CAPTURE(args.momentum);
      Tensor p = random_tensor(shape, 81), v = random_tensor(shape, 82, -0.1f, 0.1f);
      Tensor hp = copy_of(p), hv = copy_of(v);
      const SgdStep step = make_sgd_step(args);
      for (int s = 0; s < 3; ++s) {
        const Tensor g = random_tensor(shape, 83 + static_cast<unsigned>(s));
        cpu().sgd_update(p, g, v, args);
        for (std::int64_t i = 0; i < n; ++i) step(hp.data<float>(), g.data<float>(), hv.data<float>(), i);
      }
      check_close(hp, p.to_vector<float>(), 1e-6, 1e-7);
      check_close(hv, v.to_vector<float>(), 1e-6, 1e-7);
    }
    for (const AdamArgs& base : adam_cases()) {
      CAPTURE(n);
      CAPTURE(base.decoupled_weight_decay);
      Tensor p = random_tensor(shape, 91), m = zeros(shape), v = zeros(shape);
      Tensor hp = copy_of(p), hm = zeros(shape), hv = zeros(shape);
      for (std::int64_t t = 1; t <= 3; ++t) {
        AdamArgs args = base;
        args.step = t;
        const Tensor g = random_tensor(shape, 92 + static_cast<unsigned>(t));
        cpu().adam_update(p, g, m, v, args);
        const AdamStep step = make_adam_step(args);
        for (std::int64_t i = 0; i < n; ++i)
          step(hp.data<float>(), g.data<float>(), hm.data<float>(), hv.data<float>(), i);
      }
      check_close(hp, p.to_vector<float>(), 1e-6, 1e-7);
      check_close(hm, m.to_vector<float>(), 1e-6, 1e-7);
      check_close(hv, v.to_vector<float>(), 1e-6, 1e-7);
    }
  }
}

TEST_CASE("cuda moving average element matches the CPU backend") {
  for (std::int64_t n : kSizes) {
    Tensor state = random_tensor(Shape{n}, 101);
    const Tensor value = random_tensor(Shape{n}, 102);
    std::vector<float> want = state.to_vector<float>();
    const std::vector<float> values = value.to_vector<float>();
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = moving_average_element(want[i], values[i], 0.9f);
    cpu().moving_average(state, value, 0.9f);
    CHECK(state.to_vector<float>() == want);
  }
}

// --- the kernels on a GPU --------------------------------------------------------

#if TESSERA_HAVE_CUDA

TEST_CASE("cuda backend supports the f32 optimizer updates" * doctest::test_suite("gpu") *
          skip_without_gpu()) {
  for (OpKind k : {OpKind::sgd_update, OpKind::adam_update, OpKind::moving_average})
    CHECK(gpu().supports(k, DType::f32));
}

TEST_CASE("cuda optimizer kernels match the CPU backend over three steps" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  // The device contracts a * b + c into fused multiply-adds: ulp-level differences.
  constexpr double kRtol = 1e-5, kAtol = 1e-6;
  for (std::int64_t n : kSizes) {
    const Shape shape{n};
    for (const SgdArgs& args : sgd_cases()) {
      CAPTURE(n);
      Tensor p = random_tensor(shape, 81), v = random_tensor(shape, 82, -0.1f, 0.1f);
      Tensor gp = to_gpu(p), gv = to_gpu(v);
      for (int s = 0; s < 3; ++s) {
        const Tensor g = random_tensor(shape, 83 + static_cast<unsigned>(s));
        cpu().sgd_update(p, g, v, args);
        gpu().sgd_update(gp, to_gpu(g), gv, args);
      }
      check_close(to_host(gp), p.to_vector<float>(), kRtol, kAtol);
      check_close(to_host(gv), v.to_vector<float>(), kRtol, kAtol);
    }
    for (const AdamArgs& base : adam_cases()) {
      CAPTURE(n);
      Tensor p = random_tensor(shape, 91), m = zeros(shape), v = zeros(shape);
      Tensor gp = to_gpu(p), gm = to_gpu(m), gv = to_gpu(v);
      for (std::int64_t t = 1; t <= 3; ++t) {
        AdamArgs args = base;
        args.step = t;
        const Tensor g = random_tensor(shape, 92 + static_cast<unsigned>(t));
        cpu().adam_update(p, g, m, v, args);
        gpu().adam_update(gp, to_gpu(g), gm, gv, args);
      }
      check_close(to_host(gp), p.to_vector<float>(), kRtol, kAtol);
      check_close(to_host(gm), m.to_vector<float>(), kRtol, kAtol);
      check_close(to_host(gv), v.to_vector<float>(), kRtol, kAtol);
    }
    Tensor state = random_tensor(shape, 101), gstate = to_gpu(state);
    const Tensor value = random_tensor(shape, 102);
    cpu().moving_average(state, value, 0.9f);
    gpu().moving_average(gstate, to_gpu(value), 0.9f);
    check_close(to_host(gstate), state.to_vector<float>(), kRtol, kAtol);
  }
}

#endif  // TESSERA_HAVE_CUDA
