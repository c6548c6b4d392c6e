// Metrics with Keras' names, built as graph ops next to the loss.
//
// A metric is a few sums over the batch, each a graph output: a sharded run
// adds its devices' partial sums in collectives like the loss, and every
// process of a job reads the whole batch's. A pass adds the sums up batch
// after batch (PassTotals), and the metric is a function of the totals, so
// the precision or AUC of an epoch is that of all its samples, as Keras'
// stateful metrics give, not a mean of per-batch figures.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/tensor.hpp"
#include "engine/graph/graph.hpp"
#include "engine/training/fit_log.hpp"
#include "engine/training/loss.hpp"

namespace tessera {

// The names `training.metrics` accepts, for error messages: accuracy,
// top_<k>_accuracy, mae, mse, precision, recall, auc (and Keras' aliases
// mean_absolute_error, mean_squared_error).
const std::vector<std::string>& metric_names();

// k of "accuracy" (1) or "top_<k>_accuracy" (k >= 1); 0 for any other name.
int metric_top_k(const std::string& name);

// Whether `name` is one of metric_names() (or an alias).
bool is_metric(const std::string& name);

// Why metric `name` cannot go with `loss`: an unknown name, a ranking metric
// on a binary loss, an error metric on class ids; "" when it can.
std::string metric_refusal(const std::string& name, const LossSpec& loss);

// A metric in the graph.
struct MetricOps {
  std::vector<ValueId> sums;  // f32 sums over the batch: scalars, or [thresholds] for auc
  // The metric from the totals of `sums` over a pass of `samples` samples.
  std::function<double(const std::vector<std::vector<double>>& totals, std::int64_t samples)> value;
};

// The metrics' ops over `output` ([N, ..., classes] scores) and `target` (what
// `loss` takes), one per name in `metrics`, in order:
// - accuracy, top_<k>_accuracy: rows where fewer than k classes score above
//   the label's class. The label is the sparse target, or the first largest
//   entry of a one-hot or probability target (Keras' argmax). Infinite
//   scores compare as the largest finite ones; rows with NaN scores count
//   arbitrarily. With binary_crossentropy or a single output unit, Keras'
//   binary accuracy instead: the elements whose score is on the target's
//   side of the threshold (0 for logits, else 0.5).
// - mae, mse: the mean absolute / squared difference of output and target
//   (targets of the output's shape).
// - precision, recall, auc: every element of the output is a yes/no decision
//   against the target's (a class's one-hot entry, or > 0.5). The score is a
//   probability: sigmoid or softmax of logits when the loss takes logits
//   (Keras leaves that to the user). precision = TP / (TP + FP) and recall =
//   TP / (TP + FN) at 0.5, 0 when the denominator is; auc is the ROC curve's
//   area by the trapezoid rule over Keras' 200 thresholds.
// `constants` receives inputs the caller binds once (class indices,
// thresholds). Throws Error with metric_refusal()'s reason.
std::vector<MetricOps> build_metrics(Graph& graph, const std::vector<std::string>& metrics, const LossSpec& loss,
                                     ValueId output, ValueId target,
                                     std::vector<std::pair<ValueId, Tensor>>& constants);

// What a pass over data has added up so far.
struct PassTotals {
  double loss = 0;  // each batch's loss times its samples
  std::int64_t samples = 0;
  std::vector<std::vector<std::vector<double>>> sums;  // [metric][sum][element], as MetricOps::sums

  void add(const PassTotals& other);
  // Whether `other` holds sums of the same metrics (the same sizes at every level): add() needs it.
  bool same_metrics(const PassTotals& other) const;
  // Loss and metrics as means over the samples; `names` and `metrics` as built.
  Evaluation evaluation(const std::vector<std::string>& names, const std::vector<MetricOps>& metrics) const;
};

}  // namespace tessera
