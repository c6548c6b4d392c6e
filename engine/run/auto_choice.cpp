#include "engine/run/auto_choice.hpp"

#include <algorithm>

#include "distribution/device_mesh.hpp"
#include "distribution/spmd_program.hpp"

namespace tessera {

AutoChoice choose_auto(const Model& model, const TrainingSpec& spec, const std::vector<Device>& devices,
                       const Calibration& calibration, std::int64_t memory_limit) {
  const auto n = static_cast<std::int64_t>(devices.size());
  const int threads = std::max(1, calibration.cores / static_cast<int>(n));
  AutoChoice choice;
  for (std::int64_t b = 1; b <= n; ++b) {
    if (n % b != 0 || spec.batch_size % b != 0) continue;  // every device an equal share of a batch
    DeviceMesh mesh({b, n / b}, {"batch", "model"}, devices);
    for (Strategy strategy : kStrategies) {
      VariableStore store;
      store.defer_values(true);  // priced from shapes: no variable of a candidate is drawn
      model.build(store, spec.seed);
      auto distribution = make_strategy(strategy, mesh, model, store);
      Trainer trainer(model, spec, store, *distribution);
      const std::shared_ptr<const SpmdProgram> planned = trainer.planned_program(spec.batch_size);  // nothing allocated
      const SpmdProgram& program = *planned;
      choice.candidates.push_back({b, n / b, strategy, predict_step(program, calibration, threads).seconds(), device_memory(program)});
    }
  }
  for (std::size_t i = 0; i < choice.candidates.size(); ++i) {
    const auto& c = choice.candidates[i];
    if (memory_limit > 0 && c.memory_bytes > memory_limit) continue;
    if (!choice.chosen || c.predicted_seconds < choice.candidates[*choice.chosen].predicted_seconds) choice.chosen = i;
  }
  return choice;
}

}  // namespace tessera
