// bench_collectives: the shared-memory communicator's all_reduce, all_gather
// and reduce_scatter against this machine's memcpy bandwidth, both measured in
// the same run.
//
// Figures follow nccl-tests: `size` is the larger buffer (all_reduce: in and
// out; all_gather: the output; reduce_scatter: the input), algbw = size / time,
// and busbw = algbw x 2(n-1)/n for all_reduce, x (n-1)/n for all_gather and
// reduce_scatter, the rate a link would need in a ring algorithm; so busbw is
// comparable across rank counts.
//
// The reference is memcpy bandwidth, counted as bytes copied / time (as
// busbw counts each byte once, not its read and its write): one std::memcpy
// of 256 MiB on one thread, best of 5, measured before and after the
// collectives (the higher figure is used, so "% memcpy" is not flattered by a
// slow probe). The same copy split in halves over 2 threads is printed too:
// the collectives on 2 or more ranks use both cores, and on this machine one
// core cannot saturate memory, so the last line also gives that ratio.
//
// Each rank is a thread that owns its buffers (allocated and touched by that
// thread). A timed iteration is a barrier, then the collective; rank 0 times
// the collective, which ends only once every member is done. The time is the
// median over the iterations after one warm-up call.
//
//   bench_collectives                      # table, about 1-2 minutes
//   bench_collectives --quick              # 4 KiB, 1 MiB and 64 MiB only, fewer iterations
//   bench_collectives --sizes 1M,64M --ranks 2 --iters 20
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "bench/cpu_use.hpp"
#include "bench/machine_info.hpp"
#include "distribution/collectives/shm_communicator.hpp"

namespace {

using namespace tessera;
using bench::CpuUse;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// "4K", "64M", "1G" or plain bytes.
std::int64_t parse_size(const std::string& text) {
  std::size_t end = 0;
  std::int64_t value = std::stoll(text, &end);
  std::string suffix = text.substr(end);
  if (suffix.empty() || suffix == "B") return value;
  if (suffix == "K" || suffix == "KiB") return value << 10;
  if (suffix == "M" || suffix == "MiB") return value << 20;
  if (suffix == "G" || suffix == "GiB") return value << 30;
  throw CLI::ValidationError("--sizes", "unknown size suffix in '" + text + "' (use K, M or G)");
}

std::string size_str(std::int64_t bytes) {
  if (bytes >= (1 << 30) && bytes % (1 << 30) == 0) return fmt::format("{} GiB", bytes >> 30);
  if (bytes >= (1 << 20) && bytes % (1 << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= (1 << 10) && bytes % (1 << 10) == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

// ---------------------------------------------------------------------------
// memcpy reference
// ---------------------------------------------------------------------------

struct MemcpyResult {
  double one_thread = 0;   // GB/s, bytes copied / time
  double two_threads = 0;  // both halves at once, all bytes / wall time
};

MemcpyResult measure_memcpy(std::size_t bytes, int repeats) {
  std::vector<char> src(bytes, 1), dst(bytes, 2);  // touched: no page faults in the timing
  MemcpyResult r;
  for (int i = 0; i <= repeats; ++i) {  // the first copy is a warm-up
    auto start = Clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    double s = seconds_since(start);
    if (i > 0) r.one_thread = std::max(r.one_thread, static_cast<double>(bytes) / s / 1e9);
  }
  const std::size_t half = bytes / 2;
  for (int i = 0; i <= repeats; ++i) {
    auto start = Clock::now();
    std::thread other([&] { std::memcpy(dst.data() + half, src.data() + half, bytes - half); });
    std::memcpy(dst.data(), src.data(), half);
    other.join();
    double s = seconds_since(start);
    if (i > 0) r.two_threads = std::max(r.two_threads, static_cast<double>(bytes) / s / 1e9);
  }
  return r;
}

// ---------------------------------------------------------------------------
// Collectives
// ---------------------------------------------------------------------------

using Kind = CollectiveKind;
constexpr Kind kKinds[] = {Kind::all_reduce, Kind::all_gather, Kind::reduce_scatter};

double bus_factor(Kind k, int n) {
  return k == Kind::all_reduce ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n;
}

struct Result {
  Kind kind{};
  int ranks = 0;
  std::int64_t bytes = 0;
  int iters = 0;
  double seconds = 0;  // median
  double algbw = 0, busbw = 0;  // GB/s
  double background = -1;  // other processes' CPU use meanwhile, in cores; -1: too short to tell
};

// /proc/stat counts in 10 ms ticks: shorter spans give no usable CPU figure.
constexpr double kMinLoadSeconds = 0.5;

// Timed iterations for `bytes`: `iters`, fewer for large buffers (about 2 GiB
// of buffer per case), at least 5.
int iterations_for(std::int64_t bytes, int iters) {
  auto budget = static_cast<int>((std::int64_t{2} << 30) / std::max<std::int64_t>(bytes, 1));
  return std::max(std::min(5, iters), std::min(iters, budget));
}

// Runs every kind and size on `n` ranks (threads), rank 0 timing.
std::vector<Result> run_ranks(int n, const std::vector<std::int64_t>& sizes, int iters) {
  ShmCommunicator comm(n);
  CommGroup group;
  for (int r = 0; r < n; ++r) group.ranks.push_back(r);
  group.axes = "world";
  const std::int64_t largest = *std::max_element(sizes.begin(), sizes.end());

  std::vector<Result> results;
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  for (int rank = 0; rank < n; ++rank)
    threads.emplace_back([&, rank] {
      try {
        // Two buffers of the largest size, allocated and touched by this thread.
        const std::int64_t elems = largest / 4;
        Tensor a = Tensor::empty({elems}, DType::f32), b = Tensor::empty({elems}, DType::f32);
        std::memset(a.raw_data(), 0, a.nbytes());
        std::memset(b.raw_data(), 0, b.nbytes());
        for (Kind kind : kKinds)
          for (std::int64_t bytes : sizes) {
            const std::int64_t count = bytes / 4;
            const std::int64_t small = count / n;
            auto view = [](const Tensor& t, std::int64_t c) { return Tensor::view(t.buffer(), 0, Shape{c}, DType::f32); };
            Tensor in = view(a, kind == Kind::all_gather ? small : count);
            Tensor out = view(b, kind == Kind::reduce_scatter ? small : count);
            auto call = [&] {
              switch (kind) {
                case Kind::all_reduce: comm.all_reduce(group, rank, in, out); break;
                case Kind::all_gather: comm.all_gather(group, rank, in, out, 0); break;
                case Kind::reduce_scatter: comm.reduce_scatter(group, rank, in, out, 0); break;
                default: break;  // only the three kinds above are benchmarked
              }
            };
            const int timed = iterations_for(bytes, iters);
            std::vector<double> times;
            comm.barrier(group, rank);
            call();  // warm-up
            CpuUse load;
            const auto begin = Clock::now();
            for (int i = 0; i < timed; ++i) {
              comm.barrier(group, rank);
              auto start = Clock::now();
              call();
              times.push_back(seconds_since(start));
            }
            if (rank == 0) {
              Result r;
              r.kind = kind;
              r.ranks = n;
              r.bytes = bytes;
              r.iters = timed;
              r.seconds = median(times);
              r.algbw = static_cast<double>(bytes) / r.seconds / 1e9;
              r.busbw = r.algbw * bus_factor(kind, n);
              if (seconds_since(begin) >= kMinLoadSeconds) r.background = load.others();
              results.push_back(r);
            }
          }
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(rank)] = e.what();
        comm.abort(fmt::format("rank {} failed: {}", rank, e.what()));
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors)
    if (!e.empty()) throw std::runtime_error(e);
  return results;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tessera shared-memory collectives against this machine's memcpy bandwidth"};
  std::vector<std::string> size_args{"4K", "16K", "64K", "256K", "1M", "4M", "16M", "64M", "256M"};
  std::vector<int> rank_counts{2, 4, 8};
  int iters = 50;
  bool quick = false;
  app.add_option("--sizes", size_args, "Buffer sizes (K, M, G suffixes), comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--ranks", rank_counts, "Rank (thread) counts, comma-separated")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--iters", iters, "Timed iterations per case (fewer for large sizes, at least 5)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_flag("--quick", quick, "4 KiB, 1 MiB and 64 MiB only, at most 10 iterations");
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    if (app.count("--sizes") == 0) size_args = {"4K", "1M", "64M"};
    iters = std::min(iters, 10);
  }

  std::vector<std::int64_t> sizes;
  try {
    for (const auto& s : size_args) {
      std::int64_t bytes = parse_size(s);
      for (int n : rank_counts)
        if (bytes <= 0 || bytes % (4 * n) != 0)
          throw CLI::ValidationError("--sizes", fmt::format("{} is not a positive multiple of 4 x {} ranks", s, n));
      sizes.push_back(bytes);
    }
  } catch (const CLI::Error& e) {
    return app.exit(e);
  }

  const std::size_t memcpy_bytes = std::size_t{256} << 20;
  fmt::print("Tessera shared-memory collectives (f32, sum; threads of one process)\n");
  fmt::print("  CPU: {}, {} logical CPUs, load average: {}\n", bench::cpu_model(), std::thread::hardware_concurrency(),
             bench::first_line_of("/proc/loadavg"));

  MemcpyResult before = measure_memcpy(memcpy_bytes, 5);
  std::vector<Result> results;
  CpuUse run_load;
  for (int n : rank_counts) {
    auto r = run_ranks(n, sizes, iters);
    results.insert(results.end(), r.begin(), r.end());
  }
  const double run_background = run_load.others();
  MemcpyResult after = measure_memcpy(memcpy_bytes, 5);
  const double one = std::max(before.one_thread, after.one_thread);
  const double two = std::max(before.two_threads, after.two_threads);
  const double reference = one;

  fmt::print("  memcpy of {} (bytes copied / time, best of 5 before and after the collectives): {:.2f} GB/s on 1 "
             "thread (the reference), {:.2f} GB/s in halves on 2 threads\n",
             size_str(static_cast<std::int64_t>(memcpy_bytes)), one, two);
  fmt::print("\n  {:<15} {:>5} {:>9} {:>5} {:>11} {:>10} {:>10} {:>9} {:>5}\n", "collective", "ranks", "size", "iters",
             "time (us)", "algbw GB/s", "busbw GB/s", "% memcpy", "busy");
  const double cpus = std::thread::hardware_concurrency();
  bool any_contended = false;
  for (Kind kind : kKinds)
    for (int n : rank_counts)
      for (const auto& r : results) {
        if (r.kind != kind || r.ranks != n) continue;
        const bool contended = r.background >= 0 && std::min<double>(n, cpus) + r.background > cpus + 0.1;
        any_contended = any_contended || contended;
        fmt::print("  {:<15} {:>5} {:>9} {:>5} {:>11.1f} {:>10.2f} {:>10.2f} {:>8.1f}% {:>5}{}\n", name(kind), n,
                   size_str(r.bytes), r.iters, r.seconds * 1e6, r.algbw, r.busbw, 100.0 * r.busbw / reference,
                   r.background >= 0 ? fmt::format("{:.2f}", r.background) : "-", contended ? "*" : "");
      }
  fmt::print("  time: median; algbw = size / time; busbw = algbw x 2(n-1)/n (all_reduce) or x (n-1)/n; "
             "% memcpy = busbw / reference.\n  busy: other processes' CPU use meanwhile, in cores (- where the timed "
             "calls took under {} s);\n  over all the collectives: {:.2f} cores.\n",
             kMinLoadSeconds, run_background);
  if (any_contended)
    fmt::print("  * other processes competed for the {} CPUs: that figure is unreliable.\n", cpus);
  fmt::print("\n");

  bool found = false;
  for (const auto& r : results)
    if (r.kind == Kind::all_reduce && r.ranks == 2 && r.bytes == (std::int64_t{64} << 20)) {
      const double pct = 100.0 * r.busbw / reference;
      fmt::print("all_reduce 64 MiB on 2 ranks: busbw {:.2f} GB/s = {:.1f}% of memcpy (target >= 60%){}; "
                 "{:.1f}% of the 2-thread memcpy\n",
                 r.busbw, pct, pct >= 60.0 ? "" : "  -- BELOW TARGET", 100.0 * r.busbw / two);
      found = true;
    }
  if (!found) fmt::print("all_reduce 64 MiB on 2 ranks: not measured (needs --sizes 64M and --ranks 2)\n");
  return 0;
}
