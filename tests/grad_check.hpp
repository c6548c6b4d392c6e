// Gradient checking against central finite differences.
//
// check_gradients(g, out, leaves) reduces `out` to a scalar loss
// sum(out * probe) with a fixed random probe (so every output element matters
// with a different weight), appends the gradients by autodiff, and compares each
// with (loss(x + h) - loss(x - h)) / 2h computed by running the forward graph
// again, element by element, in f32.
// Tolerance: |analytic - numeric| <= atol + rtol * |numeric| with h = 1e-2,
// atol = 2e-3, rtol = 2e-2 (f32 rounding of the loss over small tensors stays
// near 1e-5; inputs are kept away from kinks by the callers).
#pragma once

#include <algorithm>
#include <utility>
#include <vector>

#include "backends/registry.hpp"
#include "engine/graph/autodiff.hpp"
#include "engine/graph/executor.hpp"
#include "tests/test_util.hpp"

namespace tessera::test {

struct GradCheckOptions {
  double h = 1e-2;
  double atol = 2e-3;
  double rtol = 2e-2;
  // Random ops (dropout) draw a mask per step: every run of the check runs
  // as this one step, so the perturbed runs see the mask the gradient used.
  std::int64_t step = 1;
};

inline void check_gradients(Graph& g, ValueId out, const std::vector<std::pair<ValueId, Tensor>>& leaves,
                            GradCheckOptions options = {}) {
  ValueId probe = g.input("probe", g.shape(out));
  Tensor probe_values = random_tensor(g.shape(out), 1234, 0.5f, 1.5f);
  std::vector<int> all_axes(static_cast<std::size_t>(g.shape(out).rank()));
  for (std::size_t i = 0; i < all_axes.size(); ++i) all_axes[i] = static_cast<int>(i);
  ValueId loss = g.reduce(ReduceOp::sum, g.mul(out, probe), all_axes);

  std::vector<ValueId> wrt;
  for (const auto& [id, t] : leaves)
    if (is_floating(t.dtype())) wrt.push_back(id);
  auto grads = append_gradients(g, loss, wrt);

  std::vector<ValueId> outputs{loss};
  for (ValueId id : wrt) outputs.push_back(grads.at(id));
  Executor exec(g, outputs);
  Executor forward(g, {loss});
  for (auto* e : {&exec, &forward}) {
    e->set_update_step(options.step, 0.0f);
    e->bind(probe, probe_values);
    for (const auto& [id, t] : leaves) e->bind(id, t);
  }
  exec.run();

  for (ValueId id : wrt) {
    const Tensor& x = std::find_if(leaves.begin(), leaves.end(), [&](auto& p) { return p.first == id; })->second;
    auto analytic = exec.output(grads.at(id)).to_vector<float>();
    float* data = x.data<float>();
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      float saved = data[i];
      data[i] = saved + static_cast<float>(options.h);
      forward.run();
      double plus = forward.output(loss).to_vector<float>()[0];
      data[i] = saved - static_cast<float>(options.h);
      forward.run();
      double minus = forward.output(loss).to_vector<float>()[0];
      data[i] = saved;
      double numeric = (plus - minus) / (2 * options.h);
      double diff = std::abs(analytic[static_cast<std::size_t>(i)] - numeric);
      if (!(diff <= options.atol + options.rtol * std::abs(numeric))) {  // a NaN on either side fails
        FAIL_CHECK("gradient of '" << g.value(id).name << "' element " << i << ": autodiff "
                                   << analytic[static_cast<std::size_t>(i)] << ", finite difference "
                                   << numeric);
        return;
      }
    }
  }
}

// Moves values at least `margin` away from zero (keeps relu-like kinks out of
// the finite-difference step).
inline Tensor away_from_zero(Tensor t, float margin = 0.1f) {
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = p[i] < 0 ? p[i] - margin : p[i] + margin;
  return t;
}

}  // namespace tessera::test
