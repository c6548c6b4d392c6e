// Host-side launcher of the peer reduction (peer_reduce.cu). Enqueues on
// `stream` and checks the launch; does not synchronize. 0 elements launch nothing.
#pragma once

#include <cuda_runtime_api.h>

#include "backends/cuda/peer_reduce.hpp"

namespace tessera {

void cuda_peer_reduce(const PeerReduce& reduce, std::int64_t count, cudaStream_t stream);

}  // namespace tessera
