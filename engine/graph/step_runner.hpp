// StepRunner: runs a traced step (forward, loss, backward, updates) on the
// devices it was planned for. The Executor runs it on one device and
// distribution's SpmdProgram on a mesh; the Trainer holds either through
// this interface.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "engine/core/tensor.hpp"
#include "engine/graph/graph.hpp"

namespace tessera {

class StepRunner {
 public:
  virtual ~StepRunner() = default;

  // Binds an input or variable (its whole value) for every run.
  virtual void bind(ValueId leaf, const Tensor& whole) = 0;
  // Binds rows [first_row, first_row + rows.shape()[0]) of a batch input:
  // a process of a job of several holds only its own devices' rows.
  virtual void bind_rows(ValueId leaf, const Tensor& rows, std::int64_t first_row) = 0;
  virtual void run() = 0;
  // A requested output, valid until the next run.
  virtual Tensor output(ValueId value) const = 0;

  // The optimizer step (1-based) and learning rate the update nodes use from
  // the next run on (a schedule, a step count shared by several runners).
  virtual void set_update_step(std::int64_t step, float learning_rate) = 0;

  // Per-op timing: when enabled, every run adds each node's time, on its
  // device's clock (Backend::make_op_timer), to the entry of its op
  // ("matmul", "unary gelu_erf", ...). For finding hot spots.
  struct OpTime {
    double seconds = 0;
    std::int64_t calls = 0;
  };
  virtual void enable_profiling(std::map<std::string, OpTime>* sink) = 0;
};

}  // namespace tessera
