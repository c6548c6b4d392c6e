// bench_matmul: Tessera's CPU (oneDNN) f32 matmul against this machine's FP32
// FMA peak, both measured in the same run.
//
// The peak comes from a probe of independent chains of packed FMAs (AVX-512,
// else AVX2+FMA, else scalar, picked at run time), run on 1 and on 2 OpenMP
// threads at once; it is measured before and after the matmuls and the higher
// figure is used, so "% of peak" is never flattered by a noisy probe.
//
// Each thread count runs on its own logical CPU device (cpu:0 with 1 thread,
// cpu:1 with 2, ...): the backend caches a oneDNN primitive per shape, and a
// primitive is made for the thread count current when it was created, so
// reusing one device for several thread counts would time the second count
// with the first count's primitive. `--one-device` does exactly that, to show
// the effect (on shapes that run through oneDNN's sgemm, which keeps no
// primitive, it shows none).
//
//   bench_matmul                 # table
//   bench_matmul --csv           # machine-readable
//   bench_matmul --repeats 50    # at least 50 timed calls per case
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include "backends/registry.hpp"
#include "bench/cpu_use.hpp"
#include "bench/fma_peak.hpp"
#include "bench/machine_info.hpp"

namespace {

using namespace tessera;
using bench::CpuUse;
using namespace tessera::bench;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

const char* dnnl_isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

// ---------------------------------------------------------------------------
// Matmul cases
// ---------------------------------------------------------------------------

struct MatmulShape {
  std::int64_t m, k, n;
};

struct MatmulResult {
  MatmulShape shape{};
  int threads = 0;
  std::string device;
  double first_ms = 0;   // first call: oneDNN primitive creation + first run
  double median_ms = 0;
  double min_ms = 0;
  int iters = 0;
  double gflops = 0;     // from the median time
  double max_rel_error = 0;
  double background = 0;  // other processes' CPU use during the timed calls, in cores
  double cores = 0;       // this process's CPU use meanwhile: the threads oneDNN ran
};

// Largest relative error of 32 sampled output entries against a double dot product.
double spot_check(const Tensor& a, const Tensor& b, const Tensor& out, const MatmulShape& s) {
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  const float* pc = out.data<float>();
  std::mt19937_64 rng(42);
  double worst = 0;
  for (int sample = 0; sample < 32; ++sample) {
    auto i = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(s.m));
    auto j = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(s.n));
    double ref = 0, mag = 0;
    for (std::int64_t p = 0; p < s.k; ++p) {
      double term = static_cast<double>(pa[i * s.k + p]) * pb[p * s.n + j];
      ref += term;
      mag += std::abs(term);
    }
    worst = std::max(worst, std::abs(pc[i * s.n + j] - ref) / std::max(mag, 1e-30));
  }
  return worst;
}

MatmulResult bench_matmul(Device device, int threads, const MatmulShape& s, int min_iters,
                          double min_seconds) {
  Backend& backend = backend_for(device);
  Tensor a = Tensor::empty({s.m, s.k}, DType::f32, device);
  Tensor b = Tensor::empty({s.k, s.n}, DType::f32, device);
  Tensor out = Tensor::empty({s.m, s.n}, DType::f32, device);
  backend.random_uniform(a, 1, 0, -1.0f, 1.0f);
  backend.random_uniform(b, 2, 0, -1.0f, 1.0f);
  backend.fill(out, 0.0);  // touch the output pages before timing

  MatmulResult r;
  r.shape = s;
  r.threads = threads;
  r.device = device.str();
  auto call = [&] {
    auto start = Clock::now();
    backend.matmul(a, b, nullptr, out, MatmulArgs{});
    backend.synchronize();
    return seconds_since(start) * 1e3;
  };
  r.first_ms = call();
  r.max_rel_error = spot_check(a, b, out, s);
  for (int i = 0; i < 3; ++i) call();  // warm-up

  std::vector<double> times;
  CpuUse load;
  auto begin = Clock::now();
  while (static_cast<int>(times.size()) < min_iters || seconds_since(begin) < min_seconds)
    times.push_back(call());
  r.background = load.others();
  r.cores = load.self();
  std::sort(times.begin(), times.end());
  std::size_t n = times.size();
  r.iters = static_cast<int>(n);
  r.median_ms = n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
  r.min_ms = times.front();
  r.gflops = 2.0 * static_cast<double>(s.m * s.k * s.n) / (r.median_ms * 1e-3) / 1e9;
  return r;
}

std::string shape_str(const MatmulShape& s) { return fmt::format("{}x{}x{}", s.m, s.k, s.n); }


}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tessera CPU f32 matmul against this machine's measured FP32 FMA peak"};
  int repeats = 20;
  int peak_repeats = 5;
  double min_seconds = 0.5;
  double probe_seconds = 0.3;
  bool csv = false;
  bool one_device = false;
  std::vector<int> thread_counts{1, 2};
  app.add_option("--repeats", repeats, "Minimum timed matmul calls per case")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--min-time", min_seconds, "Minimum timed seconds per matmul case")
      ->capture_default_str();
  app.add_option("--peak-repeats", peak_repeats, "Peak probe: best of this many measurements")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--probe-time", probe_seconds, "Peak probe: seconds per measurement")
      ->capture_default_str();
  app.add_option("--threads", thread_counts, "Thread counts to measure")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_flag("--csv", csv, "Machine-readable CSV instead of the table");
  app.add_flag("--one-device", one_device,
               "Run every thread count on cpu:0 (reuses primitives made for the first count)");
  CLI11_PARSE(app, argc, argv);

  const std::vector<MatmulShape> shapes{
      {1024, 1024, 1024}, {128, 784, 1024}, {128, 1024, 1024}, {1024, 256, 768}};

  Isa isa = detect_isa();
  auto dnnl_v = dnnl::version();
  if (!csv) {
    fmt::print("Tessera matmul benchmark (f32, oneDNN {}.{}.{}, oneDNN ISA: {})\n", dnnl_v->major,
               dnnl_v->minor, dnnl_v->patch, dnnl_isa_name(dnnl::get_effective_cpu_isa()));
    fmt::print("  CPU: {}\n", cpu_model());
    fmt::print("  logical CPUs: {}, OpenMP max threads: {}, load average: {}\n",
               omp_get_num_procs(), omp_get_max_threads(), first_line_of("/proc/loadavg"));
    fmt::print("  peak probe: {}, {} chains of FMAs, {:.2f} s x best of {}\n", isa_name(isa),
               kFmaChains, probe_seconds, peak_repeats);
  }

  // Peak before the matmuls (the first parallel region also starts the team).
  std::int64_t probe_iters = calibrate_probe(isa, probe_seconds);
  std::vector<PeakResult> peak_before, peak_after;
  for (int t : thread_counts)
    peak_before.push_back(measure_peak(isa, t, probe_iters, peak_repeats));

  // Matmuls: thread count i runs on cpu:i (see the header) unless --one-device.
  std::vector<MatmulResult> results;
  for (std::size_t ti = 0; ti < thread_counts.size(); ++ti) {
    int t = thread_counts[ti];
    Device device = one_device ? Device::cpu(0) : Device::cpu(static_cast<int>(ti));
    set_cpu_device_count(device.index + 1, t);
    for (const auto& s : shapes)
      results.push_back(bench_matmul(device, t, s, repeats, min_seconds));
  }

  for (int t : thread_counts)
    peak_after.push_back(measure_peak(isa, t, probe_iters, peak_repeats));
  std::vector<double> peak(thread_counts.size());
  for (std::size_t i = 0; i < peak.size(); ++i)
    peak[i] = std::max(peak_before[i].gflops, peak_after[i].gflops);
  // Whether this run's threads plus the neighbours' load exceeded the CPUs.
  const int cpus = omp_get_num_procs();
  auto contended = [&](int threads, double background) {
    return threads + background > cpus + 0.1;
  };
  auto peak_for = [&](int threads) {
    for (std::size_t i = 0; i < thread_counts.size(); ++i)
      if (thread_counts[i] == threads) return peak[i];
    return 0.0;
  };

  if (csv) {
    fmt::print("kind,name,m,k,n,threads,device,first_ms,median_ms,min_ms,iters,gflops,peak_gflops,"
               "pct_peak,max_rel_error,background_cores,self_cores\n");
    for (std::size_t i = 0; i < thread_counts.size(); ++i)
      fmt::print("peak,{},,,,{},,,,,,{:.2f},{:.2f},100.0,,{:.2f},\n", isa_name(isa),
                 thread_counts[i], peak[i], peak[i],
                 std::max(peak_before[i].background, peak_after[i].background));
    for (const auto& r : results) {
      double p = peak_for(r.threads);
      fmt::print("matmul,{},{},{},{},{},{},{:.3f},{:.4f},{:.4f},{},{:.2f},{:.2f},{:.1f},{:.2e},"
                 "{:.2f},{:.2f}\n",
                 shape_str(r.shape), r.shape.m, r.shape.k, r.shape.n, r.threads, r.device,
                 r.first_ms, r.median_ms, r.min_ms, r.iters, r.gflops, p, 100.0 * r.gflops / p,
                 r.max_rel_error, r.background, r.cores);
    }
  } else {
    fmt::print("\nMeasured FP32 FMA peak (GFLOP/s; busy = other processes' CPU use, in cores)\n");
    fmt::print("  {:>7}  {:>8} {:>6}  {:>8} {:>6}  {:>8}\n", "threads", "before", "busy", "after",
               "busy", "used");
    bool any_contended = false;
    auto busy = [&](int threads, double background) {
      bool c = contended(threads, background);
      any_contended = any_contended || c;
      return fmt::format("{:>5.2f}{}", background, c ? "*" : " ");
    };
    for (std::size_t i = 0; i < thread_counts.size(); ++i) {
      int t = thread_counts[i];
      int seen = std::min(peak_before[i].threads_seen, peak_after[i].threads_seen);
      fmt::print("  {:>7}  {:>8.1f} {}  {:>8.1f} {}  {:>8.1f}{}\n", t, peak_before[i].gflops,
                 busy(t, peak_before[i].background), peak_after[i].gflops,
                 busy(t, peak_after[i].background), peak[i],
                 seen != t ? fmt::format("  (OpenMP gave only {} threads!)", seen) : "");
    }
    fmt::print("\nTessera CPU matmul, f32, out = a[M,K] @ b[K,N]\n");
    fmt::print("  {:<15} {:>7} {:>6} {:>9} {:>9} {:>9} {:>5} {:>8} {:>7} {:>5} {:>6} {:>5}\n",
               "MxKxN", "threads", "device", "first ms", "median ms", "min ms", "iters", "GFLOP/s",
               "% peak", "cores", "busy", "check");
    for (const auto& s : shapes)
      for (const auto& r : results) {
        if (r.shape.m != s.m || r.shape.k != s.k || r.shape.n != s.n) continue;
        fmt::print(
            "  {:<15} {:>7} {:>6} {:>9.2f} {:>9.3f} {:>9.3f} {:>5} {:>8.1f} {:>6.1f}% {:>5.2f} "
            "{} {:>5}\n",
            shape_str(r.shape), r.threads, r.device, r.first_ms, r.median_ms, r.min_ms, r.iters,
            r.gflops, 100.0 * r.gflops / peak_for(r.threads), r.cores,
            busy(r.threads, r.background), r.max_rel_error < 1e-5 ? "ok" : "BAD");
      }
    fmt::print(
        "  first ms: the first call, which creates the kernel (a oneDNN primitive, or sgemm's code). GFLOP/s and % peak use\n"
        "  the median. cores: CPU time of this process per second of the timed calls (the\n"
        "  threads oneDNN really ran). busy: the same for all other processes. check: 32\n"
        "  sampled outputs against a double-precision dot product.\n");
    if (any_contended)
      fmt::print(
          "  * threads + busy > {} CPUs: other processes competed for the cores, so that figure\n"
          "    is unreliable (rerun on an idle machine, or with a higher priority: nice -n -10).\n",
          cpus);
    fmt::print("\n");
  }

  for (const auto& r : results)
    if (r.shape.m == 1024 && r.shape.k == 1024 && r.shape.n == 1024 && r.threads == 2) {
      double pct = 100.0 * r.gflops / peak_for(2);
      fmt::print("{}1024^3 on 2 threads: {:.1f}% of measured peak (target >= 85%){}{}\n",
                 csv ? "# " : "", pct, pct >= 85.0 ? "" : "  -- BELOW TARGET",
                 contended(r.threads, r.background) ? " [contended: see *]" : "");
    }
  bool bad = std::any_of(results.begin(), results.end(),
                         [](const MatmulResult& r) { return r.max_rel_error >= 1e-5; });
  return bad ? 1 : 0;
}
