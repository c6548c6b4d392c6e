#include "distribution/strategies.hpp"

#include <algorithm>
#include <array>

#include "distribution/auto_tp.hpp"
#include "distribution/spmd_program.hpp"
#include "engine/core/error.hpp"

namespace tessera {
namespace {

constexpr std::array<std::string_view, 4> kNames = {"dp", "zero", "tp", "fsdp"};

LayoutMap fsdp_layouts(const VariableStore& store, const DeviceMesh& mesh) {
  LayoutMap map;
  const std::int64_t n = mesh.axis_size("batch");
  if (n == 1) return map;
  for (const auto& v : store.variables()) {
    const Shape& s = v.shape();
    for (int d = 0; d < s.rank(); ++d)
      if (s[d] % n == 0) {
        std::vector<std::optional<std::string>> axes(static_cast<std::size_t>(s.rank()));
        axes[static_cast<std::size_t>(d)] = "batch";
        map.add(exact_key(v.path), TensorLayout(std::move(axes)));
        break;
      }
  }
  return map;
}

}  // namespace

std::string_view name(Strategy strategy) { return kNames[static_cast<std::size_t>(strategy)]; }

std::optional<Strategy> parse_strategy(std::string_view text) {
  for (Strategy s : kStrategies)
    if (name(s) == text) return s;
  return std::nullopt;
}

std::unique_ptr<Distribution> make_strategy(Strategy strategy, const DeviceMesh& mesh, const Model& model,
                                            const VariableStore& store) {
  switch (strategy) {
    case Strategy::dp:
      return std::make_unique<DataParallel>(mesh);
    case Strategy::zero: {
      auto dp = std::make_unique<DataParallel>(mesh);
      dp->set_zero(true);
      return dp;
    }
    case Strategy::tp:
      return std::make_unique<ModelParallel>(mesh, plan_auto_tp(model, store, mesh, "model").layout_map(), "batch");
    case Strategy::fsdp:
      return std::make_unique<ModelParallel>(mesh, fsdp_layouts(store, mesh), "batch");
  }
  throw Error("unknown strategy");
}

std::int64_t device_memory(const SpmdProgram& program) {
  std::int64_t blocks = 0;  // every device's blocks have the same shapes
  for (ValueId v : program.global().variables()) {
    const Value& value = program.global().value(v);
    blocks += program.sharding(v).local_shape(value.shape, program.mesh()).numel() * static_cast<std::int64_t>(dtype_size(value.dtype));
  }
  std::int64_t workspace = 0;
  for (int rank : program.local_ranks()) workspace = std::max(workspace, program.workspace_bytes(rank));
  return blocks + workspace;
}

}  // namespace tessera
