// StagedRunner: a runner on a device whose memory the host cannot read (a
// GPU), driven by a Trainer that holds host tensors. Inputs the caller binds
// are copied to the device; outputs it asks for are copied back.
//
//   StagedRunner staged(std::move(executor), Device::cuda(0));
//   staged.bind_rows(x, host_batch, 0);  // copied now: later changes to
//   staged.run();                        // host_batch are not seen
//   staged.output(loss);                 // a host copy, valid until the next run's
//
// Variables are bound to the runner as device tensors beforehand (they stay
// on the device between steps); bind() and bind_rows() here copy.
#pragma once

#include <map>
#include <memory>
#include <set>

#include "engine/core/device.hpp"
#include "engine/graph/step_runner.hpp"

namespace tessera {

class StagedRunner final : public StepRunner {
 public:
  StagedRunner(std::unique_ptr<StepRunner> inner, Device device);

  void bind(ValueId leaf, const Tensor& host) override;
  void bind_rows(ValueId leaf, const Tensor& host_rows, std::int64_t first_row) override;
  void run() override;
  Tensor output(ValueId value) const override;
  void set_update_step(std::int64_t step, float learning_rate) override { inner_->set_update_step(step, learning_rate); }
  void enable_profiling(std::map<std::string, OpTime>* sink) override { inner_->enable_profiling(sink); }

 private:
  // The device copy of `host` for `leaf`: the same tensor from call to call
  // while the shape holds, so a steady-state step allocates nothing.
  const Tensor& upload(ValueId leaf, const Tensor& host);

  std::unique_ptr<StepRunner> inner_;
  Device device_;
  std::map<ValueId, Tensor> inputs_;           // by leaf: the device copies
  mutable std::map<ValueId, Tensor> outputs_;  // by value: the host copies, reused run to run
  mutable std::set<ValueId> fresh_;            // the copies taken since the last run
};

}  // namespace tessera
