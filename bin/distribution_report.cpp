#include "bin/distribution_report.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <regex>
#include <set>

#include "distribution/collectives/process_group.hpp"

namespace tessera {
namespace {

std::string mib(std::int64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  if (bytes < (1 << 20)) return fmt::format("{:.1f} KiB", static_cast<double>(bytes) / 1024);
  return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / (1 << 20));
}

std::int64_t shard_bytes(const Value& v, const Sharding& s, const DeviceMesh& mesh) {
  return s.local_shape(v.shape, mesh).numel() * static_cast<std::int64_t>(dtype_size(v.dtype));
}

// "optimizer/<param>/<slot>" -> "<param>"; "" for other paths.
std::string parameter_of_state(const std::string& path) {
  const std::string prefix = "optimizer/";
  if (path.rfind(prefix, 0) != 0) return "";
  return path.substr(prefix.size(), path.rfind('/') - prefix.size());
}

}  // namespace

void print_key_match_differences(const LayoutMap& map, const std::vector<std::string>& paths) {
  for (const auto& line : map.other_mode_differences(paths)) fmt::print("note: {}\n", line);
}

void print_auto_choice(const AutoChoice& choice, std::int64_t memory_limit) {
  fmt::print("\nAutomatic choice (the cost model's predicted step; memory per device{}):\n{:<8} {:<10} {:>14} {:>14}\n",
             memory_limit > 0 ? ", budget " + mib(memory_limit) : "", "mesh", "strategy", "predicted ms", "memory");
  for (std::size_t i = 0; i < choice.candidates.size(); ++i) {
    const auto& c = choice.candidates[i];
    fmt::print("{:<8} {:<10} {:>14.2f} {:>14}{}{}\n", std::to_string(c.batch_devices) + "x" + std::to_string(c.model_devices),
               name(c.strategy), c.predicted_seconds * 1e3, mib(c.memory_bytes),
               memory_limit > 0 && c.memory_bytes > memory_limit ? "  over budget" : "",
               choice.chosen == i ? "  <- chosen" : "");
  }
}

void print_auto_tp(const AutoTpPlan& plan) {
  fmt::print("\nAutoTP plan:\n{:<24} {:<22} {:<22} {}\n", "Layer", "Type", "Rule", "Why");
  for (const auto& l : plan.layers) fmt::print("{:<24} {:<22} {:<22} {}\n", l.layer, l.type, l.rule, l.why);
}

void print_sharding(const Distribution& distribution, const SpmdProgram& program,
                    const std::vector<std::string>& output_paths, const AutoTpPlan* auto_tp) {
  const DeviceMesh& mesh = distribution.mesh();
  const Graph& g = program.global();
  fmt::print("\nDistribution: {}\n", distribution.str());
  fmt::print("\n{:<44} {:<22} {:<16} {:<16} {:>12}  {}\n", "Variable", "Layout", "Global shape", "Device shape",
             "Device bytes", "Decided by");
  std::int64_t params = 0, state = 0;
  std::set<std::string> used_keys;
  for (ValueId v : g.variables()) {
    const Value& value = g.value(v);
    const Sharding& s = program.sharding(v);
    std::string decided;
    const std::string param = parameter_of_state(value.name);
    if (!param.empty()) {
      decided = "follows " + param;
      state += shard_bytes(value, s, mesh);
    } else if (auto_tp != nullptr) {
      decided = "AutoTP (the layer's rule above)";
      params += shard_bytes(value, s, mesh);
    } else {
      auto match = distribution.layout_map().match(value.name);
      if (match) used_keys.insert(match->key);
      decided = !match ? "replicated, no key matched" : match->pinned ? "its own layout (the model's layouts:)" : "key '" + match->key + "'";
      params += shard_bytes(value, s, mesh);
    }
    fmt::print("{:<44} {:<22} {:<16} {:<16} {:>12}  {}\n", value.name, s.str(mesh), value.shape.str(),
               s.local_shape(value.shape, mesh).str(), shard_bytes(value, s, mesh), decided);
  }
  for (const auto& path : output_paths)
    if (auto match = distribution.layout_map().match(path)) {
      used_keys.insert(match->key);
      fmt::print("{:<44} {:<22} (activation layout, key '{}')\n", path, match->layout.str(), match->key);
    }
  for (const auto& key : distribution.layout_map().keys())
    if (auto_tp == nullptr && !used_keys.contains(key))
      fmt::print("warning: layout-map key '{}' matches no variable and no layer output (check the paths above)\n", key);
  if (auto_tp == nullptr) {
    std::vector<std::string> paths = output_paths;
    for (ValueId v : g.variables())
      if (parameter_of_state(g.value(v).name).empty()) paths.push_back(g.value(v).name);  // state follows its parameter
    print_key_match_differences(distribution.layout_map(), paths);
  }

  // Gradients are as large as the parameters' blocks once reduced; the
  // workspace holds them with the activations and temporaries of one step.
  std::int64_t workspace = 0;
  for (std::int64_t r = 0; r < mesh.size(); ++r) workspace = std::max(workspace, program.workspace_bytes(static_cast<int>(r)));
  fmt::print("\nPer device (largest): parameters {}, gradients {}, optimizer state {}, step workspace {} "
             "(activations, gradients and temporaries of one training step)\n",
             mib(params), mib(params), mib(state), mib(workspace));

  std::map<std::pair<std::string, std::string>, std::pair<std::int64_t, std::int64_t>> collectives;
  for (const auto& c : program.collectives()) {
    auto& [count, bytes] = collectives[{std::string(collective_name(c.kind)), axes_label(c.mesh_axes, mesh)}];
    ++count;
    bytes += c.bytes;
  }
  fmt::print("\nCollectives of one training step, per device:\n");
  if (collectives.empty()) fmt::print("  none\n");
  for (const auto& [key, value] : collectives)
    fmt::print("  {:<16} over {:<14} {:>4} calls, {} of operands\n", key.first, key.second, value.first, mib(value.second));
}

void print_blocks(const Distribution& distribution, const SpmdProgram& program, const std::string& path) {
  const DeviceMesh& mesh = distribution.mesh();
  const Graph& g = program.global();
  // The variable named `path`, or else the one whose path ends with it (as
  // layout keys are written: "dense/kernel" for "mlp/dense/kernel").
  ValueId found = -1;
  std::vector<std::string> names, ending;
  for (ValueId v : g.variables()) {
    const std::string& name = g.value(v).name;
    names.push_back(name);
    if (name == path) found = v;
    if (name.size() > path.size() && name.ends_with("/" + path)) ending.push_back(name);
  }
  if (found < 0 && ending.size() == 1)
    for (ValueId v : g.variables())
      if (g.value(v).name == ending.front()) found = v;
  if (found < 0) {
    std::string list;
    for (const auto& n : ending.empty() ? names : ending) list += "\n  " + n;
    throw Error("--visualize: " +
                (ending.empty() ? "no variable '" + path + "'; the variables are:" : "'" + path + "' ends several variables' paths; say which:") +
                list);
  }
  const Value& value = g.value(found);
  const Sharding& s = program.sharding(found);
  const Shape block = s.local_shape(value.shape, mesh);
  fmt::print("\n{} {} as {} on {}\n", value.name, value.shape.str(), s.str(mesh), mesh.str());
  // Devices per block, blocks keyed by their start.
  std::map<std::vector<std::int64_t>, std::string> holders;
  for (std::int64_t r = 0; r < mesh.size(); ++r) {
    auto& h = holders[s.block_start(value.shape, mesh, r)];
    h += (h.empty() ? "" : " ") + mesh.devices()[static_cast<std::size_t>(r)].str();
  }
  auto range = [&](int d, std::int64_t start) { return fmt::format("{}:{}", start, start + block[d]); };
  if (value.shape.rank() == 0) {
    fmt::print("  [] on {}\n", holders.begin()->second);
    return;
  }
  if (value.shape.rank() > 2) {
    for (const auto& [start, devices] : holders) {
      std::string index;
      for (int d = 0; d < value.shape.rank(); ++d) index += (d ? ", " : "") + range(d, start[static_cast<std::size_t>(d)]);
      fmt::print("  [{}] on {}\n", index, devices);
    }
    return;
  }
  // A grid: rows are blocks of dimension 0, columns blocks of dimension 1.
  const int rank = value.shape.rank();
  const std::int64_t rows = value.shape[0] / block[0], cols = rank == 2 ? value.shape[1] / block[1] : 1;
  std::size_t width = 12;
  for (const auto& [start, devices] : holders) width = std::max(width, devices.size() + 2);
  fmt::print("{:<14}", "");
  for (std::int64_t c = 0; c < cols; ++c) fmt::print("{:<{}}", rank == 2 ? "[:, " + range(1, c * block[1]) + "]" : "", width);
  fmt::print("\n");
  for (std::int64_t r = 0; r < rows; ++r) {
    fmt::print("{:<14}", "[" + range(0, r * block[0]) + "]");
    for (std::int64_t c = 0; c < cols; ++c) {
      std::vector<std::int64_t> start{r * block[0]};
      if (rank == 2) start.push_back(c * block[1]);
      fmt::print("{:<{}}", holders[start], width);
    }
    fmt::print("\n");
  }
}

std::map<CollectiveAccounting::Key, CollectiveStats> job_collectives(const Communicator& comm, ProcessGroup& processes) {
  auto total = comm.accounting().total();
  const ProcessPlacement where = processes.placement();
  if (!where.multi_process()) return total;
  std::vector<double> sums;  // exact: counts and bytes stay far below 2^53
  for (const auto& [key, s] : total)
    sums.insert(sums.end(), {static_cast<double>(s.calls), static_cast<double>(s.bytes), s.seconds,
                             static_cast<double>(s.inter_process_bytes)});
  const auto keys = static_cast<double>(total.size());
  sums.push_back(keys);
  processes.sum(sums, comm.timeout());
  if (sums.back() != keys * where.processes)
    throw Error("collective accounting: the processes of the job recorded different collectives");
  std::size_t i = 0;
  for (auto& [key, s] : total) {
    s.calls = static_cast<std::int64_t>(sums[i]);
    s.bytes = static_cast<std::int64_t>(sums[i + 1]);
    s.seconds = sums[i + 2];
    s.inter_process_bytes = static_cast<std::int64_t>(sums[i + 3]);
    i += 4;
  }
  return total;
}

void print_collectives(const std::map<CollectiveAccounting::Key, CollectiveStats>& total) {
  if (total.empty()) {
    fmt::print("\nCollectives: none (every value stayed where it was computed)\n");
    return;
  }
  // Jobs of several processes also show what crossed between processes.
  bool processes = false;
  for (const auto& [key, stats] : total) processes |= stats.inter_process_bytes > 0;
  fmt::print("\n{:<16} {:<14} {:>10} {:>14} {:>10}{}\n", "collective", "mesh axes", "calls", "MiB moved", "seconds",
             processes ? fmt::format(" {:>18}", "MiB between procs") : "");
  for (const auto& [key, stats] : total)
    fmt::print("{:<16} {:<14} {:>10} {:>14.2f} {:>10.3f}{}\n", name(key.first), key.second, stats.calls,
               static_cast<double>(stats.bytes) / (1 << 20), stats.seconds,
               processes ? fmt::format(" {:>18.2f}", static_cast<double>(stats.inter_process_bytes) / (1 << 20)) : "");
  fmt::print("(summed over {}devices; bytes are what each device sent, as NCCL's bus bytes)\n",
             processes ? "every process's " : "");
}

}  // namespace tessera
