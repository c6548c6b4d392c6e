// Classification metrics with Keras' names, built as graph ops next to the
// loss: each is a scalar graph output, so a sharded run computes it like the
// loss (partial sums meet in collectives) and every process of a job reads
// the whole batch's count: nothing is added up outside the graph.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/core/tensor.hpp"
#include "engine/graph/graph.hpp"
#include "engine/training/loss.hpp"

namespace tessera {

// The names `training.metrics` accepts, for error messages.
const std::vector<std::string>& metric_names();

// k of "accuracy" (1) or "top_<k>_accuracy" (k >= 1); 0 for any other name.
int metric_top_k(const std::string& name);

// A metric in the graph: `hits` (an f32 scalar) of `cases` counted. Hits are
// sums of 0s and 1s, exact in f32 up to 2^24 cases, so a sharded run counts
// exactly what one device counts, whatever the order of its partial sums.
struct MetricCount {
  ValueId hits = -1;
  double cases = 0;
};

// The metrics' ops over `output` ([..., classes] scores) and `target` (what
// `loss` takes), one count per name in `metrics`, in order:
// - top-k accuracy: rows where fewer than k classes score above the label's
//   class. The label is the sparse target, or the first largest entry of a
//   one-hot or probability target (Keras' argmax). Infinite scores compare
//   as the largest finite ones; rows with NaN scores count arbitrarily.
// - with binary_crossentropy or a single output unit, Keras' binary accuracy:
//   the elements (cases) whose score is on the target's side of the
//   threshold (0 for logits, else 0.5).
// `constants` receives inputs the caller binds once (the class indices a
// dense target's argmax needs). Throws Error for an unknown name, or a top-k
// metric (k > 1) on a single unit.
std::vector<MetricCount> build_metrics(Graph& graph, const std::vector<std::string>& metrics, const LossSpec& loss,
                                       ValueId output, ValueId target,
                                       std::vector<std::pair<ValueId, Tensor>>& constants);

}  // namespace tessera
