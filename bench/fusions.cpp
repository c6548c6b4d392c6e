// bench_fusions: the CPU's fused calls against the separate calls they
// replace, on the machine at hand, in the same run:
//   - the optimizer update by the product a^T b (Adam, and SGD with
//     momentum), against oneDNN's matmul a^T b and then the update over the
//     gradient (backends/cpu/update_by_product.cpp; a dense layer's weight
//     gradient never goes to memory);
//   - a convolution's weight gradient that also sums its bias gradient,
//     against the weight gradient and then the sum of dy (fusion.hpp).
//
// The memory plan fuses where the backend says it pays; this shows what each
// fusion wins here. Each repeat runs a case's two ways in turn, and the
// ratio is the median of fused over separate within a repeat, so the host's
// slow minutes move both sides together. Before each call of the
// convolution's case a 64 MiB buffer is written, so its dy comes from
// memory, as in a training step; the updates' state stays as warm as the
// caches keep it. It fails (exit 1) where the two ways' results disagree.
//
//   bench_fusions                           # the MLP's layers, the CNN's convolution; 1 and 2 threads
//   bench_fusions --shape 64,9216,128       # updates of K,M,N: the CNN's first dense layer
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
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

// One fusion on one shape: its two ways, what runs before each (untimed),
// and the difference of their results once both have run as often.
struct Case {
  std::string name, shape;
  std::function<void()> before, separate, fused;
  std::function<double()> difference;
};

// Prints the case's row; false where the two ways disagree.
bool run_case(const Case& c, int threads, int repeats) {
  std::vector<double> separate, fused, ratio;
  for (int r = 0; r < repeats; ++r) {
    if (c.before) c.before();
    const double s = milliseconds(c.separate);
    if (c.before) c.before();
    const double f = milliseconds(c.fused);
    separate.push_back(s);
    fused.push_back(f);
    ratio.push_back(f / s);
  }
  const double difference = c.difference();
  const bool agree = difference < 1e-4;
  fmt::print("  {:<34} {:>18} {:>7}  {:>11.3f} {:>9.3f} {:>6.3f}  {} ({:.1e})\n", c.name, c.shape, threads,
             median(separate), median(fused), median(ratio), agree ? "ok" : "DIFFERS", difference);
  return agree;
}

// The updates by the product of a [K, M] and b [K, N], Adam then SGD: the
// separate calls update one copy of the state, the fused ones another.
std::vector<Case> update_cases(Backend& cpu, std::int64_t k, std::int64_t m, std::int64_t n) {
  struct State {
    Tensor a, b, gradient;
    std::array<Tensor, 2> param, first, second;  // [0]: the separate calls', [1]: the fused ones'
  };
  auto s = std::make_shared<State>();
  s->a = random_tensor({k, m}, 1, -1, 1);
  s->b = random_tensor({k, n}, 2, -1, 1);
  s->gradient = Tensor::empty({m, n}, DType::f32);
  for (int copy = 0; copy < 2; ++copy) {
    s->param[copy] = random_tensor({m, n}, 3, -1, 1);
    s->first[copy] = random_tensor({m, n}, 4, -0.1f, 0.1f);
    s->second[copy] = random_tensor({m, n}, 5, 0, 0.1f);
  }
  const AdamArgs adam{.learning_rate = 1e-4f, .step = 2};
  const SgdArgs sgd{.learning_rate = 1e-4f, .momentum = 0.9f};
  const std::string shape = fmt::format("{}x{}x{}", k, m, n);
  auto difference = [s] {
    return std::max(relative_difference(s->param[1], s->param[0]), relative_difference(s->first[1], s->first[0]));
  };
  return {Case{"Adam by product / matmul, Adam", shape, nullptr,
               [&cpu, s, adam] {
                 cpu.matmul(s->a, s->b, nullptr, s->gradient, {.transpose_a = true});
                 cpu.adam_update(s->param[0], s->gradient, s->first[0], s->second[0], adam);
               },
               [&cpu, s, adam] { cpu.adam_update_by_product(s->param[1], s->a, s->b, s->first[1], s->second[1], adam); },
               difference},
          Case{"SGD by product / matmul, SGD", shape, nullptr,
               [&cpu, s, sgd] {
                 cpu.matmul(s->a, s->b, nullptr, s->gradient, {.transpose_a = true});
                 cpu.sgd_update(s->param[0], s->gradient, s->first[0], sgd);
               },
               [&cpu, s, sgd] { cpu.sgd_update_by_product(s->param[1], s->a, s->b, s->first[1], sgd); }, difference}};
}

// The reference CNN's second convolution (x [64, 26, 26, 32], 3x3 to 64).
Case conv_bias_case(Backend& cpu) {
  struct State {
    Tensor x, dy, dw, db, summed, evict;
  };
  auto s = std::make_shared<State>();
  s->x = random_tensor({64, 26, 26, 32}, 6, -1, 1);
  s->dy = random_tensor({64, 24, 24, 64}, 7, -1, 1);
  s->dw = Tensor::empty({3, 3, 32, 64}, DType::f32);
  s->db = Tensor::empty({64}, DType::f32);
  s->summed = Tensor::empty({1, 1, 1, 64}, DType::f32);
  s->evict = Tensor::empty({16 * 1024 * 1024}, DType::f32);
  return Case{"conv dw with db / dw, sum of dy", "64x26x26x32 3x3x64", [&cpu, s] { cpu.fill(s->evict, 1.0); },
              [&cpu, s] {
                cpu.conv2d_backward_weights(s->x, s->dy, s->dw, nullptr, {});
                cpu.reduce(ReduceOp::sum, s->dy, s->summed);
              },
              [&cpu, s] { cpu.conv2d_backward_weights(s->x, s->dy, s->dw, &s->db, {}); },
              [s] { return relative_difference(s->db, s->summed.reshape({64})); }};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The CPU's fused calls against the separate calls they replace"};
  std::vector<std::string> shapes{"128,784,1024", "128,1024,1024"};
  std::vector<int> threads{1, 2};
  int repeats = 101;
  app.add_option("--shape", shapes, "K,M,N of the updates: a [K, M], b [K, N], the parameter [M, N] (repeatable)");
  app.add_option("--threads", threads, "Thread counts");
  app.add_option("--repeats", repeats, "Repeats of each case's two ways per row")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  std::vector<std::array<std::int64_t, 3>> sizes;  // K, M, N
  for (const std::string& text : shapes) {
    std::int64_t k = 0, m = 0, n = 0;
    if (std::sscanf(text.c_str(), "%ld,%ld,%ld", &k, &m, &n) != 3 || k <= 0 || m <= 0 || n <= 0) {
      fmt::print(stderr, "bench_fusions: --shape '{}' is not three positive sizes K,M,N\n", text);
      return 2;
    }
    sizes.push_back({k, m, n});
  }

  fmt::print("The CPU's fusions against the separate calls, f32; CPU: {}\n", bench::cpu_model());
  fmt::print("  {} repeats per row, the two ways in turn; ms are medians, ratio the median of fused/separate\n\n",
             repeats);
  fmt::print("  {:<34} {:>18} {:>7}  {:>11} {:>9} {:>6}  {}\n", "fused / separate", "shape", "threads", "separate",
             "fused", "ratio", "check");
  bool agree = true;
  for (int t : threads) {
    set_cpu_device_count(1, t);
    Backend& cpu = backend_for(Device::cpu(0));
    for (const auto& [k, m, n] : sizes) {
      if (!cpu.supports_update_by_product(DType::f32, {k, m}, {k, n})) {
        fmt::print("  {:<34} {:>18} {:>7}  no kernel for the update by product on this CPU or shape\n",
                   "update by product", fmt::format("{}x{}x{}", k, m, n), t);
        continue;
      }
      for (const Case& c : update_cases(cpu, k, m, n)) agree = run_case(c, t, repeats) && agree;
    }
    const Case conv = conv_bias_case(cpu);
    if (cpu.computes_conv_bias_gradient(DType::f32, {64, 26, 26, 32}, {64, 24, 24, 64}, {3, 3, 32, 64}))
      agree = run_case(conv, t, repeats) && agree;
    else
      fmt::print("  {:<34} {:>18} {:>7}  not fused on this CPU\n", conv.name, conv.shape, t);
  }
  fmt::print("\n  ratio < 1: the fused call is faster. check: the results of the two ways agree (largest\n"
             "  difference over the largest value).\n");
  return agree ? 0 : 1;
}
