#include "engine/graph/executor.hpp"

#include <algorithm>
#include <bit>
#include <chrono>

#include "backends/registry.hpp"
#include "engine/graph/collective_context.hpp"

namespace tessera {

Executor::Executor(const Graph& graph, std::vector<ValueId> outputs, Device device)
    : graph_(graph),
      outputs_(std::move(outputs)),
      backend_(backend_for(device)),
      plan_(plan_memory(graph, outputs_)),
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
      if (plan_.storage_of[v] == v && plan_.offset[v] != MemoryPlan::kExternal)
        tensors_[v] = Tensor::view(arena_, static_cast<std::size_t>(plan_.offset[v]),
                                   graph_.value(v).shape, graph_.value(v).dtype);
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
  if (profile_ == nullptr) {
    for (NodeId n : plan_.schedule) run_node(n);
  } else {
    for (NodeId n : plan_.schedule) {
      const Node& node = graph_.node(n);
      auto start = std::chrono::steady_clock::now();
      run_node(n);
      std::string key(name(node.kind));
      if (node.kind == OpKind::unary || node.kind == OpKind::unary_grad) key += std::string(" ") + std::string(name(node.attrs.unary));
      if (node.kind == OpKind::binary) key += std::string(" ") + std::string(name(node.attrs.binary));
      if (node.kind == OpKind::reduce) key += std::string(" ") + std::string(name(node.attrs.reduce));
      OpTime& t = (*profile_)[key];
      t.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      ++t.calls;
    }
  }
  ++runs_;
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

const CollectiveContext& Executor::spmd(const Node& node) const {
  if (spmd_ == nullptr)
    throw GraphError("op '" + std::string(name(node.kind)) +
                     "' belongs to a partitioned graph; run it with set_spmd (one executor per device)");
  return *spmd_;
}

void Executor::run_node(NodeId n) {
  const Node& node = graph_.node(n);
  Backend& b = backend_;
  const OpAttrs& at = node.attrs;
  switch (node.kind) {
    case OpKind::input:
    case OpKind::variable:
      return;
    case OpKind::fill:
      return b.fill(out(node, 0), at.scalar);
    case OpKind::matmul:
      if (const Epilogue* e = epilogue(n)) {
        MatmulArgs args = at.matmul;
        args.activation = e->activation;
        return b.matmul(in(node, 0), in(node, 1), e->bias >= 0 ? &tensors_[e->bias] : nullptr, tensors_[e->out], args);
      }
      return b.matmul(in(node, 0), in(node, 1), nullptr, out(node, 0), at.matmul);
    case OpKind::conv2d:
      if (const Epilogue* e = epilogue(n)) {
        Conv2dArgs args = at.conv;
        args.activation = e->activation;
        return b.conv2d_forward(in(node, 0), in(node, 1), e->bias >= 0 ? &tensors_[e->bias] : nullptr, tensors_[e->out], args);
      }
      return b.conv2d_forward(in(node, 0), in(node, 1), nullptr, out(node, 0), at.conv);
    case OpKind::conv2d_grad_input:
      return b.conv2d_backward_data(in(node, 0), in(node, 1), out(node, 0), at.conv);
    case OpKind::conv2d_grad_weight:
      return b.conv2d_backward_weights(in(node, 0), in(node, 1), out(node, 0), nullptr, at.conv);
    case OpKind::pool2d:
      return b.pool2d_forward(in(node, 0), out(node, 0), at.pool);
    case OpKind::pool2d_grad:
      return b.pool2d_backward(in(node, 0), in(node, 1), out(node, 0), at.pool);
    case OpKind::unary:
      return b.unary(at.unary, in(node, 0), out(node, 0));
    case OpKind::unary_grad:
      return b.unary_backward(at.unary, in(node, 0), in(node, 1), out(node, 0));
    case OpKind::binary:
      return b.binary(at.binary, in(node, 0), in(node, 1), out(node, 0));
    case OpKind::reduce:
      return b.reduce(at.reduce, in(node, 0), out(node, 0));
    case OpKind::broadcast_to:
      return b.broadcast_to(in(node, 0), out(node, 0));
    case OpKind::reshape:
      // A view of the input's storage: nothing moves.
      tensors_[node.outputs[0]] = in(node, 0).reshape(at.shape);
      return;
    case OpKind::transpose:
      return b.transpose(in(node, 0), out(node, 0), at.axes);
    case OpKind::softmax:
      return b.softmax(in(node, 0), out(node, 0), at.axis, at.log);
    case OpKind::softmax_grad:
      return b.softmax_backward(in(node, 0), in(node, 1), out(node, 0), at.axis, at.log);
    case OpKind::layer_norm:
      return b.layer_norm(in(node, 0), in(node, 1), in(node, 2), out(node, 0), out(node, 1),
                          out(node, 2), at.epsilon);
    case OpKind::layer_norm_grad:
      return b.layer_norm_backward(in(node, 0), in(node, 1), in(node, 2), in(node, 3), in(node, 4),
                                   out(node, 0), out(node, 1), out(node, 2));
    case OpKind::embedding: {
      if (at.mesh_axes == 0) return b.embedding(in(node, 0), in(node, 1), out(node, 0));
      // A partitioned graph's block of the vocabulary: other devices hold the other rows.
      const std::int64_t rows = in(node, 0).shape()[0];
      const int axis = std::countr_zero(at.mesh_axes);
      return b.embedding_block(in(node, 0), in(node, 1), out(node, 0), spmd(node).coordinate(axis) * rows,
                               rows * spmd(node).group_size(at.mesh_axes));
    }
    case OpKind::embedding_grad:
      b.fill(out(node, 0), 0.0);
      return b.embedding_backward(in(node, 0), in(node, 1), out(node, 0));
    case OpKind::one_hot:
      return b.one_hot(in(node, 0), out(node, 0));
    case OpKind::concat: {
      std::vector<Tensor> inputs;  // a small vector of handles; no tensor data moves
      for (ValueId v : node.inputs) inputs.push_back(tensors_[v]);
      return b.concat(inputs, out(node, 0), at.axis);
    }
    case OpKind::slice:
      return b.slice(in(node, 0), out(node, 0), at.axis, static_cast<std::int64_t>(at.scalar));
    case OpKind::dropout: {
      // Each step reads its own window of the mask stream: 2^40 positions a step.
      std::uint64_t step = static_cast<std::uint64_t>(update_step_ > 0 ? update_step_ : runs_ + 1);
      std::uint64_t offset = step << 40;
      // A partitioned graph's block of rows: its first element's global index.
      if (at.mesh_axes != 0)
        offset += static_cast<std::uint64_t>(spmd(node).coordinate(std::countr_zero(at.mesh_axes)) * out(node, 0).numel());
      return b.dropout(in(node, 0), out(node, 0), static_cast<float>(at.scalar), at.seed, offset);
    }
    case OpKind::cast:
      return b.cast(in(node, 0), out(node, 0));
    case OpKind::sgd_update: {
      SgdArgs args = at.sgd;
      if (learning_rate_ > 0) args.learning_rate = learning_rate_;
      return b.sgd_update(in(node, 0), in(node, 1), in(node, 2), args);
    }
    case OpKind::moving_average:
      return b.moving_average(in(node, 0), in(node, 1), static_cast<float>(at.scalar));
    case OpKind::adam_update: {
      AdamArgs args = at.adam;
      args.step = update_step_ > 0 ? update_step_ : args.step + runs_;  // advances every run
      if (learning_rate_ > 0) args.learning_rate = learning_rate_;
      return b.adam_update(in(node, 0), in(node, 1), in(node, 2), in(node, 3), args);
    }
    case OpKind::all_reduce:
      return spmd(node).all_reduce(at.mesh_axes, in(node, 0), out(node, 0), at.reduce);
    case OpKind::all_gather:
      return spmd(node).all_gather(at.mesh_axes, in(node, 0), out(node, 0), at.axis);
    case OpKind::reduce_scatter:
      return spmd(node).reduce_scatter(at.mesh_axes, in(node, 0), out(node, 0), at.axis);
    case OpKind::all_to_all:
      return spmd(node).all_to_all(at.mesh_axes, in(node, 0), out(node, 0), at.axes[0], at.axes[1]);
    case OpKind::block_view: {  // a view of this device's rows: nothing moves
      std::int64_t rows = graph_.value(node.outputs[0]).shape[0];
      tensors_[node.outputs[0]] = in(node, 0).rows(spmd(node).coordinate(std::countr_zero(at.mesh_axes)) * rows, rows);
      return;
    }
    case OpKind::all_gather_into:
      return spmd(node).all_gather(at.mesh_axes, in(node, 0), in(node, 1), 0);
    case OpKind::shard_slice: {
      int mesh_axis = std::countr_zero(at.mesh_axes);
      std::int64_t block = out(node, 0).shape()[at.axis];
      return b.slice(in(node, 0), out(node, 0), at.axis, spmd(node).coordinate(mesh_axis) * block);
    }
  }
}

}  // namespace tessera
