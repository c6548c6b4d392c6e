// bench_models: training and inference steps of the three reference models
// (shared/REFERENCE_MODELS.md; the zoo's models/mlp.yaml, cnn.yaml, gpt.yaml)
// in Tessera against PyTorch, both measured in the same run.
//
// Per row (model x mode x thread count) both sides time steps on one fixed
// random batch reused every step: classifier inputs N(0, 1) and labels
// uniform in [0, 10), GPT tokens and targets uniform in [0, 256). A training
// step is forward, mean cross-entropy, backward and the reference optimizer's
// update (MLP Adam, CNN SGD with momentum, GPT AdamW); inference is a forward
// pass. --warmup untimed steps, then --steps timed ones; min/median/max ms.
//
// The sides alternate, Tessera, PyTorch, Tessera, PyTorch... (--rounds each),
// and each keeps its round with the best median, so both see the same machine
// state (2-thread figures move by up to 30% with how the vCPUs are placed).
// The ratio is Tessera's median over PyTorch's; the target is <= 1.0.
//
// PyTorch runs as a subprocess, bench/torch_models.py, one per round, with
// Debian's /usr/bin/python3, LD_LIBRARY_PATH at the openblas-openmp folder of
// libopenblas0-openmp (found with dpkg -L) and OPENBLAS_CORETYPE /
// OPENBLAS_L2_SIZE unset (they halve OpenBLAS' speed): see
// shared/REFERENCE_MODELS.md. Its optimizer step runs the faster of PyTorch's
// for-loop and foreach implementations. Without the peer Tessera's rows print
// alone ("peer: unavailable", with how to install it).
//
//   bench_models                                   # table
//   bench_models --models gpt --modes train --threads 1
//   bench_models --csv  |  bench_models --json     # machine-readable
//   bench_models --profile                         # + Tessera's heaviest ops per row
//   bench_models --profile --profile-ops 0         # + every op, with its calls per step
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <nlohmann/json.hpp>
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include "bench/cpu_use.hpp"
#include "bench/core_distance.hpp"
#include "bench/fma_peak.hpp"
#include "bench/machine_info.hpp"
#include "bench/step_times.hpp"
#include "bench/torch_peer.hpp"
#include "bench/zoo_case.hpp"
#include "engine/tessera.hpp"
#include "tests/source_tree.hpp"

namespace {

using namespace tessera;
using bench::CpuUse;
using bench::TorchPeer;
using bench::json_lines;
using bench::last_line;
using bench::run_command;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

// ---------------------------------------------------------------------------
// The reference models
// ---------------------------------------------------------------------------

struct ModelSpec {
  std::string name;           // zoo file models/<name>.yaml
  std::int64_t batch;
  std::int64_t classes;       // labels / tokens are uniform in [0, classes)
  std::string optimizer;      // training.optimizer, YAML
  std::int64_t reference_params;
  double train_gflop, infer_gflop;  // matmul FLOPs of a step (shared/REFERENCE_MODELS.md)
};

const std::vector<ModelSpec>& reference_models() {
  static const std::vector<ModelSpec> models{
      {"mlp", 128, 10, "{type: adam, learning_rate: 1.0e-3, beta_1: 0.9, beta_2: 0.999, epsilon: 1.0e-8}",
       1'863'690, 1.2242, 0.4766},
      {"cnn", 64, 10, "{type: sgd, learning_rate: 0.01, momentum: 0.9}", 1'199'882, 4.5802, 1.5350},
      {"gpt", 8, 256,
       "{type: adamw, learning_rate: 3.0e-4, beta_1: 0.9, beta_2: 0.999, epsilon: 1.0e-8, "
       "weight_decay: 0.01}",
       3'323'392, 21.34, 7.1135},
  };
  return models;
}

const ModelSpec& model_spec(const std::string& name) {
  for (const auto& m : reference_models())
    if (m.name == name) return m;
  throw Error("unknown model '" + name + "' (known: mlp, cnn, gpt)");
}

// ---------------------------------------------------------------------------
// Step statistics
// ---------------------------------------------------------------------------

struct Stats : bench::StepSummary {
  double busy = 0;  // other processes' CPU use meanwhile, in cores
  double cores = 0; // this side's CPU use meanwhile, in cores (Tessera only)
};

// Keeps the round with the lower median.
void keep_best(Stats& best, const Stats& round) {
  if (round.valid() && (!best.valid() || round.median_ms < best.median_ms)) best = round;
}

// ---------------------------------------------------------------------------
// Tessera side
// ---------------------------------------------------------------------------

// The zoo model of `spec` on cpu:0 (bench/zoo_case.hpp).
bench::ZooCase zoo_case(const ModelSpec& spec, const std::filesystem::path& source_dir) {
  return bench::ZooCase(source_dir / "models" / (spec.name + ".yaml"), spec.batch, spec.classes, spec.optimizer);
}

Stats time_tessera(bench::ZooCase& c, bool train, int warmup, int steps) {
  auto step = [&] { c.step(train); };
  for (int i = 0; i < warmup; ++i) step();
  CpuUse load;  // over the timed steps only
  Stats s{bench::summarize_steps(bench::time_steps_ms(step, 0, steps))};
  s.busy = load.others();
  s.cores = load.self();
  return s;
}

// ---------------------------------------------------------------------------
// PyTorch side
// ---------------------------------------------------------------------------

struct PeerRound {
  Stats stats;
  std::int64_t params = 0;
  std::string optimizer;  // "foreach" or "for-loop" (train), "" (infer)
  std::string error;
};

PeerRound time_torch(const TorchPeer& peer, const std::string& model, const std::string& mode, int threads,
                     int warmup, int steps) {
  PeerRound r;
  CpuUse load;
  auto [output, status] = run_command(fmt::format("{} --models {} --modes {} --threads {} --warmup {} --steps {}",
                                                  peer.command("torch_models.py"), model, mode, threads, warmup,
                                                  steps));
  double busy = load.others();
  auto lines = json_lines(output);
  if (status != 0 || lines.empty()) {
    r.error = fmt::format("torch_models.py failed (status {}): {}", status, last_line(output));
    return r;
  }
  const json& j = lines.back();
  r.params = j.value("params", std::int64_t{0});
  if (j.contains("foreach") && j["foreach"].is_boolean())
    r.optimizer = j["foreach"].get<bool>() ? "foreach" : "for-loop";
  r.stats.min_ms = j.value("min_ms", 0.0);
  r.stats.median_ms = j.value("median_ms", 0.0);
  r.stats.max_ms = j.value("max_ms", 0.0);
  r.stats.steps = j.value("steps", 0);
  r.stats.busy = busy;  // over the whole subprocess, start-up included
  return r;
}

// ---------------------------------------------------------------------------
// Rows and output
// ---------------------------------------------------------------------------

struct Row {
  std::string model, mode;
  int threads = 0;
  std::int64_t batch = 0;
  std::int64_t reference_params = 0, tessera_params = 0, torch_params = 0;
  Stats tessera, torch;
  std::string torch_optimizer;  // the PyTorch optimizer implementation of the kept round
  std::string peer_error;
  std::vector<bench::ZooCase::OpTime> ops;  // --profile: Tessera's ms per step by op
  double step_gflop = 0;          // matmul FLOPs of one step
  double peak_gflops = 0;         // the measured FMA peak at this row's threads: the higher probe
  double probe_before = 0, probe_after = 0;  // probes just before and just after the row's rounds
  // The cores' cache-line round trip in ns, with the probes (0 on one thread).
  double round_trip_before = 0, round_trip_after = 0;
  double peer_sgemm_gflops = 0;   // PyTorch's torch.mm 1024^3 at this row's threads
  std::optional<double> ratio() const {
    if (!tessera.valid() || !torch.valid() || torch.median_ms <= 0) return std::nullopt;
    return tessera.median_ms / torch.median_ms;
  }
  // Tessera's step in matmul FLOPs per second, as a share of the FMA peak
  // (by default the row's own).
  double tessera_peak_share() const { return tessera_share_of(peak_gflops); }
  double tessera_share_of(double peak) const {
    return tessera.valid() && peak > 0 ? step_gflop / (tessera.median_ms * 1e-3) / peak : 0;
  }
  double peer_gemm_share() const { return peak_gflops > 0 ? peer_sgemm_gflops / peak_gflops : 0; }
  // A peer whose own GEMM runs far below the peak makes the ratio meaningless.
  bool peer_broken() const { return peer_gemm_share() < bench::kPeerGemmFloor; }
  // Whether the target is met: a ratio <= 1.0 against a peer at its best.
  std::optional<bool> met() const {
    auto r = ratio();
    if (!r) return std::nullopt;
    return *r <= 1.0 && !peer_broken();
  }
  // Where the row's two threads sat (core_distance.hpp): near, far, "moved"
  // when the probes before and after its rounds disagree, or "-".
  std::string cores() const {
    const std::string before = bench::core_placement(round_trip_before);
    const std::string after = bench::core_placement(round_trip_after);
    return before == "-" || after == "-" ? "-" : before == after ? before : "moved";
  }
};

std::string with_commas(std::int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (v < 0 ? "-" : "") + out;
}

std::vector<std::string> param_warnings(const Row& r, bool peer_available) {
  std::vector<std::string> w;
  if (r.tessera_params != r.reference_params)
    w.push_back(fmt::format("{}: Tessera has {} parameters, the reference model {}", r.model,
                            with_commas(r.tessera_params), with_commas(r.reference_params)));
  if (peer_available && r.torch_params != 0 && r.torch_params != r.tessera_params)
    w.push_back(fmt::format("{}: parameter counts differ: Tessera {}, PyTorch {}", r.model,
                            with_commas(r.tessera_params), with_commas(r.torch_params)));
  return w;
}


}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tessera's reference models (MLP, CNN, GPT) against PyTorch, step by step"};
  std::vector<std::string> models{"mlp", "cnn", "gpt"};
  std::vector<std::string> modes{"train", "infer"};
  std::vector<int> thread_counts{1, 2};
  int steps = 30, warmup = 10, rounds = 2, profile_ops = 8;
  bool csv = false, as_json = false, profile = false;
  std::string python = "/usr/bin/python3";
  std::string source_dir = tessera::test::source_dir();
  app.add_option("--models", models, "Models, comma-separated: mlp,cnn,gpt")
      ->delimiter(',')->capture_default_str()->check(CLI::IsMember({"mlp", "cnn", "gpt"}));
  app.add_option("--modes", modes, "Modes, comma-separated: train,infer")
      ->delimiter(',')->capture_default_str()->check(CLI::IsMember({"train", "infer"}));
  app.add_option("--threads", thread_counts, "Thread counts, comma-separated")
      ->delimiter(',')->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "Timed steps per round")->capture_default_str()->check(CLI::PositiveNumber);
  // At least one: Tessera's trainer lives across rounds while each PyTorch
  // round is a fresh process, so a round without warm-up would favour Tessera.
  app.add_option("--warmup", warmup, "Untimed steps before each round (>= 1)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "Rounds per side, alternating; the best median is kept")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_flag("--csv", csv, "CSV instead of the table");
  app.add_flag("--json", as_json, "JSON instead of the table");
  app.add_flag("--profile", profile,
               "Then time Tessera's ops over --steps more steps per row and list the heaviest");
  app.add_option("--profile-ops", profile_ops, "--profile: ops listed per row, a line each with its calls (0: all)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--python", python, "The python3 that has torch (Debian's)")->capture_default_str();
  app.add_option("--source-dir", source_dir, "Tessera's source tree (models/, bench/torch_models.py)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (csv && as_json) {
    fmt::print(stderr, "bench_models: --csv and --json exclude each other\n");
    return 2;
  }
  const bool table = !csv && !as_json;
  const bool progress = isatty(STDERR_FILENO) != 0;

  TorchPeer peer = TorchPeer::find(python, std::filesystem::path(source_dir) / "bench", thread_counts);
  // The yardstick of a row: this machine's FMA peak at its thread count,
  // probed just before its rounds and again just after them; the higher
  // probe counts (a probe that a busy second slowed would flatter the row).
  // The VM's clock moves by 5-6% within minutes (2026-11-29, Zen 5: 531.5
  // GFLOP/s on two threads before a run's rows, 564.7 after them), so each
  // row is measured against the peak of its own minutes; the footer also
  // reads every row against the run's highest probe. The header's probe
  // rates the peer's sgemm.
  const bench::Isa isa = bench::detect_isa();
  const std::int64_t iters = bench::calibrate_probe(isa, 0.3);
  auto probe = [&](int threads, int repeats) { return bench::measure_peak(isa, threads, iters, repeats).gflops; };
  std::map<int, double> peak;
  for (int t : thread_counts) peak[t] = probe(t, 5);
  auto dnnl_v = dnnl::version();
  const std::string load_before = bench::first_line_of("/proc/loadavg");
  if (table) {
    fmt::print("Tessera vs PyTorch: reference models, ms per step (oneDNN {}.{}.{})\n", dnnl_v->major,
               dnnl_v->minor, dnnl_v->patch);
    fmt::print("  CPU: {}; logical CPUs: {}; load average: {}\n", bench::cpu_model(), omp_get_num_procs(), load_before);
    if (peer.available)
      fmt::print("  peer: {}\n", peer.describe());
    else
      fmt::print("  peer: unavailable: {}\n", peer.why);
    for (int t : thread_counts) {
      double sgemm = peer.available && peer.sgemm_gflops.contains(t) ? peer.sgemm_gflops.at(t) : 0.0;
      fmt::print("  {} thread(s): FP32 FMA peak {:.1f} GFLOP/s measured (probed again around each row); "
                 "PyTorch's sgemm 1024^3 {:.1f} GFLOP/s = {:.0f}% of it{}\n",
                 t, peak[t], sgemm, 100 * sgemm / peak[t],
                 peer.available && sgemm < bench::kPeerGemmFloor * peak[t] ? " (under 60%: a broken peer, no row is met)"
                                                                            : "");
    }
    fmt::print("  {} warm-up + {} timed steps per round, {} round(s) per side alternating "
               "(Tessera, PyTorch, ...); the best median of each side is kept\n",
               warmup, steps, rounds);
  }

  std::vector<Row> rows;
  int status = 0;
  try {
    for (const auto& name : models) {
      const ModelSpec& spec = model_spec(name);
      for (const auto& mode : modes)
        for (int threads : thread_counts) {
          Row row;
          row.model = name;
          row.mode = mode;
          row.threads = threads;
          row.batch = spec.batch;
          row.reference_params = spec.reference_params;
          row.step_gflop = mode == "train" ? spec.train_gflop : spec.infer_gflop;
          if (peer.sgemm_gflops.contains(threads)) row.peer_sgemm_gflops = peer.sgemm_gflops.at(threads);
          // cpu:0 gets `threads`; a changed share drops the cached primitives.
          set_cpu_device_count(1, threads);
          bench::ZooCase tessera = zoo_case(spec, source_dir);
          // Inference as an embedder's InferenceModel runs it: weights fixed.
          if (mode == "infer") tessera.trainer->fix_weights();
          row.tessera_params = tessera.params;
          row.probe_before = probe(threads, 3);
          row.round_trip_before = bench::cache_line_round_trip_ns(threads);
          for (int r = 0; r < rounds; ++r) {
            if (progress)
              fmt::print(stderr, "\r  {} {} {} thread(s): round {}/{} Tessera   ", name, mode, threads, r + 1,
                         rounds);
            keep_best(row.tessera, time_tessera(tessera, mode == "train", warmup, steps));
            if (!peer.available || !row.peer_error.empty()) continue;
            if (progress)
              fmt::print(stderr, "\r  {} {} {} thread(s): round {}/{} PyTorch   ", name, mode, threads, r + 1,
                         rounds);
            PeerRound p = time_torch(peer, name, mode, threads, warmup, steps);
            if (!p.error.empty()) {
              row.peer_error = p.error;
              continue;
            }
            row.torch_params = p.params;
            if (!row.torch.valid() || p.stats.median_ms < row.torch.median_ms) row.torch_optimizer = p.optimizer;
            keep_best(row.torch, p.stats);
          }
          row.probe_after = probe(threads, 3);
          row.round_trip_after = bench::cache_line_round_trip_ns(threads);
          row.peak_gflops = std::max(row.probe_before, row.probe_after);
          if (profile) row.ops = tessera.profile(mode == "train", steps);
          if (progress) fmt::print(stderr, "\r{:60}\r", "");
          if (!param_warnings(row, peer.available).empty()) status = 1;
          rows.push_back(std::move(row));
        }
    }
  } catch (const Error& e) {
    fmt::print(stderr, "bench_models: {}\n", e.what());
    return 2;
  }
  std::map<int, double> highest = peak;  // the run's highest probe at each thread count
  for (const Row& row : rows) highest[row.threads] = std::max(highest[row.threads], row.peak_gflops);

  const int cpus = omp_get_num_procs();
  // A little background (this shell, the VM's agent) is normal; a fifth of a
  // core beyond the CPUs is not.
  auto contended = [&](const Stats& s, int threads) { return s.valid() && threads + s.busy > cpus + 0.2; };

  if (csv) {
    fmt::print("model,mode,threads,batch,params_tessera,params_torch,tessera_min_ms,tessera_median_ms,"
               "tessera_max_ms,torch_min_ms,torch_median_ms,torch_max_ms,ratio,target_met,tessera_cores,"
               "tessera_busy,torch_busy,torch_optimizer,steps,warmup,rounds,peer,tessera_pct_peak,peer_sgemm_pct_peak,"
               "peak_gflops,tessera_pct_highest_probe,round_trip_ns_before,round_trip_ns_after,cores\n");
    for (const auto& r : rows) {
      auto ratio = r.ratio();
      std::string peer_state = peer.available ? (r.peer_error.empty() ? "ok" : "failed") : "unavailable";
      fmt::print("{},{},{},{},{},{},{:.3f},{:.3f},{:.3f},{},{},{},{},{},{:.2f},{:.2f},{},{},{},{},{},{},{:.1f},{:.1f},"
                 "{:.1f},{:.1f},{:.0f},{:.0f},{}\n", r.model,
                 r.mode, r.threads, r.batch, r.tessera_params, r.torch.valid() ? std::to_string(r.torch_params) : "",
                 r.tessera.min_ms, r.tessera.median_ms, r.tessera.max_ms,
                 r.torch.valid() ? fmt::format("{:.3f}", r.torch.min_ms) : "",
                 r.torch.valid() ? fmt::format("{:.3f}", r.torch.median_ms) : "",
                 r.torch.valid() ? fmt::format("{:.3f}", r.torch.max_ms) : "",
                 ratio ? fmt::format("{:.3f}", *ratio) : "", r.met() ? (*r.met() ? "1" : "0") : "",
                 r.tessera.cores, r.tessera.busy, r.torch.valid() ? fmt::format("{:.2f}", r.torch.busy) : "",
                 r.torch_optimizer, steps, warmup, rounds, peer_state, 100 * r.tessera_peak_share(),
                 100 * r.peer_gemm_share(), r.peak_gflops, 100 * r.tessera_share_of(highest[r.threads]),
                 r.round_trip_before, r.round_trip_after, r.cores());
    }
    for (const auto& r : rows)
      for (const auto& w : param_warnings(r, peer.available)) fmt::print("# warning: {}\n", w);
    if (!peer.available) fmt::print("# peer: unavailable: {}\n", peer.why);
    return status;
  }

  if (as_json) {
    json out;
    out["cpu"] = bench::cpu_model();
    out["logical_cpus"] = cpus;
    out["load_average"] = load_before;
    out["onednn"] = fmt::format("{}.{}.{}", dnnl_v->major, dnnl_v->minor, dnnl_v->patch);
    out["peer"] = peer.available ? json{{"torch", peer.torch_version}, {"python", python}, {"blas", peer.blas},
                                        {"openblas_core", peer.openblas_core}, {"core_override", peer.core_override}}
                                 : json{{"unavailable", peer.why}};
    out["steps"] = steps;
    out["warmup"] = warmup;
    out["rounds"] = rounds;
    out["rows"] = json::array();
    for (const auto& r : rows) {
      auto stats = [](const Stats& s) {
        return json{{"min_ms", s.min_ms}, {"median_ms", s.median_ms}, {"max_ms", s.max_ms}, {"busy", s.busy}};
      };
      json j{{"model", r.model}, {"mode", r.mode}, {"threads", r.threads}, {"batch", r.batch},
             {"params", {{"reference", r.reference_params}, {"tessera", r.tessera_params}}},
             {"tessera", stats(r.tessera)}};
      j["tessera"]["cores"] = r.tessera.cores;
      j["tessera"]["pct_peak"] = 100 * r.tessera_peak_share();
      j["peak_gflops"] = r.peak_gflops;
      j["peak_probes"] = {r.probe_before, r.probe_after};
      if (r.threads >= 2) {
        j["round_trip_ns"] = {r.round_trip_before, r.round_trip_after};
        j["cores"] = r.cores();
      }
      j["tessera"]["pct_highest_probe"] = 100 * r.tessera_share_of(highest[r.threads]);
      j["peer_sgemm_gflops"] = r.peer_sgemm_gflops;
      if (r.torch.valid()) {
        j["params"]["torch"] = r.torch_params;
        j["torch"] = stats(r.torch);
        if (!r.torch_optimizer.empty()) j["torch"]["optimizer"] = r.torch_optimizer;
      }
      if (!r.peer_error.empty()) j["peer_error"] = r.peer_error;
      if (!r.ops.empty()) {
        j["tessera_ops_ms"] = json::object();
        for (const auto& op : r.ops) j["tessera_ops_ms"][op.op] = op.ms_per_step;
      }
      if (auto ratio = r.ratio()) {
        j["ratio"] = *ratio;
        j["target_met"] = *r.met();
        if (r.peer_broken()) j["peer_broken"] = true;
      }
      auto warnings = param_warnings(r, peer.available);
      if (!warnings.empty()) j["warnings"] = warnings;
      out["rows"].push_back(std::move(j));
    }
    fmt::print("{}\n", out.dump(2));
    return status;
  }

  fmt::print("\n  {:<5} {:<5} {:>7}  {:^36}  {:>9}\n", "", "", "", "-------------- Tessera --------------", "PyTorch");
  fmt::print("  {:<5} {:<5} {:>7}  {:>9} {:>9} {:>9} {:>6}  {:>9}  {:>6} {:>6}  {:>5}  {}\n", "model", "mode",
             "threads", "min ms", "median ms", "max ms", "% peak", "median ms", "ratio", "target", "busy", "cores");
  bool any_contended = false;
  int met = 0, compared = 0;
  for (const auto& r : rows) {
    auto ratio = r.ratio();
    double busy = std::max(r.tessera.busy, r.torch.valid() ? r.torch.busy : 0.0);
    bool c = contended(r.tessera, r.threads) || contended(r.torch, r.threads);
    any_contended = any_contended || c;
    std::string peer_cell = r.torch.valid() ? fmt::format("{:9.2f}", r.torch.median_ms)
                                            : fmt::format("{:>9}", peer.available ? "failed" : "-");
    std::string ratio_cell = ratio ? fmt::format("{:6.2f}", *ratio) : fmt::format("{:>6}", "-");
    std::string target_cell = !ratio ? "-" : r.peer_broken() ? "peer✗" : *r.met() ? "✓" : "✗";
    if (ratio) {
      ++compared;
      met += *r.met();
    }
    fmt::print("  {:<5} {:<5} {:>7}  {:9.2f} {:9.2f} {:9.2f} {:5.0f}%  {}  {} {:>6}  {:5.2f}{:1}  {}\n", r.model,
               r.mode, r.threads, r.tessera.min_ms, r.tessera.median_ms, r.tessera.max_ms,
               100 * r.tessera_peak_share(), peer_cell, ratio_cell, target_cell, busy, c ? "*" : "", r.cores());
    for (const auto& w : param_warnings(r, peer.available)) fmt::print("  ! warning: {}\n", w);
    if (!r.peer_error.empty()) fmt::print("  ! peer: {}\n", r.peer_error);
  }
  std::string probes, strictest, highest_probes, round_trips;
  for (const auto& r : rows) {
    const std::string row = fmt::format("{} {} {}t", r.model, r.mode, r.threads);
    probes += fmt::format("{}{} {:.0f}/{:.0f}", probes.empty() ? "" : ", ", row, r.probe_before, r.probe_after);
    if (r.threads >= 2)
      round_trips += fmt::format("{}{} {:.0f}/{:.0f}", round_trips.empty() ? "" : ", ", row, r.round_trip_before,
                                 r.round_trip_after);
    strictest += fmt::format("{}{} {:.0f}%", strictest.empty() ? "" : ", ", row,
                             100 * r.tessera_share_of(highest[r.threads]));
  }
  for (int t : thread_counts)
    highest_probes += fmt::format("{}{}t {:.1f}", highest_probes.empty() ? "" : ", ", t, highest[t]);
  fmt::print("\n  % peak: the step's matmul FLOPs per second (shared/REFERENCE_MODELS.md) over the measured FMA\n"
             "  peak at the row's threads: the higher of the probes just before and just after its rounds\n"
             "  (GFLOP/s: {}).\n"
             "  Against the run's highest probe ({}): {}.\n"
             "  ratio: Tessera median / PyTorch median (target <= 1.0, met only against a peer whose sgemm\n"
             "  reaches 60% of the peak; peer✗: it did not, a failed measurement).\n"
             "  busy: other processes' CPU use during the kept rounds, in cores.\n",
             probes, highest_probes, strictest);
  if (!round_trips.empty())
    fmt::print("  cores: where a row's two threads sat, from a cache line's round trip between them just before\n"
               "  and just after its rounds (ns: {}): near (under {:.0f} ns) shares a\n"
               "  cache, far does not and slows memory-bound passes 2.4-2.9x, even where the threads share no\n"
               "  line (Zen 5, 2026-12-02; on a Zen 4 the GPT's 2-thread step 108-113 ms near, 128-134 far).\n",
               round_trips, bench::kFarRoundTripNs);
  std::string optimizers;
  for (const auto& r : rows)
    if (!r.torch_optimizer.empty())
      optimizers += fmt::format("{}{}/{}t {}", optimizers.empty() ? "" : ", ", r.model, r.threads,
                                r.torch_optimizer);
  if (!optimizers.empty())
    fmt::print("  PyTorch's optimizer step runs the faster of its for-loop and foreach implementations,\n"
               "  timed briefly per round: {}.\n",
               optimizers);
  if (any_contended)
    fmt::print("  * threads + busy > {} CPUs (+0.2): other processes competed for the cores, so that row\n"
               "    is unreliable (rerun on an idle machine).\n",
               cpus);
  if (!peer.available)
    fmt::print("  peer: unavailable (see above): Tessera's rows only.\n");
  else
    fmt::print("  {} of {} rows meet the target.\n", met, compared);

  if (profile) {
    fmt::print("\nTessera's heaviest ops per step (--profile; {} extra steps per row): ms, share of the ops' total, calls\n",
               steps);
    for (const auto& r : rows) {
      double total = 0;
      for (const auto& op : r.ops) total += op.ms_per_step;
      fmt::print("  {:<5} {:<5} {}t  total {:7.2f} ms\n", r.model, r.mode, r.threads, total);
      const std::size_t listed = profile_ops == 0 ? r.ops.size() : std::min<std::size_t>(r.ops.size(), profile_ops);
      for (std::size_t i = 0; i < listed; ++i)
        fmt::print("    {:8.2f} ms {:4.0f}% {:6.1f} calls  {}\n", r.ops[i].ms_per_step,
                   total > 0 ? 100 * r.ops[i].ms_per_step / total : 0.0, r.ops[i].calls_per_step, r.ops[i].op);
    }
  }
  return status;
}
