// bench_update: the optimizer update by the product a^T b (one kernel: the
// weight gradient stays in registers, backends/cpu/update_by_product.cpp)
// against the two calls it replaces (oneDNN's matmul a^T b, then the update
// over the gradient), for Adam and SGD with momentum, in the same run.
//
// The executor fuses a dense layer's weight gradient into its update wherever
// the backend has the kernel; this shows, on the machine at hand, what that
// choice wins. Each repeat runs the four calls once in turn on the same
// arrays (so the state is as warm as the caches keep it, as in a training
// step whose state fits them), and the pair ratio is fused over unfused
// within one repeat: the host's slow minutes move both sides together.
//
//   bench_update                        # the MLP's layers, K = 128, 1 and 2 threads
//   bench_update --shape 64,9216,128    # K,M,N: the CNN's first dense layer
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "backends/backend.hpp"
#include "backends/registry.hpp"
#include "bench/machine_info.hpp"

namespace {

using namespace tessera;

Tensor random_tensor(const Shape& shape, unsigned seed, float low, float high) {
  Tensor t = Tensor::empty(shape, DType::f32);
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> uniform(low, high);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = uniform(generator);
  return t;
}

template <class F>
double milliseconds(F&& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The largest difference between two tensors relative to the largest magnitude of `want`.
double relative_difference(const Tensor& got, const Tensor& want) {
  const float *g = got.data<float>(), *w = want.data<float>();
  double worst = 0, scale = 1e-30;
  for (std::int64_t i = 0; i < got.numel(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(g[i] - w[i])));
    scale = std::max(scale, static_cast<double>(std::abs(w[i])));
  }
  return worst / scale;
}

struct Row {
  double unfused = 0, fused = 0, ratio = 0;  // medians, ms; the median of the pair ratios
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The optimizer update by the product a^T b against oneDNN's matmul and then the update"};
  std::vector<std::string> shapes{"128,784,1024", "128,1024,1024"};
  std::vector<int> threads{1, 2};
  int repeats = 101;
  app.add_option("--shape", shapes, "K,M,N: a [K, M], b [K, N], the parameter [M, N] (repeatable)");
  app.add_option("--threads", threads, "Thread counts");
  app.add_option("--repeats", repeats, "Repeats of the four calls per row")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  std::vector<std::array<std::int64_t, 3>> sizes;  // K, M, N
  for (const std::string& text : shapes) {
    std::int64_t k = 0, m = 0, n = 0;
    if (std::sscanf(text.c_str(), "%ld,%ld,%ld", &k, &m, &n) != 3 || k <= 0 || m <= 0 || n <= 0) {
      fmt::print(stderr, "bench_update: --shape '{}' is not three positive sizes K,M,N\n", text);
      return 2;
    }
    sizes.push_back({k, m, n});
  }

  fmt::print("Update by product against matmul + update, f32; CPU: {}\n", bench::cpu_model());
  fmt::print("  {} repeats per row, the four calls in turn; ms are medians, ratio the median of fused/unfused\n\n",
             repeats);
  fmt::print("  {:>16} {:>7} {:>6}  {:>12} {:>9} {:>6}  {:>12} {:>9} {:>6}  {}\n", "KxMxN", "threads", "", "adam unfused",
             "fused", "ratio", "sgd unfused", "fused", "ratio", "check");
  for (const auto& [k, m, n] : sizes) {
    const std::string text = fmt::format("{}x{}x{}", k, m, n);
    for (int t : threads) {
      set_cpu_device_count(1, t);
      Backend& cpu = backend_for(Device::cpu(0));
      if (!cpu.supports_update_by_product(DType::f32, {k, m}, {k, n})) {
        fmt::print("  {:>16} {:>7}  this CPU or shape has no kernel for the update by product\n", text, t);
        continue;
      }
      const Tensor a = random_tensor({k, m}, 1, -1, 1), b = random_tensor({k, n}, 2, -1, 1);
      Tensor gradient = Tensor::empty({m, n}, DType::f32);
      // Two copies of the state: the unfused calls update one, the fused the other.
      std::vector<Tensor> param, first, second;
      for (int copy = 0; copy < 2; ++copy) {
        param.push_back(random_tensor({m, n}, 3, -1, 1));
        first.push_back(random_tensor({m, n}, 4, -0.1f, 0.1f));
        second.push_back(random_tensor({m, n}, 5, 0, 0.1f));
      }
      const AdamArgs adam{.learning_rate = 1e-4f, .step = 2};
      const SgdArgs sgd{.learning_rate = 1e-4f, .momentum = 0.9f};
      std::vector<double> ms[4], adam_ratio, sgd_ratio;
      for (int r = 0; r < repeats; ++r) {
        const double times[4] = {
            milliseconds([&] {
              cpu.matmul(a, b, nullptr, gradient, {.transpose_a = true});
              cpu.adam_update(param[0], gradient, first[0], second[0], adam);
            }),
            milliseconds([&] { cpu.adam_update_by_product(param[1], a, b, first[1], second[1], adam); }),
            milliseconds([&] {
              cpu.matmul(a, b, nullptr, gradient, {.transpose_a = true});
              cpu.sgd_update(param[0], gradient, first[0], sgd);
            }),
            milliseconds([&] { cpu.sgd_update_by_product(param[1], a, b, first[1], sgd); })};
        for (int i = 0; i < 4; ++i) ms[i].push_back(times[i]);
        adam_ratio.push_back(times[1] / times[0]);
        sgd_ratio.push_back(times[3] / times[2]);
      }
      // Both copies took the same updates from the same start: they agree to rounding.
      const double difference = std::max(relative_difference(param[1], param[0]), relative_difference(first[1], first[0]));
      fmt::print("  {:>16} {:>7} {:>6}  {:>12.3f} {:>9.3f} {:>6.3f}  {:>12.3f} {:>9.3f} {:>6.3f}  {} ({:.1e})\n",
                 text, t, "", median(ms[0]), median(ms[1]), median(adam_ratio),
                 median(ms[2]), median(ms[3]), median(sgd_ratio), difference < 1e-4 ? "ok" : "DIFFERS", difference);
      if (difference >= 1e-4) return 1;
    }
  }
  fmt::print("\n  ratio < 1: the update by product is faster. check: the two copies of the state, updated\n"
             "  the two ways from the same start, agree (largest difference over the largest value).\n");
}
