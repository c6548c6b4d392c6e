#include "bin/sharding_bench.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <thread>

#include <fmt/core.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "backends/device_set.hpp"
#include "backends/registry.hpp"
#include "bin/bench_chart.hpp"
#include "bin/bench_row.hpp"
#include "distribution/calibration_cache.hpp"
#include "distribution/collectives/mpi_session.hpp"
#include "distribution/strategies.hpp"
#include "engine/run/run_config.hpp"

namespace tessera {
namespace {

// Between two candidates' turns: longer than libgomp spins (by default
// 300000 pauses of a core, a few milliseconds) before its threads sleep.
constexpr std::chrono::milliseconds kPauseBetweenTurns{25};

struct MeshShape {
  std::int64_t batch, model;
  std::string str() const { return std::to_string(batch) + "x" + std::to_string(model); }
};

nlohmann::json to_json(const BenchRow& r) {
  return {{"mesh", r.mesh}, {"layout", r.layout}, {"chosen", r.chosen}, {"processes", r.processes},
          {"median_ms", r.step_ms.median}, {"min_ms", r.step_ms.min}, {"max_ms", r.step_ms.max},
          {"round_ms", r.round_ms}, {"samples_per_s", r.samples_per_s}, {"speedup", r.speedup.median},
          {"speedup_min", r.speedup.min}, {"speedup_max", r.speedup.max}, {"alternated_with_one_device", r.alternated},
          {"peak_bytes", r.peak_bytes}, {"param_bytes", r.param_bytes}, {"comm_share", r.comm_share},
          {"predicted_ms", r.predicted_ms}, {"collective_bytes_per_step", r.bytes_per_step},
          {"predicted_collective_bytes_per_step", r.predicted_bytes}, {"inter_process_bytes_per_step", r.inter_process_bytes},
          {"program", r.program}, {"notes", r.notes}};
}

// A child job's row: its timings as it measured them; the speed-up is the parent's to work out.
BenchRow row_from_json(const nlohmann::json& j) {
  BenchRow r;
  r.mesh = j.at("mesh"), r.layout = j.at("layout"), r.chosen = j.at("chosen"), r.processes = j.at("processes");
  r.round_ms = j.at("round_ms").get<std::vector<double>>();
  r.step_ms = spread_of(r.round_ms);
  r.samples_per_s = j.at("samples_per_s"), r.peak_bytes = j.at("peak_bytes"), r.param_bytes = j.at("param_bytes");
  r.comm_share = j.at("comm_share"), r.predicted_ms = j.at("predicted_ms");
  r.bytes_per_step = j.at("collective_bytes_per_step").get<std::map<std::string, std::int64_t>>();
  r.predicted_bytes = j.at("predicted_collective_bytes_per_step").get<std::map<std::string, std::int64_t>>();
  r.inter_process_bytes = j.at("inter_process_bytes_per_step");
  r.program = j.at("program");
  r.alternated = false;
  return r;
}

// A word for a POSIX shell, in single quotes.
std::string shell_quote(const std::string& word) {
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) items.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return items;
}

// `text` as a whole positive integer, else none ("2x" or "2.9" are not 2).
std::optional<std::int64_t> whole_number(std::string_view text) {
  std::int64_t n = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (error != std::errc() || end != text.data() + text.size() || n < 1) return std::nullopt;
  return n;
}

std::vector<MeshShape> parse_meshes(const std::string& text) {
  std::vector<MeshShape> meshes;
  for (const auto& item : split_list(text)) {
    const auto x = item.find('x');
    const auto b = x == std::string::npos ? std::nullopt : whole_number(std::string_view(item).substr(0, x));
    const auto m = x == std::string::npos ? std::nullopt : whole_number(std::string_view(item).substr(x + 1));
    if (!b || !m || *b > kMaxCpuDevices || *m > kMaxCpuDevices)
      throw ConfigError("--mesh: '" + item + "' is not BATCHxMODEL (say 2x4, each at most " +
                        std::to_string(kMaxCpuDevices) + ")");
    meshes.push_back({*b, *m});
  }
  if (meshes.empty()) throw ConfigError("--mesh: no mesh given (say 1x8,2x4)");
  return meshes;
}

// A synthetic batch the model takes: N(0, 1) features, token ids below the
// vocabulary, and targets of the loss's shape.
std::pair<Tensor, Tensor> synthetic_batch(const RunConfig& run, const VariableStore& store, std::int64_t batch,
                                          const Shape& output) {
  std::mt19937 rng(0);
  const ModelInput& in = run.model.inputs()[0];
  auto dims = in.shape.dims();
  dims.insert(dims.begin(), batch);
  Shape shape(dims);
  std::int64_t vocab = 2;
  for (const auto& v : store.variables())
    if (!v.axis_roles.empty() && v.axis_roles[0] == "vocab") {
      vocab = v.shape()[0];
      break;
    }
  auto random_ids = [&](const Shape& s, std::int64_t below) {
    std::vector<std::int32_t> ids(static_cast<std::size_t>(s.numel()));
    for (auto& id : ids) id = static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(below));
    return Tensor::from_vector(ids, s);
  };
  auto random_floats = [&](const Shape& s) {
    std::normal_distribution<float> normal;
    std::vector<float> x(static_cast<std::size_t>(s.numel()));
    for (auto& v : x) v = normal(rng);
    return Tensor::from_vector(x, s);
  };
  Tensor inputs = in.dtype == DType::i32 ? random_ids(shape, vocab) : random_floats(shape);
  Shape target = loss_target_shape(run.training.loss, output);
  Tensor targets = loss_target_dtype(run.training.loss) == DType::i32 ? random_ids(target, output[output.rank() - 1])
                                                                       : random_floats(target);
  return {inputs, targets};
}

// A fingerprint of what a sharded program computes and moves, alike for two
// programs that run the same kernels on the same blocks: a split over a mesh
// axis of size 1 is no split, a collective over such axes moves nothing.
std::string program_fingerprint(const SpmdProgram& program, int threads) {
  const DeviceMesh& mesh = program.mesh();
  auto moving_axes = [&](std::uint32_t axes) {
    for (std::size_t a = 0; a < mesh.shape().size(); ++a)
      if (mesh.shape()[a] == 1) axes &= ~(1u << a);
    return axes;
  };
  std::string text = fmt::format("{} threads {};", fmt::join(mesh.shape(), "x"), threads);
  for (Sharding s : program.partition().sharding) {
    for (int& axis : s.dims)
      if (axis != Sharding::kNone && mesh.shape()[static_cast<std::size_t>(axis)] == 1) axis = Sharding::kNone;
    s.partial = moving_axes(s.partial);
    text += s.str(mesh) + ";";
  }
  for (const PlannedCollective& p : program.collectives())
    if (moving_axes(p.mesh_axes) != 0)
      text += fmt::format("{} {} {} {};", collective_name(p.kind), moving_axes(p.mesh_axes), p.bytes, p.value);
  return fmt::format("{:016x}", std::hash<std::string>{}(text));
}

// Spearman's rank correlation: the Pearson correlation of the ranks, tied
// values sharing their average rank (predictions tie whenever two layouts
// coincide on a mesh, as dp and tp on Nx1). None below 3 rows or when either
// side is constant: no ranking to compare.
std::optional<double> spearman(const std::vector<double>& a, const std::vector<double>& b) {
  auto ranks = [](const std::vector<double>& v) {
    std::vector<std::size_t> order(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](auto x, auto y) { return v[x] < v[y]; });
    std::vector<double> r(v.size());
    for (std::size_t first = 0; first < order.size();) {
      std::size_t last = first;
      while (last + 1 < order.size() && v[order[last + 1]] == v[order[first]]) ++last;
      for (std::size_t i = first; i <= last; ++i) r[order[i]] = (static_cast<double>(first) + static_cast<double>(last)) / 2;
      first = last + 1;
    }
    return r;
  };
  if (a.size() < 3) return std::nullopt;
  const auto ra = ranks(a), rb = ranks(b);
  const double mean = (static_cast<double>(a.size()) - 1) / 2;  // of ranks 0 .. n-1, ties included
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ab += (ra[i] - mean) * (rb[i] - mean);
    aa += (ra[i] - mean) * (ra[i] - mean);
    bb += (rb[i] - mean) * (rb[i] - mean);
  }
  if (aa == 0 || bb == 0) return std::nullopt;
  return ab / std::sqrt(aa * bb);
}

std::string mib(std::int64_t bytes) { return fmt::format("{:.2f}", static_cast<double>(bytes) / (1 << 20)); }

// One configuration under test, alive for the whole bench so that the rounds
// can alternate between them: its variables, distribution and trainer.
struct Candidate {
  std::unique_ptr<VariableStore> store = std::make_unique<VariableStore>();
  std::unique_ptr<Distribution> distribution;  // none: the one-device baseline
  std::unique_ptr<Trainer> trainer;
  BenchRow* row = nullptr;                     // where its figures go
  int threads_per_device = 0;                  // 0: the cores shared out among the devices
  std::vector<double> accounted_ms;            // every step of the rounds, the untimed ones too: the mean step
};

class Bench {
 public:
  explicit Bench(const BenchOptions& o) : o_(o), run_(load_run_config(o.config, o.overrides)) {}

  int run() {
    const auto meshes = parse_meshes(o_.meshes);
    const auto layouts = split_list(o_.layouts);
    if (layouts.empty()) throw ConfigError("--layout: no layout given (dp, zero, tp, fsdp, auto, config)");
    for (const auto& l : layouts)
      if (!parse_strategy(l) && l != "auto" && l != "config")
        throw ConfigError("--layout: unknown layout '" + l + "' (dp, zero, tp, fsdp, auto, config)");
    if (std::find(layouts.begin(), layouts.end(), "config") != layouts.end()) check_config_layout();
    devices_ = 0;
    for (const auto& m : meshes) devices_ = std::max(devices_, m.batch * m.model);
    if (!o_.devices.empty()) {
      std::vector<Device> set;
      try {
        set = parse_device_set(o_.devices).devices;
      } catch (const DeviceError& e) {
        throw ConfigError(std::string("--devices: ") + e.what());
      }
      if (set.front().kind != DeviceKind::cpu) throw UnsupportedError("tessera bench runs on cpu:N devices for now, not " + o_.devices);
      devices_ = static_cast<std::int64_t>(set.size());
    }
    for (const auto& m : meshes)
      if (m.batch * m.model > devices_)
        throw ConfigError("--mesh " + m.str() + " needs " + std::to_string(m.batch * m.model) + " devices, --devices gives " +
                          std::to_string(devices_));
    std::vector<int> processes;
    for (const auto& n : split_list(o_.processes)) {
      int np = 0;
      try {
        np = std::stoi(n);
      } catch (const std::exception&) {
      }
      if (np < 1) throw ConfigError("--np: '" + n + "' is not a process count");
      if (np > 1 && !MpiSession::available())
        throw UnsupportedError("--np " + n + " needs MPI, and this tessera was built without it");
      processes.push_back(np);
    }
    calibration_ = cached_calibration(o_.recalibrate);
    cores_ = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    batch_ = run_.training.batch_size;
    if (o_.mpi_child) return run_child(meshes, layouts);

    // The baseline: one device using every core, a candidate like the rows.
    one_device_.mesh = "1", one_device_.layout = fmt::format("one device ({} threads)", cores_);
    Candidate& single = candidates_.emplace_back();
    single.row = &one_device_;
    single.threads_per_device = cores_;
    use_threads(single);
    run_.model.build(*single.store, run_.training.seed);
    single.trainer = std::make_unique<Trainer>(run_.model, run_.training, *single.store);
    make_batch(*single.store, *single.trainer);

    const bool in_process = std::find(processes.begin(), processes.end(), 1) != processes.end();
    const auto jobs = std::count_if(processes.begin(), processes.end(), [](int np) { return np > 1; });
    total_ = 1 + (in_process ? static_cast<int>(meshes.size() * layouts.size()) : 0) + o_.rounds + static_cast<int>(jobs);
    progress("one device: build and warm up");
    warm_up(single);
    if (in_process)
      for (const auto& m : meshes)
        for (const auto& l : layouts) {
          progress(m.str() + " " + l + ": build and warm up");
          prepare(m, l);
        }
    time_rounds();
    for (int np : processes) {
      if (np == 1) continue;
      progress(std::to_string(np) + " processes: " + o_.meshes + " x " + o_.layouts);  // a child job measures these rows
      for (const auto& m : meshes)
        if ((m.batch * m.model) % np != 0)
          fmt::print(stderr, "bench --np {}: mesh {} left out ({} processes cannot share its {} devices evenly)\n", np,
                     m.str(), np, m.batch * m.model);
      for (BenchRow& r : run_job(np)) rows_.push_back(std::move(r));
    }
    if (isatty(STDERR_FILENO)) fmt::print(stderr, "\r\033[K");
    finish_rows();
    print();
    if (!o_.chart.empty()) write_chart();
    return 0;
  }

 private:
  void progress(const std::string& what) {
    ++done_;
    if (isatty(STDERR_FILENO)) {
      const int width = 30, filled = width * (done_ - 1) / total_;
      fmt::print(stderr, "\r\033[K[{}{}] {}/{} {}", std::string(static_cast<std::size_t>(filled), '='),
                 std::string(static_cast<std::size_t>(width - filled), ' '), done_, total_, what);
    } else {
      fmt::print(stderr, "bench {}/{}: {}\n", done_, total_, what);
    }
  }

  // The synthetic batch every candidate trains on, shaped by the model's output.
  void make_batch(const VariableStore& store, Trainer& trainer) {
    Tensor probe = synthetic_batch(run_, store, batch_, Shape{1}).first;
    std::tie(inputs_, targets_) = synthetic_batch(run_, store, batch_, trainer.forward(probe).shape());
  }

  // The candidate's share of the cores: every core on device 0 for the
  // baseline, the cores shared out among the devices for the rows.
  void use_threads(const Candidate& c) { set_cpu_device_count(static_cast<int>(devices_), c.threads_per_device); }

  // --warmup untimed steps, then the collective accounting starts afresh.
  void warm_up(Candidate& c) {
    use_threads(c);
    for (int i = 0; i < o_.warmup; ++i) c.trainer->train_step(inputs_, targets_);
    if (Communicator* comm = c.trainer->communicator()) comm->accounting().reset();
  }

  // Rounds: each times every candidate for --steps steps, in an order that
  // rotates by one each round. Each turn runs one step more, first, that its
  // figure leaves out (it meets the caches the previous candidate left); a
  // round's figure is the median of the others.
  void time_rounds() {
    const std::size_t n = candidates_.size();
    for (int round = 0; round < o_.rounds; ++round) {
      progress(fmt::format("round {} of {}", round + 1, o_.rounds));
      for (std::size_t k = 0; k < n; ++k) {
        Candidate& c = candidates_[(k + static_cast<std::size_t>(round)) % n];
        use_threads(c);
        std::vector<double> ms;
        for (int i = 0; i <= o_.steps; ++i) {
          auto start = std::chrono::steady_clock::now();
          c.trainer->train_step(inputs_, targets_);
          ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
        }
        c.accounted_ms.insert(c.accounted_ms.end(), ms.begin(), ms.end());
        c.row->round_ms.push_back(median_of({ms.begin() + 1, ms.end()}));  // the first step is the untimed one
        // OpenMP's threads spin for a while after their last team (libgomp:
        // milliseconds) before they sleep; a turn of sub-millisecond steps
        // right after would share the cores with that spinning. A pause
        // lets them sleep, so each turn starts from the same idle machine.
        std::this_thread::sleep_for(kPauseBetweenTurns);
      }
    }
    for (Candidate& c : candidates_) {
      c.row->step_ms = spread_of(c.row->round_ms);
      c.row->samples_per_s = static_cast<double>(batch_) / (c.row->step_ms.median / 1e3);
      if (c.distribution) account(c);
    }
  }

  // Bytes moved per step and device, and the communication share of a step,
  // over every accounted step (the rounds' untimed ones included).
  void account(const Candidate& c) {
    BenchRow& row = *c.row;
    const DeviceMesh& mesh = c.distribution->mesh();
    const ProcessPlacement& where = c.distribution->placement();
    const double steps = static_cast<double>(o_.rounds) * (o_.steps + 1);
    const auto& accounting = c.trainer->communicator()->accounting();
    const double devices = static_cast<double>(mesh.size() / where.processes);  // this process's
    double inter = 0;
    for (const auto& [key, stats] : accounting.total()) {
      row.bytes_per_step[std::string(name(key.first)) + " " + key.second] =
          static_cast<std::int64_t>(std::llround(static_cast<double>(stats.bytes) / steps / devices));
      inter += static_cast<double>(stats.inter_process_bytes);
    }
    row.inter_process_bytes = static_cast<std::int64_t>(std::llround(inter / steps / devices));
    double comm_seconds = 0;
    for (const auto& [key, stats] : accounting.of_rank(where.first_rank(mesh.size()))) comm_seconds += stats.seconds;
    double mean_ms = 0;
    for (double ms : c.accounted_ms) mean_ms += ms / static_cast<double>(c.accounted_ms.size());
    row.comm_share = comm_seconds / steps / (mean_ms / 1e3);  // both over the same steps: a slow one counts in both
  }

  // --layout config: the config's own layout map (and ZeRO setting) on each
  // BATCHxMODEL mesh, whose axes are named (batch, model) as the config's must be.
  void check_config_layout() const {
    const DistributionConfig* d = run_.distribution ? &*run_.distribution : nullptr;
    if (!d || d->auto_mesh || !d->auto_tp_axis.empty() ||
        d->distribution->kind() != Distribution::Kind::model_parallel || d->distribution->layout_map().size() == 0)
      throw ConfigError(o_.config + ": --layout config needs the config's distribution: of type model_parallel with a "
                        "layout_map (type auto and auto_tp have rows of their own: --layout auto, tp)");
    const auto& axes = d->distribution->mesh().axis_names();
    if (axes != std::vector<std::string>{"batch", "model"} || d->distribution->batch_dim_name() != "batch")
      throw ConfigError(d->location + ": --layout config runs the layout_map on BATCHxMODEL meshes with axes (batch, "
                        "model), batches split along batch; this config's mesh axes are (" +
                        fmt::format("{}", fmt::join(axes, ", ")) + "), batches along " +
                        d->distribution->batch_dim_name());
  }

  std::unique_ptr<Distribution> distribution(const DeviceMesh& mesh, const std::string& layout, const VariableStore& store) {
    if (auto strategy = parse_strategy(layout)) return make_strategy(*strategy, mesh, run_.model, store);
    const Distribution& config = *run_.distribution->distribution;
    auto d = std::make_unique<ModelParallel>(mesh, config.layout_map(), "batch");
    d->set_zero(config.zero());
    return d;
  }

  // The cost model's prediction for `layout` on `mesh`, partitioning without running.
  double predict(const DeviceMesh& mesh, const std::string& layout, int threads) {
    VariableStore store;
    run_.model.build(store, run_.training.seed);
    auto d = distribution(mesh, layout, store);
    Trainer trainer(run_.model, run_.training, store, *d);
    return predict_step(*trainer.sharded_program(batch_), calibration_, threads).seconds();
  }

  int threads_per_device(const ProcessPlacement& where = {}) const {
    return std::max(1, cores_ / static_cast<int>(devices_ / where.processes));
  }

  // One process of a job of several (--np): prepares the rows whose mesh the
  // job's processes can share, times them in rounds, and process 0 prints them as JSON.
  int run_child(const std::vector<MeshShape>& meshes, const std::vector<std::string>& layouts) {
    const ProcessPlacement where = MpiSession::placement();
    set_cpu_device_count(static_cast<int>(devices_), 0);
    {
      VariableStore store;
      run_.model.build(store, run_.training.seed);
      Trainer trainer(run_.model, run_.training, store);
      make_batch(store, trainer);
    }
    for (const auto& m : meshes)
      for (const auto& l : layouts)
        if ((m.batch * m.model) % where.processes == 0) prepare(m, l, where);
    time_rounds();
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : rows_) rows.push_back(to_json(r));
    fmt::print("{}\n", rows.dump());
    return 0;
  }

  // Runs this bench as a child job of `np` processes and returns its rows.
  std::vector<BenchRow> run_job(int np) {
    std::vector<std::string> words = {TESSERA_MPIEXEC, "-np", std::to_string(np), "--oversubscribe"};
    if (::geteuid() == 0) words.push_back("--allow-run-as-root");  // CI containers run as root
    char self[4096];
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) throw Error("bench --np: cannot find the tessera program (/proc/self/exe)");
    words.insert(words.end(), {std::string(self, static_cast<std::size_t>(n)), "bench", o_.config, "--mpi-child",
                               "--mesh", o_.meshes, "--layout", o_.layouts, "--devices", "cpu:" + std::to_string(devices_),
                               "--steps", std::to_string(o_.steps), "--warmup", std::to_string(o_.warmup),
                               "--rounds", std::to_string(o_.rounds)});
    for (const auto& o : o_.overrides) words.insert(words.end(), {"--set", o});
    std::string command;
    for (const auto& w : words) command += (command.empty() ? "" : " ") + shell_quote(w);
    std::string output;
    {
      std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(command.c_str(), "r"), ::pclose);
      if (!pipe) throw Error("bench --np: cannot run " + command);
      char buffer[4096];
      while (std::size_t got = std::fread(buffer, 1, sizeof buffer, pipe.get())) output.append(buffer, got);
      if (const int status = ::pclose(pipe.release()); status != 0)
        throw Error("bench --np " + std::to_string(np) + ": the job failed (status " + std::to_string(status) +
                    "); its errors are above. Command: " + command);
    }
    std::vector<BenchRow> rows;
    try {
      for (const auto& j : nlohmann::json::parse(output)) rows.push_back(row_from_json(j));
    } catch (const nlohmann::json::exception& e) {
      throw Error("bench --np " + std::to_string(np) + ": the job's output is not its JSON rows (" + e.what() + "): " + output);
    }
    return rows;
  }

  // A row's candidate: builds its trainer and sharded program, records what
  // needs no timing (prediction, parameter bytes, a fingerprint of the
  // program), warms it up and takes its peak memory.
  void prepare(const MeshShape& shape, const std::string& layout, const ProcessPlacement& where = {}) {
    DeviceMesh mesh({shape.batch, shape.model}, {"batch", "model"}, cpu_devices(static_cast<int>(shape.batch * shape.model)));
    BenchRow& row = rows_.emplace_back();
    row.processes = where.processes;
    row.mesh = shape.str();
    row.layout = row.chosen = layout;
    const int threads = threads_per_device(where);
    if (layout == "auto") {
      double best = 1e30;
      std::int64_t chosen = 0;
      for (std::size_t i = 0; i < std::size(kStrategies); ++i)
        if (double t = predict(mesh, std::string(name(kStrategies[i])), threads); t < best) best = t, chosen = static_cast<std::int64_t>(i);
      // In a job of several processes, process 0's choice stands (timings differ per process).
      MpiSession::broadcast_from_first(std::as_writable_bytes(std::span(&chosen, 1)), std::chrono::minutes(1));
      row.chosen = name(kStrategies[static_cast<std::size_t>(chosen)]);
    }
    Candidate& c = candidates_.emplace_back();
    c.row = &row;
    use_threads(c);
    std::vector<std::int64_t> before;
    for (const auto& d : mesh.devices()) {
      allocator_for(d).reset_peak();
      before.push_back(allocator_for(d).stats().bytes_in_use);
    }
    run_.model.build(*c.store, run_.training.seed);
    c.distribution = distribution(mesh, row.chosen, *c.store);
    c.distribution->set_placement(where);
    c.trainer = std::make_unique<Trainer>(run_.model, run_.training, *c.store, *c.distribution);
    const SpmdProgram& program = *c.trainer->sharded_program(batch_);
    StepCost cost = predict_step(program, calibration_, threads);
    row.predicted_ms = cost.seconds() * 1e3;
    row.predicted_bytes = cost.collective_bytes;
    row.program = program_fingerprint(program, threads);
    for (ValueId v : program.global().variables()) {
      const Value& value = program.global().value(v);
      if (value.name.rfind("optimizer/", 0) == 0) continue;  // parameters only
      row.param_bytes += program.sharding(v).local_shape(value.shape, mesh).numel() * static_cast<std::int64_t>(dtype_size(value.dtype));
    }
    warm_up(c);
    for (std::size_t r = 0; r < mesh.devices().size(); ++r)
      row.peak_bytes = std::max(row.peak_bytes, allocator_for(mesh.devices()[r]).stats().peak_bytes - before[r]);
  }

  // Speed-ups against one device, and the notes a reader needs to trust the
  // differences: the best row, rows within its spread, rows that ran the same
  // program, speed-ups whose spread takes in 1x.
  void finish_rows() {
    const Spread& one = one_device_.step_ms;
    for (BenchRow& r : rows_) {
      if (r.alternated) {  // round by round: the same minute of the machine on both sides
        std::vector<double> ratios;
        for (std::size_t i = 0; i < r.round_ms.size(); ++i) ratios.push_back(one_device_.round_ms[i] / r.round_ms[i]);
        r.speedup = spread_of(ratios);
      } else {  // a child job's rows: the baseline's whole spread against the row's
        r.speedup = {one.median / r.step_ms.median, one.min / r.step_ms.max, one.max / r.step_ms.min};
      }
    }
    if (rows_.empty()) return;
    best_ = 0;
    for (std::size_t i = 1; i < rows_.size(); ++i)
      if (rows_[i].step_ms.median < rows_[best_].step_ms.median) best_ = i;
    for (std::size_t i = 0; i < rows_.size(); ++i) {
      BenchRow& r = rows_[i];
      for (std::size_t j = 0; j < i; ++j)
        if (rows_[j].program == r.program && rows_[j].processes == r.processes) {
          r.notes.push_back("same program as " + rows_[j].label());
          break;
        }
      if (i == best_) r.notes.push_back("best");
      else if (r.step_ms.overlaps(rows_[best_].step_ms)) r.notes.push_back("within the best's spread");
      if (r.speedup.contains(1.0)) r.notes.push_back("speed-up within its spread of 1x");
      if (!r.alternated) r.notes.push_back("timed in its own job, not alternated with one device");
    }
  }

  static std::string bytes_text(const std::map<std::string, std::int64_t>& bytes) {
    std::string text;
    for (const auto& [key, b] : bytes)
      if (b > 0) text += (text.empty() ? "" : ", ") + key + " " + mib(b);
    return text.empty() ? "-" : text;
  }

  std::string method() const {
    return fmt::format("{} rounds of {} timed steps after {} warm-up, configurations alternated; median over rounds (min-max)",
                       o_.rounds, o_.steps, o_.warmup);
  }

  void print() {
    std::vector<double> predicted, measured;
    for (const auto& r : rows_) predicted.push_back(r.predicted_ms), measured.push_back(r.step_ms.median);
    const std::optional<double> rho = spearman(predicted, measured);
    const std::string rho_text = rho ? fmt::format("{:.3f}", *rho) : "n/a";
    const Spread& one = one_device_.step_ms;
    if (o_.format == "csv") {
      fmt::print("mesh,layout,chosen,median_ms,min_ms,max_ms,samples_per_s,speedup,speedup_min,speedup_max,peak_mib,"
                 "param_mib,comm_share,predicted_ms,collectives_mib,processes,inter_process_bytes,notes\n");
      for (const auto& r : rows_)
        fmt::print("{},{},{},{:.4f},{:.4f},{:.4f},{:.1f},{:.3f},{:.3f},{:.3f},{},{},{:.3f},{:.4f},\"{}\",{},{},\"{}\"\n", r.mesh,
                   r.layout, r.chosen, r.step_ms.median, r.step_ms.min, r.step_ms.max, r.samples_per_s, r.speedup.median,
                   r.speedup.min, r.speedup.max, mib(r.peak_bytes), mib(r.param_bytes), r.comm_share, r.predicted_ms,
                   bytes_text(r.bytes_per_step), r.processes, r.inter_process_bytes, fmt::join(r.notes, "; "));
      fmt::print("# one device: {:.4f} ms ({:.4f}-{:.4f}); {}; spearman(predicted, measured) = {}\n", one.median, one.min,
                 one.max, method(), rho_text);
      return;
    }
    if (o_.format == "json") {
      nlohmann::json j{{"config", o_.config}, {"batch", batch_}, {"steps", o_.steps}, {"warmup", o_.warmup},
                       {"rounds", o_.rounds}, {"one_device_ms", one.median}, {"one_device_min_ms", one.min},
                       {"one_device_max_ms", one.max}, {"one_device_round_ms", one_device_.round_ms},
                       {"spearman", rho ? nlohmann::json(*rho) : nlohmann::json()}, {"rows", nlohmann::json::array()}};
      for (const auto& r : rows_) j["rows"].push_back(to_json(r));
      fmt::print("{}\n", j.dump(2));
      return;
    }
    fmt::print("{}: batch {}; {}\n", o_.config, batch_, method());
    fmt::print("one device ({} threads): {} ms a step ({}-{})\n", cores_, ms_text(one.median), ms_text(one.min), ms_text(one.max));
    fmt::print("{:<6} {:<11} {:>3} {:>9} {:>17} {:>10} {:>7} {:>11} {:>9} {:>9} {:>6} {:>10}  {}\n", "mesh", "layout", "np",
               "step ms", "min-max", "samples/s", "speedup", "min-max", "peak MiB", "param MiB", "comm", "predicted",
               "MiB moved per step and device (of it between processes)");
    for (const auto& r : rows_) {
      fmt::print("{:<6} {:<11} {:>3} {:>9} {:>8}-{:<8} {:>10.0f} {:>6.2f}x {:>5.2f}-{:<5.2f} {:>9} {:>9} {:>5.0f}% {:>8}ms  {}{}\n",
                 r.mesh, r.layout == "auto" ? "auto:" + r.chosen : r.layout, r.processes, ms_text(r.step_ms.median),
                 ms_text(r.step_ms.min), ms_text(r.step_ms.max), r.samples_per_s, r.speedup.median, r.speedup.min,
                 r.speedup.max, mib(r.peak_bytes), mib(r.param_bytes), 100 * r.comm_share, ms_text(r.predicted_ms),
                 bytes_text(r.bytes_per_step), r.processes > 1 ? " (" + mib(r.inter_process_bytes) + ")" : "");
      if (!r.notes.empty()) fmt::print("{:<22}^ {}\n", "", fmt::join(r.notes, "; "));
    }
    fmt::print("cost model: Spearman rank correlation of predicted and measured step times {} over {} rows{}\n", rho_text,
               rows_.size(), rho ? "" : " (needs 3 or more rows that differ)");
  }

  // Three significant figures at least, so that 0.07 ms does not print as 0.07 next to 67.9.
  static std::string ms_text(double ms) {
    return ms >= 10 ? fmt::format("{:.1f}", ms) : ms >= 1 ? fmt::format("{:.2f}", ms) : fmt::format("{:.3f}", ms);
  }

  void write_chart() {
    BenchChart chart{o_.config, fmt::format("batch {}; {}", batch_, method()), batch_, one_device_, {rows_.begin(), rows_.end()},
                     best_};
    std::ofstream out(o_.chart);
    out << bench_chart_svg(chart);
    if (!out) throw Error("cannot write the chart '" + o_.chart + "'");
  }

  const BenchOptions& o_;
  RunConfig run_;
  Calibration calibration_;
  int cores_ = 1, done_ = 0, total_ = 0;
  std::int64_t batch_ = 0, devices_ = 0;
  Tensor inputs_, targets_;
  BenchRow one_device_;
  std::deque<BenchRow> rows_;          // a deque: candidates point into it as it grows
  std::deque<Candidate> candidates_;   // the baseline first, then the rows measured in this process
  std::size_t best_ = 0;
};

}  // namespace

int run_sharding_bench(const BenchOptions& options) {
  if (options.steps < 1 || options.warmup < 0 || options.rounds < 1)
    throw ConfigError("--steps and --rounds must be >= 1 and --warmup >= 0");
  if (options.format != "table" && options.format != "csv" && options.format != "json")
    throw ConfigError("--format: '" + options.format + "' is not table, csv or json");
  return Bench(options).run();
}

}  // namespace tessera
