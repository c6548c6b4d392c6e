// Named layout strategies over a [batch, model] mesh: what `tessera bench
// --layout` sweeps and `type: auto` chooses among.
//   dp    DataParallel: batches split over `batch`, every variable replicated
//   zero  dp with optimizer state and updates split over `batch` (ZeRO-1):
//         gradients reduce-scattered, parameters all-gathered after the update
//   tp    AutoTP over `model` (auto_tp.hpp), batches over `batch`
//   fsdp  each variable's first dimension that `batch` divides split over it
//         (ZeRO-3: weights gathered for use, gradients reduce-scattered,
//         optimizer state split)
#pragma once

#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "distribution/cost_model.hpp"
#include "distribution/distribution.hpp"
#include "engine/variable_store.hpp"
#include "layers/model.hpp"

namespace tessera {

enum class Strategy { dp, zero, tp, fsdp };
std::string_view name(Strategy strategy);
std::optional<Strategy> parse_strategy(std::string_view text);
inline constexpr Strategy kStrategies[] = {Strategy::dp, Strategy::zero, Strategy::tp, Strategy::fsdp};

// `mesh` has axes batch and model; the model's variables are built in `store`.
std::unique_ptr<Distribution> make_strategy(Strategy strategy, const DeviceMesh& mesh, const Model& model,
                                            const VariableStore& store);

// `type: auto`'s candidates and choice (engine/run/auto_choice.hpp makes them):
// per 2-D mesh [B, M] and strategy, the cost model's step time and the
// per-device memory.
struct AutoCandidate {
  std::int64_t batch_devices = 1, model_devices = 1;
  Strategy strategy = Strategy::dp;
  double predicted_seconds = 0;
  std::int64_t memory_bytes = 0;
};
struct AutoChoice {
  std::vector<AutoCandidate> candidates;
  std::optional<std::size_t> chosen;  // none when no candidate fits
};

// Per-device bytes of a partitioned program, bound or not: variable blocks
// (with optimizer state) plus the step workspace of the busiest of this
// process's devices.
std::int64_t device_memory(const SpmdProgram& program);

}  // namespace tessera
