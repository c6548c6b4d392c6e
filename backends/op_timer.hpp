// Per-op timing for profiles (Executor::enable_profiling): each op's calls
// between start() and stop(), on the clock of the device that runs them.
//
// A device that runs ops as they are called (the CPU) is timed by the host's
// clock. A device that queues its work (CUDA) records timestamps in its queue
// instead, so the profile waits once per run rather than after every op: a
// wait after each op would add its own latency to every op and hide how the
// kernels overlap the host's launches.
#pragma once

#include <memory>
#include <vector>

namespace tessera {

class OpTimer {
 public:
  virtual ~OpTimer() = default;
  virtual void start() = 0;  // before an op's calls
  virtual void stop() = 0;   // after them
  // The seconds of each start()-stop() pair since the last call, in order;
  // waits for the device to reach the last stop().
  virtual std::vector<double> seconds() = 0;
};

// The host's steady clock: for devices whose ops have finished when their calls return.
std::unique_ptr<OpTimer> make_host_op_timer();

}  // namespace tessera
