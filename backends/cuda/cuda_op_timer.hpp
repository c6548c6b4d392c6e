// The CUDA backend's OpTimer (op_timer.hpp): an event recorded on the
// backend's stream before and after each op, read after one wait at the end.
// An op's time is then the GPU's, from reaching the first event to passing the
// second: its kernels, plus any wait for the host to launch them.
#pragma once

#include <cstddef>
#include <vector>

#include <cuda_runtime_api.h>

#include "backends/op_timer.hpp"

namespace tessera {

class CudaOpTimer final : public OpTimer {
 public:
  CudaOpTimer(int gpu, cudaStream_t stream) : gpu_(gpu), stream_(stream) {}
  ~CudaOpTimer() override;
  CudaOpTimer(const CudaOpTimer&) = delete;
  CudaOpTimer& operator=(const CudaOpTimer&) = delete;

  void start() override;
  void stop() override { record(); }
  std::vector<double> seconds() override;

 private:
  void record();  // the pool's next event, on the stream

  int gpu_;
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;  // created as needed, reused run after run
  std::size_t recorded_ = 0;         // events recorded since the last seconds()
};

}  // namespace tessera
