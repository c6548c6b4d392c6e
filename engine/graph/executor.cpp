#include "engine/graph/executor.hpp"

#include <algorithm>
#include <set>

#include "backends/registry.hpp"
#include "engine/graph/op_rules.hpp"

namespace tessera {

Executor::Executor(const Graph& graph, std::vector<ValueId> outputs, Device device)
    : graph_(graph),
      outputs_(std::move(outputs)),
      backend_(backend_for(device)),
      plan_(plan_memory(
          graph, outputs_,
          [&backend = backend_](DType stored, DType multiply, DType out, std::int64_t width) {
            return backend.supports_fused_attention(stored, multiply, out, width);
          },
          [&backend = backend_](DType dtype, const Shape& a, const Shape& b) {
            return backend.supports_update_by_product(dtype, a, b);
          },
          [&backend = backend_](DType dtype, const Shape& x, const Shape& dy, const Shape& dw) {
            return backend.computes_conv_bias_gradient(dtype, x, dy, dw);
          },
          [&backend = backend_](DType dtype, const Shape& dw) {
            return backend.takes_conv_weight_gradient_through_relu(dtype, dw);
          })),
      tensors_(static_cast<std::size_t>(graph.value_count())) {}

void Executor::bind(ValueId leaf, const Tensor& tensor) {
  const Value& v = graph_.value(leaf);
  OpKind kind = graph_.node(v.producer).kind;
  std::string label = "'" + (v.name.empty() ? "%" + std::to_string(leaf) : v.name) + "'";
  if (kind != OpKind::input && kind != OpKind::variable)
    throw GraphError("bind: value " + label + " is produced by " + std::string(name(kind)) +
                     ", only inputs and variables can be bound");
  if (!tensor.defined()) throw Error("bind: " + label + " bound to an undefined tensor");
  if (tensor.shape() != v.shape)
    throw ShapeError("bind: " + label + " expects shape " + v.shape.str() + ", got " + tensor.describe());
  if (tensor.dtype() != v.dtype)
    throw DTypeError("bind: " + label + " expects dtype " + std::string(dtype_name(v.dtype)) +
                     ", got " + tensor.describe());
  if (!shares_memory(tensor.device(), backend_.device()))
    throw DeviceError("bind: " + label + " must live on " + backend_.device().str() + ", got " +
                      tensor.describe());
  tensors_[leaf] = tensor;
  if (kind == OpKind::variable) prepared_ = false;
}

void Executor::fix_variables(std::shared_ptr<KeptCopies> copies) {
  if (!copies) throw Error("fix_variables: no KeptCopies given");
  kept_ = std::move(copies);
  prepared_ = false;
}

void Executor::prepare_fixed_variables() {
  std::set<ValueId> written;  // by their storage: what the graph updates in place
  for (NodeId n : plan_.schedule) {
    const Node& node = graph_.node(n);
    for (int i : op_info(node.kind).writes)
      written.insert(plan_.storage_of[static_cast<std::size_t>(node.inputs[static_cast<std::size_t>(i)])]);
  }
  const std::uint64_t version = kept_->version();  // before the copies: a change meanwhile makes them again
  transposed_b_.clear();
  packed_b_.clear();
  for (NodeId n : plan_.schedule) {
    const Node& node = graph_.node(n);
    if (node.kind != OpKind::matmul || plan_.attentions.contains(n)) continue;
    const ValueId a = node.inputs[0], b = node.inputs[1];
    const Value& bv = graph_.value(b);
    // b a variable, or a reshape of one (the attention's projections [D, H, K] as [D, H * K]).
    ValueId leaf = b;
    while (graph_.node(graph_.value(leaf).producer).kind == OpKind::reshape)
      leaf = graph_.node(graph_.value(leaf).producer).inputs[0];
    if (graph_.node(graph_.value(leaf).producer).kind != OpKind::variable || written.contains(leaf) ||
        bv.shape.rank() != 2)
      continue;
    try {
      const Tensor weight = tensors_[leaf].reshape(bv.shape);
      switch (backend_.constant_b_form(graph_.value(a).shape, bv.shape, bv.dtype, node.attrs.matmul)) {
        case ConstantB::as_is: break;
        case ConstantB::transposed: transposed_b_[n] = kept_->transposed(weight, backend_); break;
        case ConstantB::packed: packed_b_[n] = kept_->packed(weight, node.attrs.matmul, backend_); break;
      }
    } catch (const OutOfMemoryError&) {
      continue;  // a speed-up, not worth failing for: this matmul reads b as it is
    }
  }
  // Casts of a variable, or of a reshape of one (attention's kernels): the
  // kept copy stands for the cast's output, which nothing writes but the cast.
  // Those of an earlier preparation write their arena bytes again, unless kept anew.
  for (NodeId n : plan_.schedule)
    if (!kept_cast_.empty() && kept_cast_[n]) {
      const ValueId out = graph_.node(n).outputs[0];
      tensors_[out] = arena_view(out);
    }
  kept_cast_.assign(static_cast<std::size_t>(graph_.node_count()), false);
  for (NodeId n : plan_.schedule) {
    const Node& node = graph_.node(n);
    const ValueId out = node.outputs.empty() ? -1 : node.outputs[0];
    if (node.kind != OpKind::cast || plan_.storage_of[out] != out || plan_.offset[out] == MemoryPlan::kExternal ||
        std::find(outputs_.begin(), outputs_.end(), out) != outputs_.end())
      continue;
    ValueId leaf = node.inputs[0];
    while (graph_.node(graph_.value(leaf).producer).kind == OpKind::reshape)
      leaf = graph_.node(graph_.value(leaf).producer).inputs[0];
    if (graph_.node(graph_.value(leaf).producer).kind != OpKind::variable || written.contains(leaf)) continue;
    try {
      tensors_[out] = kept_->cast(tensors_[leaf].reshape(graph_.shape(node.inputs[0])), graph_.dtype(out), backend_);
    } catch (const OutOfMemoryError&) {
      continue;  // as above: this cast runs on every run
    }
    kept_cast_[n] = true;
  }
  prepared_version_ = version;
  prepared_ = true;
}

void Executor::allocate_arena() {
  try {
    arena_ = std::make_shared<Buffer>(backend_.allocator(), std::max<std::size_t>(plan_.arena_bytes, 1));
  } catch (const OutOfMemoryError& e) {
    throw OutOfMemoryError("the step's workspace (" + std::to_string(plan_.arena_bytes) +
                           " bytes for its activations, gradients and temporaries; a smaller batch needs less): " + e.what());
  }
  for (NodeId n : plan_.schedule)
    for (ValueId v : plan_.writes(graph_, n))
      if (plan_.storage_of[v] == v && plan_.offset[v] != MemoryPlan::kExternal) tensors_[v] = arena_view(v);
}

Tensor Executor::arena_view(ValueId v) const {
  return Tensor::view(arena_, static_cast<std::size_t>(plan_.offset[v]), graph_.value(v).shape, graph_.value(v).dtype);
}

void Executor::run() {
  for (NodeId n : plan_.schedule) {
    const Node& node = graph_.node(n);
    if (op_info(node.kind).bound && !tensors_[node.outputs[0]].defined()) {
      const Value& v = graph_.value(node.outputs[0]);
      throw Error("run: " + std::string(name(node.kind)) + " '" + v.name + "' " +
                  std::string(dtype_name(v.dtype)) + v.shape.str() + " is not bound");
    }
  }
  if (!arena_) allocate_arena();
  if (kept_ && (!prepared_ || kept_->version() != prepared_version_)) prepare_fixed_variables();
  // The schedule less the casts whose outputs are kept copies (fix_variables).
  const auto runs = [this](NodeId n) { return kept_cast_.empty() || !kept_cast_[n]; };
  if (profile_ == nullptr) {
    for (NodeId n : plan_.schedule)
      if (runs(n)) run_node(n);
  } else {
    // Timed on the device's clock (Backend::make_op_timer): a device that
    // queues its kernels (CUDA) records its own timestamps, read at the end.
    if (!op_timer_) op_timer_ = backend_.make_op_timer();
    op_timer_->seconds();  // forgets the ops of a run that threw
    std::vector<NodeId> timed;
    for (NodeId n : plan_.schedule) {
      if (!runs(n)) continue;
      op_timer_->start();
      run_node(n);
      op_timer_->stop();
      timed.push_back(n);
    }
    const std::vector<double> seconds = op_timer_->seconds();
    if (seconds.size() != timed.size())  // keys and times would part company
      throw Error("profile: the " + backend_.name() + " op timer gave " + std::to_string(seconds.size()) +
                  " times for the " + std::to_string(timed.size()) + " ops of the run");
    for (std::size_t i = 0; i < seconds.size(); ++i) {
      OpTime& t = (*profile_)[profile_key(timed[i])];
      t.seconds += seconds[i];
      ++t.calls;
    }
  }
  ++runs_;
}

std::string Executor::profile_key(NodeId n) const {
  const Node& node = graph_.node(n);
  std::string key(plan_.attentions.contains(n) ? "attention (fused)" : name(node.kind));
  // A matmul by its operands' dtype and shapes, a convolution or pooling
  // also by its output's shape (and a pooling by its kind), a cast by the
  // dtype it makes and its shape, a reduction by its operand's shape: where
  // their time goes differs by size far more than by op.
  const auto shape_of = [&](ValueId v) { return graph_.shape(v).str(); };
  if (node.kind == OpKind::matmul) {
    const MatmulArgs& m = node.attrs.matmul;
    key += " " + std::string(dtype_name(graph_.dtype(node.inputs[0]))) + " " + shape_of(node.inputs[0]) +
           (m.transpose_a ? "^T" : "") + " x " + shape_of(node.inputs[1]) + (m.transpose_b ? "^T" : "");
  }
  const bool pool = node.kind == OpKind::pool2d || node.kind == OpKind::pool2d_grad;
  if (pool || node.kind == OpKind::conv2d || node.kind == OpKind::conv2d_grad_input ||
      node.kind == OpKind::conv2d_grad_weight) {
    if (pool) key += " " + std::string(name(node.attrs.pool.kind));
    key += " " + std::string(dtype_name(graph_.dtype(node.inputs[0])));
    for (std::size_t i = 0; i < node.inputs.size(); ++i) key += (i == 0 ? " " : ", ") + shape_of(node.inputs[i]);
    key += " -> " + shape_of(node.outputs[0]);  // which tells strides and windows apart
    if (plan_.conv_bias_gradients.contains(n)) key += " and bias";
    if (plan_.conv_relu_gradients.contains(n)) key += " through relu";
  }
  if (node.kind == OpKind::cast)
    key += " " + std::string(dtype_name(graph_.dtype(node.outputs[0]))) + " " + shape_of(node.outputs[0]);
  if (node.kind == OpKind::unary || node.kind == OpKind::unary_grad) key += std::string(" ") + std::string(name(node.attrs.unary));
  if (node.kind == OpKind::binary) key += std::string(" ") + std::string(name(node.attrs.binary));
  if (node.kind == OpKind::reduce) key += " " + std::string(name(node.attrs.reduce)) + " " + shape_of(node.inputs[0]);
  if (auto u = plan_.update_products.find(n); u != plan_.update_products.end())
    key += " by product " + shape_of(u->second.a) + "^T x " + shape_of(u->second.b);
  return key;
}

void Executor::bind_rows(ValueId leaf, const Tensor& rows, std::int64_t first_row) {
  if (first_row != 0)
    throw ShapeError("bind_rows: one device holds the whole batch of '" + graph_.value(leaf).name +
                     "', so its rows start at 0, not " + std::to_string(first_row));
  bind(leaf, rows);
}

void Executor::set_update_step(std::int64_t step, float learning_rate) {
  if (step < 1) throw Error("set_update_step: the step is 1-based, got " + std::to_string(step));
  update_step_ = step;
  learning_rate_ = learning_rate;
}

Tensor Executor::output(ValueId value) const {
  if (std::find(outputs_.begin(), outputs_.end(), value) == outputs_.end())
    throw GraphError("output: value %" + std::to_string(value) +
                     " is not an output of this executor (intermediate values are not kept)");
  if (runs_ == 0) throw Error("output: the executor has not run yet");
  return tensors_[value];
}

void Executor::run_node(NodeId n) {
  const Node& node = graph_.node(n);
  if (auto a = plan_.attentions.find(n); a != plan_.attentions.end()) {
    const FusedAttention& f = a->second;
    const Tensor& out = tensors_[f.out];
    Tensor reshaped;  // where the call writes a cast's value of another shape (fusion.hpp)
    backend_.fused_attention(tensors_[f.q], tensors_[f.k], tensors_[f.v],
                             out.shape() == f.out_shape ? out : (reshaped = out.reshape(f.out_shape)), f.args);
    return;
  }
  NodeRun run{.graph = graph_,
              .node = node,
              .backend = backend_,
              .values = tensors_,
              .epilogue = epilogue(n),
              .collectives = spmd_,
              .update_step = update_step_,
              .runs = runs_,
              .learning_rate = learning_rate_,
              .transposed_b = nullptr,
              .packed_b = nullptr,
              .update_product = nullptr};
  if (auto u = plan_.update_products.find(n); u != plan_.update_products.end()) run.update_product = &u->second;
  if (auto b = plan_.conv_bias_gradients.find(n); b != plan_.conv_bias_gradients.end()) run.bias_gradient = b->second;
  if (auto r = plan_.conv_relu_gradients.find(n); r != plan_.conv_relu_gradients.end()) run.conv_relu_gradient = &r->second;
  if (auto kept = transposed_b_.find(n); kept != transposed_b_.end()) run.transposed_b = &kept->second;
  if (auto kept = packed_b_.find(n); kept != packed_b_.end()) run.packed_b = &kept->second;
  op_rules(node.kind).run(run);
}

}  // namespace tessera
