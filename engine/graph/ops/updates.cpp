// Optimizer updates and moving statistics: side effects on variables, no outputs.
//   sgd_update:     (param, grad, velocity) -> (): updates param and velocity in place
//   adam_update:    (param, grad, m, v) -> (): updates in place; the step advances per run
//   moving_average: (state, value) -> (): state = m * state + (1 - m) * value, m = attrs.scalar
//   cache_write:    (cache, rows, positions) -> (): rows written into a KV cache at each sequence's position
// The executor's update step and learning rate (set_update_step) override the attributes'.
// Where the memory plan fused a weight gradient's matmul into its update
// (fusion.hpp), the update multiplies its operands itself.
#include "backends/backend.hpp"
#include "engine/graph/fusion.hpp"
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

NodeId Graph::cache_write(ValueId cache, ValueId rows, ValueId positions) {
  const Shape& c = shape(cache);
  const Shape& r = shape(rows);
  if (node(value(cache).producer).kind != OpKind::variable)
    throw GraphError("cache_write: the cache " + describe(cache) + " must be a variable (it is written in place)");
  if (c.rank() != 4 || r.rank() != 4 || r[0] != c[0] || r[1] != c[1] || r[3] != c[3] || r[2] > c[2])
    throw ShapeError("cache_write: rows " + describe(rows) + " must be [B, H, T, K] with T at most C for the cache " +
                     describe(cache) + " [B, H, C, K]");
  if (dtype(rows) != dtype(cache)) throw DTypeError("cache_write: rows " + describe(rows) + " and the cache " + describe(cache) + " differ in dtype");
  if (shape(positions) != Shape{c[0], 1} || dtype(positions) != DType::i32)
    throw ShapeError("cache_write: positions " + describe(positions) + " must be i32[" + std::to_string(c[0]) + ", 1]");
  return add_node(OpKind::cache_write, {cache, rows, positions}, OpAttrs{}, {});
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
                                    if (const UpdateProduct* product = r.update_product)
                                      r.backend.sgd_update_by_product(r.in(0), r.value(product->a),
                                                                      r.value(product->b), r.in(2), args);
                                    else
                                      r.backend.sgd_update(r.in(0), r.in(1), r.in(2), args);
                                  },
                                  [](const Graph&, const Node&) { return follow_first_rule(2); }};
  entry(t, OpKind::adam_update) = {nullptr,
                                   [](NodeRun& r) {
                                     AdamArgs args = r.node.attrs.adam;
                                     args.step = r.update_step > 0 ? r.update_step : args.step + r.runs;  // advances every run
                                     if (r.learning_rate > 0) args.learning_rate = r.learning_rate;
                                     if (const UpdateProduct* product = r.update_product)
                                       r.backend.adam_update_by_product(r.in(0), r.value(product->a),
                                                                        r.value(product->b), r.in(2), r.in(3), args);
                                     else
                                       r.backend.adam_update(r.in(0), r.in(1), r.in(2), r.in(3), args);
                                   },
                                   [](const Graph&, const Node&) { return follow_first_rule(2); }};
  entry(t, OpKind::moving_average) = {
      nullptr, [](NodeRun& r) { r.backend.moving_average(r.in(0), r.in(1), static_cast<float>(r.node.attrs.scalar)); },
      [](const Graph&, const Node&) { return follow_first_rule(); }};
  // Split as the cache is (its sequence dimension whole: the rows of a position go to its owner).
  entry(t, OpKind::cache_write) = {
      nullptr, [](NodeRun& r) { r.backend.cache_write(r.in(0), r.in(1), r.in(2)); },
      [](const Graph&, const Node&) { return follow_first_rule(); }};
}

}  // namespace tessera
