#include "engine/training/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/config/config.hpp"

namespace tessera {
namespace {

const std::vector<std::string> kOptimizers = {"sgd", "adam", "adamw"};

bool positive(double x) { return std::isfinite(x) && x > 0; }
bool non_negative(double x) { return std::isfinite(x) && x >= 0; }
bool fraction(double x) { return x >= 0 && x < 1; }  // a decay rate: 1 would never forget, and Adam divides by 1 - beta^t

ScheduleSpec parse_schedule(ConfigNode node, bool learning_rate_given) {
  ScheduleSpec s;
  static const std::vector<std::string> kTypes = {"constant", "cosine", "linear", "exponential", "piecewise"};
  s.type = node.get<std::string>("type", "constant");
  if (std::find(kTypes.begin(), kTypes.end(), s.type) == kTypes.end()) node["type"].fail_unknown("schedule", s.type, kTypes);
  std::vector<std::string> keys = {"type", "warmup_steps"};
  if (s.type == "cosine" || s.type == "linear") keys.insert(keys.end(), {"decay_steps", "min_ratio"});
  if (s.type == "exponential") keys.insert(keys.end(), {"decay_steps", "decay_rate", "staircase"});
  if (s.type == "piecewise") keys.insert(keys.end(), {"boundaries", "values"});
  node.expect_keys(keys);
  s.warmup_steps = node.get_checked<std::int64_t>("warmup_steps", 0, [](auto n) { return n >= 0; }, "be >= 0");
  if (s.type == "cosine" || s.type == "linear") {
    s.decay_steps = node.get_checked<std::int64_t>("decay_steps", 0, [](auto n) { return n >= 0; }, "be >= 0 (0: the whole run)");
    s.min_ratio = node.get_checked("min_ratio", 0.0, [](double r) { return r >= 0 && r <= 1; }, "lie in [0, 1]");
  }
  if (s.type == "exponential") {
    if (!node.find("decay_steps") || !node.find("decay_rate"))
      node.fail("schedule exponential needs decay_steps and decay_rate (learning_rate * decay_rate^(step / decay_steps))");
    s.decay_steps = node.get_checked<std::int64_t>("decay_steps", 1, [](auto n) { return n >= 1; }, "be >= 1");
    s.decay_rate = node.get_checked("decay_rate", 1.0, positive, "be a positive number");
    s.staircase = node.get<bool>("staircase", false);
  }
  if (s.type == "piecewise") {
    if (!node.find("boundaries") || !node.find("values"))
      node.fail("schedule piecewise needs boundaries (steps) and values (the learning rates, one more than boundaries)");
    if (learning_rate_given)
      node.fail("schedule piecewise sets the learning rates by its values; leave out the optimizer's learning_rate");
    s.boundaries = node["boundaries"].as<std::vector<std::int64_t>>();
    s.values = node["values"].as<std::vector<double>>();
    for (std::size_t i = 0; i < s.boundaries.size(); ++i)
      if (s.boundaries[i] < 1 || (i > 0 && s.boundaries[i] <= s.boundaries[i - 1]))
        node["boundaries"].fail("boundaries must be steps >= 1 in increasing order");
    if (s.values.size() != s.boundaries.size() + 1)
      node["values"].fail("values must be one more than boundaries (" + std::to_string(s.boundaries.size() + 1) + "), got " +
                          std::to_string(s.values.size()));
    for (double v : s.values)
      if (!positive(v)) node["values"].fail("values must be positive learning rates");
  }
  return s;
}

}  // namespace

OptimizerSpec parse_optimizer(ConfigNode node) {
  OptimizerSpec spec;
  if (node.is_scalar()) {
    spec.type = node.as<std::string>();
    if (std::find(kOptimizers.begin(), kOptimizers.end(), spec.type) == kOptimizers.end())
      node.fail_unknown("optimizer", spec.type, kOptimizers);
    if (spec.type == "sgd") spec.learning_rate = 0.01f;
    if (spec.type == "adamw") spec.weight_decay = 0.004f;
    return spec;
  }
  spec.type = node["type"].as<std::string>();
  if (std::find(kOptimizers.begin(), kOptimizers.end(), spec.type) == kOptimizers.end())
    node["type"].fail_unknown("optimizer", spec.type, kOptimizers);
  const bool learning_rate_given = node.has("learning_rate");  // before get() writes the default in
  std::vector<std::string> keys = {"type", "learning_rate", "global_clipnorm", "schedule"};
  if (spec.type == "sgd") {
    keys.insert(keys.end(), {"momentum", "nesterov", "weight_decay"});
  } else {
    keys.insert(keys.end(), {"beta_1", "beta_2", "epsilon", "weight_decay"});
  }
  node.expect_keys(keys);
  spec.learning_rate =
      node.get_checked("learning_rate", spec.type == "sgd" ? 0.01f : 1e-3f, positive, "be a positive number");
  spec.global_clipnorm = node.get_checked("global_clipnorm", 0.0f, non_negative, "be >= 0 (0: no clipping)");
  spec.weight_decay = node.get_checked("weight_decay", spec.type == "adamw" ? 0.004f : 0.0f, non_negative, "be >= 0");
  if (spec.type == "sgd") {
    spec.momentum = node.get_checked("momentum", 0.0f, fraction, "lie in [0, 1)");
    spec.nesterov = node.get<bool>("nesterov", false);
  } else {
    spec.beta_1 = node.get_checked("beta_1", 0.9f, fraction, "lie in [0, 1)");
    spec.beta_2 = node.get_checked("beta_2", 0.999f, fraction, "lie in [0, 1)");
    spec.epsilon = node.get_checked("epsilon", 1e-7f, positive, "be a positive number");
  }
  if (auto schedule = node.find("schedule")) {
    spec.schedule = parse_schedule(*schedule, learning_rate_given);
    if (spec.schedule.type == "piecewise") spec.learning_rate = static_cast<float>(spec.schedule.values.front());
  }
  return spec;
}

float learning_rate_at(const OptimizerSpec& spec, std::int64_t step, std::int64_t total_steps) {
  const ScheduleSpec& s = spec.schedule;
  // The schedule's rate `t` steps after warm-up.
  auto scheduled = [&](std::int64_t t) {
    const double lr = spec.learning_rate;
    if (s.type == "cosine" || s.type == "linear") {
      const std::int64_t decay = s.decay_steps > 0 ? s.decay_steps : std::max<std::int64_t>(1, total_steps - s.warmup_steps);
      const double progress = std::min(1.0, static_cast<double>(t) / static_cast<double>(decay));
      const double left = s.type == "cosine" ? 0.5 * (1.0 + std::cos(3.14159265358979323846 * progress)) : 1.0 - progress;
      return lr * (s.min_ratio + (1.0 - s.min_ratio) * left);
    }
    if (s.type == "exponential") {
      double periods = static_cast<double>(t) / static_cast<double>(s.decay_steps);
      if (s.staircase) periods = std::floor(periods);
      return lr * std::pow(s.decay_rate, periods);
    }
    if (s.type == "piecewise") {
      const std::int64_t at = t + s.warmup_steps;  // boundaries count the run's steps
      std::size_t i = 0;
      while (i < s.boundaries.size() && at > s.boundaries[i]) ++i;
      return s.values[i];
    }
    return lr;
  };
  if (s.warmup_steps > 0 && step < s.warmup_steps)
    return static_cast<float>(scheduled(0) * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps));
  return static_cast<float>(scheduled(step - s.warmup_steps));
}

void append_updates(Graph& g, const OptimizerSpec& spec,
                    const std::vector<std::pair<std::string, ValueId>>& params,
                    const std::unordered_map<ValueId, ValueId>& grads, VariableStore& store,
                    std::vector<std::pair<std::string, ValueId>>& state) {
  std::vector<ValueId> clipped;
  for (const auto& [path, p] : params) clipped.push_back(grads.at(p));
  if (spec.global_clipnorm > 0) {
    // factor = clipnorm / max(norm, clipnorm): 1 when the norm is within bounds.
    ValueId total = -1;
    for (ValueId grad : clipped) {
      std::vector<int> axes(static_cast<std::size_t>(g.shape(grad).rank()));
      for (std::size_t i = 0; i < axes.size(); ++i) axes[i] = static_cast<int>(i);
      ValueId squares = g.reduce(ReduceOp::sum, g.mul(grad, grad), axes);
      total = total < 0 ? squares : g.add(total, squares);
    }
    ValueId clip = g.fill({}, spec.global_clipnorm);
    ValueId factor = g.div(clip, g.binary(BinaryOp::max, g.unary(UnaryOp::sqrt, total), clip));
    for (ValueId& grad : clipped) grad = g.mul(grad, factor);
  }
  auto slot = [&](const std::string& path, const std::string& name, const Shape& shape) {
    std::string state_path = "optimizer/" + path + "/" + name;
    store.get_or_create(state_path, shape, DType::f32, false, {},
                        BlockInit([](const Tensor& t, std::span<const std::int64_t>) { std::memset(t.raw_data(), 0, t.nbytes()); }));
    ValueId leaf = g.variable(state_path, shape);
    state.emplace_back(state_path, leaf);
    return leaf;
  };
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto& [path, p] = params[i];
    Shape shape = g.shape(p);
    if (spec.type == "sgd") {
      g.sgd_update(p, clipped[i], slot(path, "momentum", shape),
                   {.learning_rate = spec.learning_rate, .momentum = spec.momentum,
                    .nesterov = spec.nesterov, .weight_decay = spec.weight_decay});
    } else {
      g.adam_update(p, clipped[i], slot(path, "m", shape), slot(path, "v", shape),
                    {.learning_rate = spec.learning_rate, .beta1 = spec.beta_1, .beta2 = spec.beta_2,
                     .epsilon = spec.epsilon, .weight_decay = spec.weight_decay,
                     .decoupled_weight_decay = true});  // Keras 3 decouples weight decay in every optimizer
    }
  }
}

}  // namespace tessera
