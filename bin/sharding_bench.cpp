#include "bin/sharding_bench.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
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
#include "distribution/calibration_cache.hpp"
#include "distribution/collectives/mpi_session.hpp"
#include "distribution/strategies.hpp"
#include "engine/run/run_config.hpp"

namespace tessera {
namespace {

struct MeshShape {
  std::int64_t batch, model;
  std::string str() const { return std::to_string(batch) + "x" + std::to_string(model); }
};

struct Row {
  std::string mesh, layout, chosen;  // chosen: what `auto` picked
  int processes = 1;
  double median_ms = 0, min_ms = 0, max_ms = 0, predicted_ms = 0;
  double samples_per_s = 0, speedup = 0, comm_share = 0;
  std::int64_t peak_bytes = 0, param_bytes = 0;
  std::map<std::string, std::int64_t> bytes_per_step;  // "all_reduce batch" -> bus bytes per device
  std::map<std::string, std::int64_t> predicted_bytes;
  std::int64_t inter_process_bytes = 0;  // per step and device: what crossed between processes
};

nlohmann::json to_json(const Row& r) {
  return {{"mesh", r.mesh}, {"layout", r.layout}, {"chosen", r.chosen}, {"processes", r.processes},
          {"median_ms", r.median_ms}, {"min_ms", r.min_ms}, {"max_ms", r.max_ms}, {"samples_per_s", r.samples_per_s},
          {"speedup", r.speedup}, {"peak_bytes", r.peak_bytes}, {"param_bytes", r.param_bytes},
          {"comm_share", r.comm_share}, {"predicted_ms", r.predicted_ms},
          {"collective_bytes_per_step", r.bytes_per_step}, {"predicted_collective_bytes_per_step", r.predicted_bytes},
          {"inter_process_bytes_per_step", r.inter_process_bytes}};
}

Row row_from_json(const nlohmann::json& j) {
  Row r;
  r.mesh = j.at("mesh"), r.layout = j.at("layout"), r.chosen = j.at("chosen"), r.processes = j.at("processes");
  r.median_ms = j.at("median_ms"), r.min_ms = j.at("min_ms"), r.max_ms = j.at("max_ms");
  r.samples_per_s = j.at("samples_per_s"), r.peak_bytes = j.at("peak_bytes"), r.param_bytes = j.at("param_bytes");
  r.comm_share = j.at("comm_share"), r.predicted_ms = j.at("predicted_ms");
  r.bytes_per_step = j.at("collective_bytes_per_step").get<std::map<std::string, std::int64_t>>();
  r.predicted_bytes = j.at("predicted_collective_bytes_per_step").get<std::map<std::string, std::int64_t>>();
  r.inter_process_bytes = j.at("inter_process_bytes_per_step");
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

// Text for an SVG text node or attribute.
std::string xml_escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string mib(std::int64_t bytes) { return fmt::format("{:.2f}", static_cast<double>(bytes) / (1 << 20)); }

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
    std::int64_t devices = 0;
    for (const auto& m : meshes) devices = std::max(devices, m.batch * m.model);
    if (!o_.devices.empty()) {
      std::vector<Device> set;
      try {
        set = parse_device_set(o_.devices).devices;
      } catch (const DeviceError& e) {
        throw ConfigError(std::string("--devices: ") + e.what());
      }
      if (set.front().kind != DeviceKind::cpu) throw UnsupportedError("tessera bench runs on cpu:N devices for now, not " + o_.devices);
      devices = static_cast<std::int64_t>(set.size());
    }
    for (const auto& m : meshes)
      if (m.batch * m.model > devices)
        throw ConfigError("--mesh " + m.str() + " needs " + std::to_string(m.batch * m.model) + " devices, --devices gives " +
                          std::to_string(devices));
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
    // One device using every core: the synthetic batch, and the speed-up's reference.
    set_cpu_device_count(1, cores_);
    {
      VariableStore store;
      run_.model.build(store, run_.training.seed);
      Trainer trainer(run_.model, run_.training, store);
      Tensor probe = synthetic_batch(run_, store, batch_, Shape{1}).first;
      output_shape_ = trainer.forward(probe).shape();
      std::tie(inputs_, targets_) = synthetic_batch(run_, store, batch_, output_shape_);
      if (o_.mpi_child) return run_child(meshes, layouts, devices);
      total_ = static_cast<int>(meshes.size() * layouts.size() * processes.size()) + 1;
      progress("1 device");
      single_ = time_steps(trainer).median_ms;
    }
    set_cpu_device_count(static_cast<int>(devices), 0);
    threads_ = std::max(1, cores_ / static_cast<int>(devices));
    for (int np : processes) {
      if (np > 1) {  // a child job measures these rows
        progress(std::to_string(np) + " processes: " + o_.meshes + " x " + o_.layouts);
        done_ += static_cast<int>(meshes.size() * layouts.size()) - 1;
        for (const auto& m : meshes)
          if ((m.batch * m.model) % np != 0)
            fmt::print(stderr, "bench --np {}: mesh {} left out ({} processes cannot share its {} devices evenly)\n", np,
                       m.str(), np, m.batch * m.model);
        for (Row& r : run_job(np, devices)) {
          r.speedup = single_ / r.median_ms;
          rows_.push_back(std::move(r));
        }
        continue;
      }
      for (const auto& m : meshes)
        for (const auto& l : layouts) {
          progress(m.str() + " " + l);
          rows_.push_back(measure(m, l));
        }
    }
    if (isatty(STDERR_FILENO)) fmt::print(stderr, "\r\033[K");
    print();
    if (!o_.chart.empty()) write_chart();
    return 0;
  }

 private:
  struct Timing {
    double median_ms, min_ms, max_ms, mean_ms;
  };

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

  Timing time_steps(Trainer& trainer) {
    for (int i = 0; i < o_.warmup; ++i) trainer.train_step(inputs_, targets_);
    if (Communicator* comm = trainer.communicator()) comm->accounting().reset();
    std::vector<double> ms;
    for (int i = 0; i < o_.steps; ++i) {
      auto start = std::chrono::steady_clock::now();
      trainer.train_step(inputs_, targets_);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(ms.begin(), ms.end());
    double sum = 0;
    for (double m : ms) sum += m;
    const std::size_t half = ms.size() / 2;  // an even count's median is the mean of its middle two
    const double median = ms.size() % 2 ? ms[half] : (ms[half - 1] + ms[half]) / 2;
    return {median, ms.front(), ms.back(), sum / static_cast<double>(ms.size())};
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
  double predict(const DeviceMesh& mesh, const std::string& layout) {
    VariableStore store;
    run_.model.build(store, run_.training.seed);
    auto d = distribution(mesh, layout, store);
    Trainer trainer(run_.model, run_.training, store, *d);
    return predict_step(*trainer.sharded_program(batch_), calibration_, threads_).seconds();
  }

  // One process of a job of several (--np): measures the rows whose mesh the
  // job's processes can share, and process 0 prints them as JSON.
  int run_child(const std::vector<MeshShape>& meshes, const std::vector<std::string>& layouts, std::int64_t devices) {
    const ProcessPlacement where = MpiSession::placement();
    set_cpu_device_count(static_cast<int>(devices), 0);
    threads_ = std::max(1, cores_ / static_cast<int>(devices / where.processes));
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& m : meshes)
      for (const auto& l : layouts)
        if ((m.batch * m.model) % where.processes == 0) rows.push_back(to_json(measure(m, l, where)));
    fmt::print("{}\n", rows.dump());
    return 0;
  }

  // Runs this bench as a child job of `np` processes and returns its rows.
  std::vector<Row> run_job(int np, std::int64_t devices) {
    std::vector<std::string> words = {TESSERA_MPIEXEC, "-np", std::to_string(np), "--oversubscribe"};
    if (::geteuid() == 0) words.push_back("--allow-run-as-root");  // CI containers run as root
    char self[4096];
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) throw Error("bench --np: cannot find the tessera program (/proc/self/exe)");
    words.insert(words.end(), {std::string(self, static_cast<std::size_t>(n)), "bench", o_.config, "--mpi-child",
                               "--mesh", o_.meshes, "--layout", o_.layouts, "--devices", "cpu:" + std::to_string(devices),
                               "--steps", std::to_string(o_.steps), "--warmup", std::to_string(o_.warmup)});
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
    std::vector<Row> rows;
    try {
      for (const auto& j : nlohmann::json::parse(output)) rows.push_back(row_from_json(j));
    } catch (const nlohmann::json::exception& e) {
      throw Error("bench --np " + std::to_string(np) + ": the job's output is not its JSON rows (" + e.what() + "): " + output);
    }
    return rows;
  }

  Row measure(const MeshShape& shape, const std::string& layout, const ProcessPlacement& where = {}) {
    DeviceMesh mesh({shape.batch, shape.model}, {"batch", "model"}, cpu_devices(static_cast<int>(shape.batch * shape.model)));
    Row row;
    row.processes = where.processes;
    row.mesh = shape.str();
    row.layout = row.chosen = layout;
    if (layout == "auto") {
      double best = 1e30;
      std::int64_t chosen = 0;
      for (std::size_t i = 0; i < std::size(kStrategies); ++i)
        if (double t = predict(mesh, std::string(name(kStrategies[i]))); t < best) best = t, chosen = static_cast<std::int64_t>(i);
      // In a job of several processes, process 0's choice stands (timings differ per process).
      MpiSession::broadcast_from_first(std::as_writable_bytes(std::span(&chosen, 1)), std::chrono::minutes(1));
      row.chosen = name(kStrategies[static_cast<std::size_t>(chosen)]);
    }
    std::vector<std::int64_t> before;
    for (const auto& d : mesh.devices()) {
      allocator_for(d).reset_peak();
      before.push_back(allocator_for(d).stats().bytes_in_use);
    }
    VariableStore store;
    run_.model.build(store, run_.training.seed);
    auto d = distribution(mesh, row.chosen, store);
    d->set_placement(where);
    Trainer trainer(run_.model, run_.training, store, *d);
    const SpmdProgram& program = *trainer.sharded_program(batch_);
    StepCost cost = predict_step(program, calibration_, threads_);
    row.predicted_ms = cost.seconds() * 1e3;
    row.predicted_bytes = cost.collective_bytes;
    for (ValueId v : program.global().variables()) {
      const Value& value = program.global().value(v);
      if (value.name.rfind("optimizer/", 0) == 0) continue;  // parameters only
      row.param_bytes += program.sharding(v).local_shape(value.shape, mesh).numel() * static_cast<std::int64_t>(dtype_size(value.dtype));
    }
    Timing t = time_steps(trainer);
    row.median_ms = t.median_ms, row.min_ms = t.min_ms, row.max_ms = t.max_ms;
    row.samples_per_s = static_cast<double>(batch_) / (t.median_ms / 1e3);
    row.speedup = single_ / t.median_ms;
    for (std::size_t r = 0; r < mesh.devices().size(); ++r)
      row.peak_bytes = std::max(row.peak_bytes, allocator_for(mesh.devices()[r]).stats().peak_bytes - before[r]);
    const auto& accounting = trainer.communicator()->accounting();
    const double devices = static_cast<double>(mesh.size() / where.processes);  // this process's
    double inter = 0;
    for (const auto& [key, stats] : accounting.total()) {
      row.bytes_per_step[std::string(name(key.first)) + " " + key.second] =
          static_cast<std::int64_t>(std::llround(static_cast<double>(stats.bytes) / o_.steps / devices));
      inter += static_cast<double>(stats.inter_process_bytes);
    }
    row.inter_process_bytes = static_cast<std::int64_t>(std::llround(inter / o_.steps / devices));
    double comm_seconds = 0;
    for (const auto& [key, stats] : accounting.of_rank(where.first_rank(mesh.size()))) comm_seconds += stats.seconds;
    row.comm_share = comm_seconds / o_.steps / (t.mean_ms / 1e3);  // both means: one slow step counts in both
    return row;
  }

  static std::string bytes_text(const std::map<std::string, std::int64_t>& bytes) {
    std::string text;
    for (const auto& [key, b] : bytes)
      if (b > 0) text += (text.empty() ? "" : ", ") + key + " " + mib(b);
    return text.empty() ? "-" : text;
  }

  void print() {
    std::vector<double> predicted, measured;
    for (const auto& r : rows_) predicted.push_back(r.predicted_ms), measured.push_back(r.median_ms);
    const std::optional<double> rho = spearman(predicted, measured);
    const std::string rho_text = rho ? fmt::format("{:.3f}", *rho) : "n/a";
    if (o_.format == "csv") {
      fmt::print("mesh,layout,chosen,median_ms,min_ms,max_ms,samples_per_s,speedup,peak_mib,param_mib,comm_share,predicted_ms,collectives_mib,processes,inter_process_bytes\n");
      for (const auto& r : rows_)
        fmt::print("{},{},{},{:.3f},{:.3f},{:.3f},{:.1f},{:.3f},{},{},{:.3f},{:.3f},\"{}\",{},{}\n", r.mesh, r.layout, r.chosen,
                   r.median_ms, r.min_ms, r.max_ms, r.samples_per_s, r.speedup, mib(r.peak_bytes), mib(r.param_bytes),
                   r.comm_share, r.predicted_ms, bytes_text(r.bytes_per_step), r.processes, r.inter_process_bytes);
      fmt::print("# one device: {:.3f} ms; spearman(predicted, measured) = {}\n", single_, rho_text);
      return;
    }
    if (o_.format == "json") {
      nlohmann::json j{{"config", o_.config}, {"batch", batch_}, {"steps", o_.steps}, {"warmup", o_.warmup},
                       {"one_device_ms", single_}, {"spearman", rho ? nlohmann::json(*rho) : nlohmann::json()},
                       {"rows", nlohmann::json::array()}};
      for (const auto& r : rows_) j["rows"].push_back(to_json(r));
      fmt::print("{}\n", j.dump(2));
      return;
    }
    fmt::print("{}: batch {}, {} timed steps after {} warm-up; one device ({} threads): {:.2f} ms a step\n", o_.config,
               batch_, o_.steps, o_.warmup, cores_, single_);
    fmt::print("{:<6} {:<11} {:>3} {:>9} {:>17} {:>10} {:>7} {:>9} {:>9} {:>6} {:>10}  {}\n", "mesh", "layout", "np",
               "step ms", "min-max", "samples/s", "speedup", "peak MiB", "param MiB", "comm", "predicted",
               "MiB moved per step and device (of it between processes)");
    for (const auto& r : rows_)
      fmt::print("{:<6} {:<11} {:>3} {:>9.2f} {:>8.2f}-{:<8.2f} {:>10.0f} {:>6.2f}x {:>9} {:>9} {:>5.0f}% {:>8.2f}ms  {}{}\n",
                 r.mesh, r.layout == "auto" ? "auto:" + r.chosen : r.layout, r.processes, r.median_ms, r.min_ms, r.max_ms,
                 r.samples_per_s, r.speedup, mib(r.peak_bytes), mib(r.param_bytes), 100 * r.comm_share, r.predicted_ms,
                 bytes_text(r.bytes_per_step), r.processes > 1 ? " (" + mib(r.inter_process_bytes) + ")" : "");
    fmt::print("cost model: Spearman rank correlation of predicted and measured step times {} over {} rows{}\n", rho_text,
               rows_.size(), rho ? "" : " (needs 3 or more rows that differ)");
  }

  // Horizontal bars of samples/s, one per row, with the predicted rate marked.
  void write_chart() {
    const int width = 900, bar_height = 24, left = 150, top = 50;
    const int height = top + static_cast<int>(rows_.size()) * (bar_height + 8) + 40;
    double top_rate = static_cast<double>(batch_) / (single_ / 1e3);
    for (const auto& r : rows_)
      top_rate = std::max({top_rate, r.samples_per_s, static_cast<double>(batch_) / (r.predicted_ms / 1e3)});
    auto x = [&](double rate) { return left + (width - left - 60) * rate / top_rate; };
    std::string svg = fmt::format(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"13\">\n"
        "<text x=\"{}\" y=\"22\" font-size=\"16\">{}: samples/s per sharding (| predicted)</text>\n",
        width, height, left, xml_escaped(o_.config));
    const double one = static_cast<double>(batch_) / (single_ / 1e3);
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#888\" stroke-dasharray=\"4 3\"/>\n"
                       "<text x=\"{0:.1f}\" y=\"{3}\" fill=\"#555\">one device</text>\n",
                       x(one), top - 8, height - 30, height - 14);
    for (std::size_t i = 0; i < rows_.size(); ++i) {
      const Row& r = rows_[i];
      const int y = top + static_cast<int>(i) * (bar_height + 8);
      const double predicted = static_cast<double>(batch_) / (r.predicted_ms / 1e3);
      svg += fmt::format(
          "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{} {}</text>\n"
          "<rect x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"#4a7fb5\"/>\n"
          "<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" stroke=\"#d9534f\" stroke-width=\"3\"/>\n"
          "<text x=\"{:.1f}\" y=\"{}\">{:.0f}</text>\n",
          left - 8, y + 17, r.mesh, r.layout == "auto" ? "auto:" + r.chosen : r.layout, left, y,
          x(r.samples_per_s) - left, bar_height, x(predicted), y - 2, x(predicted), y + bar_height + 2,
          x(r.samples_per_s) + 6, y + 17, r.samples_per_s);
    }
    svg += "</svg>\n";
    std::ofstream out(o_.chart);
    out << svg;
    if (!out) throw Error("cannot write the chart '" + o_.chart + "'");
  }

  const BenchOptions& o_;
  RunConfig run_;
  Calibration calibration_;
  int cores_ = 1, threads_ = 1, done_ = 0, total_ = 0;
  std::int64_t batch_ = 0;
  Shape output_shape_;
  Tensor inputs_, targets_;
  double single_ = 0;
  std::vector<Row> rows_;
};

}  // namespace

int run_sharding_bench(const BenchOptions& options) {
  if (options.steps < 1 || options.warmup < 0) throw ConfigError("--steps must be >= 1 and --warmup >= 0");
  if (options.format != "table" && options.format != "csv" && options.format != "json")
    throw ConfigError("--format: '" + options.format + "' is not table, csv or json");
  return Bench(options).run();
}

}  // namespace tessera
