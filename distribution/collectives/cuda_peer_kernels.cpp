#include "distribution/collectives/cuda_peer_kernels.hpp"

#include <algorithm>

#include <cuda_runtime_api.h>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/peer_reduce_kernels.hpp"
#include "backends/registry.hpp"

namespace tessera {

static_assert(kPeerReduceMaxBuffers >= kMaxCudaLogicalDevices,
              "a reduction kernel takes every member's buffer of the largest group of logical GPU devices");

CudaPeerKernels::CudaPeerKernels(Device device)
    : device_(device),
      gpu_(cuda_gpu_of(device)),
      stream_(dynamic_cast<CudaBackend&>(backend_for(device)).stream()) {}

bool CudaPeerKernels::reaches(Device device) const {
  return device.kind == DeviceKind::cuda && cuda_gpu_of(device) == gpu_;
}

std::string CudaPeerKernels::memory_name() const { return "tensors of GPU " + std::to_string(gpu_); }

void CudaPeerKernels::synchronize() {
  CudaDeviceGuard guard(gpu_);
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaPeerKernels::before_publish() { synchronize(); }

void CudaPeerKernels::after_writes(bool) { synchronize(); }

void CudaPeerKernels::reduce(std::span<const void* const> srcs, std::span<void* const> dsts, std::int64_t count,
                             DType dtype, ReduceOp op, bool) {
  if (count <= 0 || srcs.empty() || dsts.empty()) return;
  if (srcs.size() > kPeerReduceMaxBuffers || dsts.size() > kPeerReduceMaxBuffers)
    throw CollectiveError("a reduction over " + std::to_string(std::max(srcs.size(), dsts.size())) +
                          " buffers of one GPU: at most " + std::to_string(kPeerReduceMaxBuffers));
  PeerReduce r;
  std::copy(srcs.begin(), srcs.end(), r.srcs);
  std::copy(dsts.begin(), dsts.end(), r.dsts);
  r.sources = static_cast<int>(srcs.size());
  r.destinations = static_cast<int>(dsts.size());
  r.dtype = dtype;
  r.op = op;
  CudaDeviceGuard guard(gpu_);
  cuda_peer_reduce(r, count, stream_);
}

void CudaPeerKernels::copy(const void* src, std::span<void* const> dsts, std::size_t bytes, bool) {
  if (bytes == 0) return;
  CudaDeviceGuard guard(gpu_);
  for (void* dst : dsts) TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}

}  // namespace tessera
