// Optimizers (Keras names: sgd, adam, adamw), learning-rate schedules and
// global-norm gradient clipping, appended to a training graph as update ops.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "engine/graph/graph.hpp"
#include "engine/variable_store.hpp"

namespace tessera {

class ConfigNode;

// `schedule:` of an optimizer, by Keras' and optax's names. Every type may
// warm up: the rate rises linearly from learning_rate / warmup_steps to the
// schedule's rate over the first warmup_steps steps; the decay counts its
// steps from there.
//   constant     learning_rate
//   cosine       to min_ratio * learning_rate over decay_steps (CosineDecay)
//   linear       to min_ratio * learning_rate over decay_steps (PolynomialDecay, power 1)
//   exponential  learning_rate * decay_rate^(t / decay_steps), t whole steps of
//                decay_steps with staircase (ExponentialDecay)
//   piecewise    values[i] after boundaries[i-1] steps (PiecewiseConstantDecay:
//                values[0] up to and at step boundaries[0]); values are the rates
struct ScheduleSpec {
  std::string type = "constant";
  std::int64_t warmup_steps = 0;
  std::int64_t decay_steps = 0;   // cosine, linear: 0 is the whole run after warm-up
  double min_ratio = 0.0;         // cosine, linear
  double decay_rate = 0.0;        // exponential
  bool staircase = false;         // exponential
  std::vector<std::int64_t> boundaries;  // piecewise
  std::vector<double> values;            // piecewise: one more than boundaries
};

struct OptimizerSpec {
  std::string type = "adam";
  float learning_rate = 1e-3f;
  float momentum = 0.0f;     // sgd
  bool nesterov = false;     // sgd
  float beta_1 = 0.9f, beta_2 = 0.999f, epsilon = 1e-7f;  // adam(w); Keras' epsilon default
  float weight_decay = 0.0f;  // adamw default 0.004 as Keras
  float global_clipnorm = 0.0f;  // 0: no clipping
  ScheduleSpec schedule;
};

// `training.optimizer`; throws ConfigError naming unknown optimizers and keys.
OptimizerSpec parse_optimizer(ConfigNode node);

// The learning rate of optimizer step `step` (0-based) in a run of `total_steps`,
// before any callback's scaling (ReduceLROnPlateau).
float learning_rate_at(const OptimizerSpec& spec, std::int64_t step, std::int64_t total_steps);

// Appends the update of every parameter from its gradient (clipped first when
// asked). Optimizer state lives in `store` under "optimizer/<path>/<slot>";
// the new graph leaves to bind are appended to `state`.
void append_updates(Graph& graph, const OptimizerSpec& spec,
                    const std::vector<std::pair<std::string, ValueId>>& params,
                    const std::unordered_map<ValueId, ValueId>& grads, VariableStore& store,
                    std::vector<std::pair<std::string, ValueId>>& state);

}  // namespace tessera
