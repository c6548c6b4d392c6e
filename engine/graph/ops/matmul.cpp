// matmul: (a, b) -> alpha * op(a) @ op(b), batched over leading axes (MatmulArgs).
#include <functional>
#include <numeric>

#include "backends/backend.hpp"
#include "engine/graph/autodiff.hpp"
#include "engine/graph/op_rules.hpp"

namespace tessera {

ValueId Graph::matmul(ValueId a, ValueId b, const MatmulArgs& args) {
  check_same_dtype("matmul", a, b);
  check_floating("matmul", a);
  OpAttrs attrs;
  attrs.matmul = args;
  return single(OpKind::matmul, {a, b}, attrs, matmul_output_shape(shape(a), shape(b), args), dtype(a));
}

namespace {

// Gradients of a matmul's operands: the four transpose cases, each a matmul,
// then summed over broadcast batch axes.
std::vector<ValueId> matmul_grads(Graph& g, const Node& n, const std::vector<ValueId>& dys) {
  ValueId a = n.inputs[0], b = n.inputs[1], dy = dys[0];
  const MatmulArgs& args = n.attrs.matmul;
  auto mm = [&](ValueId l, ValueId r, bool tl, bool tr) {
    return g.matmul(l, r, {.transpose_a = tl, .transpose_b = tr, .alpha = args.alpha});
  };
  bool ta = args.transpose_a, tb = args.transpose_b;
  ValueId da = !ta ? mm(dy, b, false, !tb) : (!tb ? mm(b, dy, false, true) : mm(b, dy, true, true));
  ValueId db;
  const Shape& as = g.shape(a);
  if (g.shape(b).rank() == 2 && as.rank() > 2 && !ta) {
    // A weight shared over batch axes: fold them into the rows, one 2-D matmul.
    // Rows are the product of the leading axes, not numel / last: a last axis can be 0.
    auto rows = [](const Shape& s) {
      return std::accumulate(s.dims().begin(), s.dims().end() - 1, std::int64_t{1}, std::multiplies<>());
    };
    const Shape& ys = g.shape(dy);
    ValueId a2 = g.reshape(a, {rows(as), as[as.rank() - 1]});
    ValueId dy2 = g.reshape(dy, {rows(ys), ys[ys.rank() - 1]});
    db = tb ? mm(dy2, a2, true, false) : mm(a2, dy2, true, false);
  } else {
    db = !tb ? (!ta ? mm(a, dy, true, false) : mm(a, dy, false, false))
             : (!ta ? mm(dy, a, true, false) : mm(dy, a, true, true));
  }
  return {unbroadcast(g, da, g.shape(a)), unbroadcast(g, db, g.shape(b))};
}

void run_matmul(NodeRun& r) {
  MatmulArgs args = r.node.attrs.matmul;
  if (r.epilogue != nullptr) args.activation = r.fused_activation();
  r.backend.matmul(r.in(0), r.in(1), r.fused_bias(), r.fused_out(), args);
}

}  // namespace

void ops::add_matmul_rules(OpRuleTable& t) { entry(t, OpKind::matmul) = {matmul_grads, run_matmul}; }

}  // namespace tessera
