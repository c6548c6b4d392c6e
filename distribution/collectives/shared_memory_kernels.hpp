// The memory operations of ShmCommunicator's collectives, for one kind of
// shared memory: the host's, which the logical CPU devices of a process share
// (ShmKernels, shm_kernels.hpp), or one GPU's, which its logical devices share
// (CudaPeerKernels, cuda_peer_kernels.hpp). Every member of a collective reads
// and writes its peers' buffers directly, so the algorithm is the same; only
// the loops and when their writes are visible differ.
//
// One object per rank, used by that rank's thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backends/op_kinds.hpp"
#include "engine/core/device.hpp"
#include "engine/core/dtype.hpp"

namespace tessera {

class SharedMemoryKernels {
 public:
  virtual ~SharedMemoryKernels() = default;

  // Whether a tensor on `device` lives in the memory these kernels reach.
  virtual bool reaches(Device device) const = 0;
  // What they reach, for messages: "host tensors", "tensors of GPU 0".
  virtual std::string memory_name() const = 0;

  // Before this member shows its buffers to its peers: every write to them
  // that was queued before the collective is done (a GPU's stream drained).
  virtual void before_publish() {}

  // dsts[j][i] = op over k (in order) of srcs[k][i], for i < count and every j.
  // f32 and bf16 accumulate in f32 (mean divides the sum by srcs.size());
  // i32 and i64 support sum and max. A destination may be one of the sources
  // (in place): each element is read from every source before it is written.
  // `stream`: a large collective, whose stores may bypass the cache.
  virtual void reduce(std::span<const void* const> srcs, std::span<void* const> dsts, std::int64_t count,
                      DType dtype, ReduceOp op, bool stream) = 0;

  // dsts[j][0, bytes) = src[0, bytes) for every j.
  virtual void copy(const void* src, std::span<void* const> dsts, std::size_t bytes, bool stream) = 0;

  // Copies a block of shape `dims` between two row-major arrays with the
  // given strides (in elements of `element_size` bytes): copy() of each
  // contiguous run.
  void copy_strided(void* dst, const std::vector<std::int64_t>& dst_strides, const void* src,
                    const std::vector<std::int64_t>& src_strides, const std::vector<std::int64_t>& dims,
                    std::size_t element_size, bool stream);

  // After this member's writes of one collective: they are complete and
  // visible to its peers once the closing barrier has passed.
  virtual void after_writes(bool streamed) = 0;
};

}  // namespace tessera
