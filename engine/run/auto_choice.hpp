// `type: auto`: the distribution chosen for the user.
#pragma once

#include <cstdint>
#include <vector>

#include "distribution/cost_model.hpp"
#include "distribution/strategies.hpp"
#include "engine/run/trainer.hpp"

namespace tessera {

// Every 2-D mesh [B, M] of the devices (B * M = their number)
// with every strategy, partitioned (not run) for one training step of
// `spec.batch_size`: the cost model's step time and the per-device memory
// (variable blocks with optimizer state, plus the step workspace). The
// fastest candidate within `memory_limit` bytes (0: no limit) is chosen.
AutoChoice choose_auto(const Model& model, const TrainingSpec& spec, const std::vector<Device>& devices,
                       const Calibration& calibration, std::int64_t memory_limit);

}  // namespace tessera
