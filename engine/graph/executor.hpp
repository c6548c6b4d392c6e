// Executor: runs a planned graph on one device.
//
// The executor plans memory at construction, allocates one arena on the first
// run, and from then on runs the schedule with no allocation: every
// intermediate value is a view into the arena. Inputs and variables are bound
// by the caller (bind), and stay owned by the caller.
//
//   Executor exec(graph, {loss}, Device::cpu(0));
//   exec.bind(x, batch);           // every run reads the bound tensors
//   exec.bind(w, weights);
//   exec.run();
//   float l = exec.output(loss).to_vector<float>()[0];
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <memory>
#include <vector>

#include "backends/backend.hpp"
#include "engine/graph/kept_copies.hpp"
#include "engine/graph/memory_plan.hpp"
#include "engine/graph/step_runner.hpp"

namespace tessera {

class CollectiveContext;

class Executor final : public StepRunner {
 public:
  Executor(const Graph& graph, std::vector<ValueId> outputs, Device device = Device::cpu());

  // Binds an input or variable to a tensor of its shape, dtype and device;
  // throws ShapeError/DTypeError/DeviceError naming the value otherwise.
  void bind(ValueId leaf, const Tensor& tensor) override;
  // One device holds a whole batch: `first_row` must be 0.
  void bind_rows(ValueId leaf, const Tensor& rows, std::int64_t first_row) override;
  // Runs the schedule once; throws Error naming any input or variable not bound.
  void run() override;
  // The tensor of an output value: a view valid until the next run.
  Tensor output(ValueId value) const override;

  // The optimizer step (1-based, for Adam's bias correction) and learning rate
  // that update nodes use from the next run on, instead of their attributes'.
  void set_update_step(std::int64_t step, float learning_rate) override;
  void enable_profiling(std::map<std::string, OpTime>* sink) override { profile_ = sink; }

  // A promise for inference: the bound variables keep their values from run
  // to run, until one is bound again or `copies` is told they changed. Matmuls
  // whose weight the backend multiplies faster transposed or packed
  // (Backend::constant_b_form) then run against copies from
  // `copies`, asked for on the first run after a change, and so do the
  // products of mixed precision: a cast of a variable (or of a reshape of
  // one) is made once into `copies` and left out of the runs. Variables the
  // graph writes itself (a KV cache) are never copied; a copy that does not
  // fit in memory is done without.
  void fix_variables(std::shared_ptr<KeptCopies> copies);

  // For a partitioned graph: the communicator and rank its collective ops use
  // (owned by the caller, outliving the executor).
  void set_spmd(const CollectiveContext* context) { spmd_ = context; }

  const MemoryPlan& plan() const { return plan_; }
  std::int64_t runs() const { return runs_; }

 private:
  void allocate_arena();
  Tensor arena_view(ValueId v) const;  // v's bytes of the arena
  // fix_variables: takes the kept copies of the variables' current values.
  void prepare_fixed_variables();
  void run_node(NodeId n);  // the op's run rule (engine/graph/op_rules.hpp)
  std::string profile_key(NodeId n) const;  // the profile's entry for node n's op
  // The fused bias and activation of a matmul or conv2d node, if the plan has one.
  const Epilogue* epilogue(NodeId n) const {
    auto e = plan_.epilogues.find(n);
    return e == plan_.epilogues.end() ? nullptr : &e->second;
  }

  const Graph& graph_;
  std::vector<ValueId> outputs_;
  Backend& backend_;
  MemoryPlan plan_;
  std::vector<Tensor> tensors_;  // per value: bound tensor or arena view
  std::shared_ptr<Buffer> arena_;
  std::int64_t runs_ = 0;
  std::map<std::string, OpTime>* profile_ = nullptr;
  std::unique_ptr<OpTimer> op_timer_;  // made on the first profiled run
  const CollectiveContext* spmd_ = nullptr;
  std::int64_t update_step_ = 0;     // 0: attributes' step + runs
  float learning_rate_ = 0.0f;       // 0: attributes' learning rate
  // fix_variables: the copies, the version of them in use, and the
  // transposed or packed copies of matmuls' b, by the matmul.
  std::shared_ptr<KeptCopies> kept_;
  std::uint64_t prepared_version_ = 0;
  bool prepared_ = false;
  std::map<NodeId, Tensor> transposed_b_;
  std::map<NodeId, PackedMatrix> packed_b_;
  std::vector<bool> kept_cast_;  // by node: a cast whose output is a kept copy, not run
};

}  // namespace tessera
