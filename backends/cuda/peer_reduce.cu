// The peer reduction kernel: PeerReduce (peer_reduce.hpp) over every element.
#include "backends/cuda/peer_reduce_kernels.hpp"

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/launch.hpp"

namespace tessera {
namespace {

__global__ void peer_reduce_kernel(PeerReduce reduce, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) reduce(i);
}

}  // namespace

void cuda_peer_reduce(const PeerReduce& reduce, std::int64_t count, cudaStream_t stream) {
  const LaunchConfig cfg = launch_config(count);
  if (cfg.blocks == 0) return;
  peer_reduce_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(reduce, count);
  cuda_check(cudaGetLastError(), "peer_reduce_kernel<<<blocks, 256, 0, stream>>>", __FILE__, __LINE__);
}

}  // namespace tessera
