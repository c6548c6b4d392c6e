// Optimizer updates and moving statistics: side effects on variables, no outputs.
//   sgd_update:     (param, grad, velocity) -> (): updates param and velocity in place
//   adam_update:    (param, grad, m, v) -> (): updates in place; the step advances per run
//   moving_average: (state, value) -> (): state = m * state + (1 - m) * value, m = attrs.scalar
// The executor's update step and learning rate (set_update_step) override the attributes'.
#include "backends/backend.hpp"
#include "engine/graph/op_rules.hpp"

namespace tessera {

NodeId Graph::sgd_update(ValueId param, ValueId grad, ValueId velocity, const SgdArgs& args) {
  if (shape(grad) != shape(param) || shape(velocity) != shape(param))
    throw ShapeError("sgd_update: param " + describe(param) + ", grad " + describe(grad) + " and velocity " +
                     describe(velocity) + " must have one shape");
  OpAttrs attrs;
  attrs.sgd = args;
  return add_node(OpKind::sgd_update, {param, grad, velocity}, attrs, {});
}

NodeId Graph::moving_average(ValueId state, ValueId value, float momentum) {
  if (shape(value) != shape(state))
    throw ShapeError("moving_average: value " + describe(value) + " must have the shape of state " + describe(state));
  OpAttrs attrs;
  attrs.scalar = momentum;
  return add_node(OpKind::moving_average, {state, value}, attrs, {});
}

NodeId Graph::adam_update(ValueId param, ValueId grad, ValueId m, ValueId v, const AdamArgs& args) {
  if (shape(grad) != shape(param) || shape(m) != shape(param) || shape(v) != shape(param))
    throw ShapeError("adam_update: param " + describe(param) + ", grad " + describe(grad) + ", m " + describe(m) +
                     " and v " + describe(v) + " must have one shape");
  OpAttrs attrs;
  attrs.adam = args;
  return add_node(OpKind::adam_update, {param, grad, m, v}, attrs, {});
}

// Sharding: everything as the updated variable is split, summed; an
// optimizer's state (from operand 2: velocity, moments) may be held by rows (ZeRO).
void ops::add_update_rules(OpRuleTable& t) {
  entry(t, OpKind::sgd_update) = {nullptr,
                                  [](NodeRun& r) {
                                    SgdArgs args = r.node.attrs.sgd;
                                    if (r.learning_rate > 0) args.learning_rate = r.learning_rate;
                                    r.backend.sgd_update(r.in(0), r.in(1), r.in(2), args);
                                  },
                                  [](const Graph&, const Node&) { return follow_first_rule(2); }};
  entry(t, OpKind::adam_update) = {nullptr,
                                   [](NodeRun& r) {
                                     AdamArgs args = r.node.attrs.adam;
                                     args.step = r.update_step > 0 ? r.update_step : args.step + r.runs;  // advances every run
                                     if (r.learning_rate > 0) args.learning_rate = r.learning_rate;
                                     r.backend.adam_update(r.in(0), r.in(1), r.in(2), r.in(3), args);
                                   },
                                   [](const Graph&, const Node&) { return follow_first_rule(2); }};
  entry(t, OpKind::moving_average) = {
      nullptr, [](NodeRun& r) { r.backend.moving_average(r.in(0), r.in(1), static_cast<float>(r.node.attrs.scalar)); },
      [](const Graph&, const Node&) { return follow_first_rule(); }};
}

}  // namespace tessera
