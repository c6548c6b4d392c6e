// Leaves: inputs and variables the caller binds, and constant fills.
#include "backends/backend.hpp"
#include "engine/graph/op_rules.hpp"

namespace tessera {

ValueId Graph::input(const std::string& name, const Shape& shape, DType dtype) {
  return leaf(OpKind::input, name, shape, dtype);
}

ValueId Graph::variable(const std::string& name, const Shape& shape, DType dtype) {
  return leaf(OpKind::variable, name, shape, dtype);
}

ValueId Graph::fill(const Shape& shape, double value, DType dtype) {
  OpAttrs attrs;
  attrs.scalar = value;
  return leaf(OpKind::fill, "", shape, dtype, attrs);
}

void ops::add_leaf_rules(OpRuleTable& t) {
  // Bound leaves run nothing (the executor checks they are bound); none has inputs to differentiate.
  entry(t, OpKind::input).run = [](NodeRun&) {};
  entry(t, OpKind::variable).run = [](NodeRun&) {};
  entry(t, OpKind::fill).run = [](NodeRun& r) { r.backend.fill(r.out(0), r.node.attrs.scalar); };
}

}  // namespace tessera
