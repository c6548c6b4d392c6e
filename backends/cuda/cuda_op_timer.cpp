#include "backends/cuda/cuda_op_timer.hpp"

#include "backends/cuda/cuda_check.hpp"

namespace tessera {

CudaOpTimer::~CudaOpTimer() {
  // Errors are dropped (no CudaDeviceGuard, which throws): this may run while
  // an error unwinds, or at exit.
  int previous = -1;
  const bool switched =
      cudaGetDevice(&previous) == cudaSuccess && previous != gpu_ && cudaSetDevice(gpu_) == cudaSuccess;
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  cudaGetLastError();
  if (switched) cudaSetDevice(previous);
}

void CudaOpTimer::start() {
  recorded_ -= recorded_ % 2;  // an op that threw before stop() left its start alone: drop it
  record();
}

void CudaOpTimer::record() {
  CudaDeviceGuard guard(gpu_);
  if (recorded_ == events_.size()) {
    cudaEvent_t e = nullptr;
    TESSERA_CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
  }
  TESSERA_CUDA_CHECK(cudaEventRecord(events_[recorded_], stream_));
  ++recorded_;
}

std::vector<double> CudaOpTimer::seconds() {
  const std::size_t pairs = recorded_ / 2;
  recorded_ = 0;
  std::vector<double> out;
  if (pairs == 0) return out;
  CudaDeviceGuard guard(gpu_);
  TESSERA_CUDA_CHECK(cudaEventSynchronize(events_[2 * pairs - 1]));
  out.reserve(pairs);
  for (std::size_t i = 0; i < pairs; ++i) {
    float ms = 0.0f;
    TESSERA_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[2 * i], events_[2 * i + 1]));
    out.push_back(static_cast<double>(ms) / 1000.0);
  }
  return out;
}

}  // namespace tessera
