// embedding, embedding_block, one_hot and embedding_backward on the CUDA
// backend (embedding.hpp, embedding.cu). Ids are checked on the device first
// (check_ids below), which waits for the stream: the one synchronization of
// these ops, needed to throw the CPU backend's ShapeError before anything is
// written.
#include <cuda_runtime_api.h>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/embedding_kernels.hpp"

namespace tessera {
namespace {

int id_size(const Tensor& ids) { return static_cast<int>(dtype_size(ids.dtype())); }

// Throws the CPU backend's ShapeError (backends/cpu/embedding.cpp) for the
// first id outside [0, vocab).
void check_ids(const Tensor& ids, std::int64_t vocab, const char* op, Device device,
               cudaStream_t stream) {
  if (ids.numel() == 0) return;
  const Tensor slot = Tensor::empty(Shape{1}, DType::i64, device);
  auto* first_bad = static_cast<unsigned long long*>(slot.raw_data());
  cuda_check_ids(ids.raw_data(), id_size(ids), ids.numel(), IdCheck{vocab}, first_bad, stream);
  unsigned long long position = kNoBadId;
  TESSERA_CUDA_CHECK(
      cudaMemcpyAsync(&position, first_bad, sizeof position, cudaMemcpyDeviceToHost, stream));
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (position == kNoBadId) return;
  std::int64_t id = 0;
  if (ids.dtype() == DType::i32) {
    std::int32_t narrow = 0;
    TESSERA_CUDA_CHECK(cudaMemcpy(&narrow, static_cast<const std::int32_t*>(ids.raw_data()) + position,
                                  sizeof narrow, cudaMemcpyDeviceToHost));
    id = narrow;
  } else {
    TESSERA_CUDA_CHECK(cudaMemcpy(&id, static_cast<const std::int64_t*>(ids.raw_data()) + position,
                                  sizeof id, cudaMemcpyDeviceToHost));
  }
  throw ShapeError(std::string(op) + ": id " + std::to_string(id) + " at position " +
                   std::to_string(position) + " of ids" + ids.shape().str() +
                   " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
}

}  // namespace

void CudaBackend::run_embedding(const Tensor& table, const Tensor& ids, const Tensor& out) {
  CudaDeviceGuard guard(gpu_);
  check_ids(ids, table.shape()[0], "embedding", device(), stream_);
  const std::int64_t dim = table.shape()[1];
  const EmbeddingGather gather{dim, 0, table.shape()[0], ids.numel() * dim};
  cuda_embedding_gather(table.raw_data(), ids.raw_data(), out.raw_data(),
                        static_cast<int>(dtype_size(table.dtype())), id_size(ids), gather, stream_);
}

void CudaBackend::run_embedding_block(const Tensor& table, const Tensor& ids, const Tensor& out,
                                      std::int64_t first_row, std::int64_t vocab) {
  CudaDeviceGuard guard(gpu_);
  check_ids(ids, vocab, "embedding_block", device(), stream_);
  const std::int64_t dim = table.shape()[1];
  const EmbeddingGather gather{dim, first_row, table.shape()[0], ids.numel() * dim};
  cuda_embedding_gather(table.raw_data(), ids.raw_data(), out.raw_data(),
                        static_cast<int>(dtype_size(table.dtype())), id_size(ids), gather, stream_);
}

void CudaBackend::run_one_hot(const Tensor& ids, const Tensor& out) {
  const std::int64_t classes = out.shape()[out.rank() - 1];
  CudaDeviceGuard guard(gpu_);
  check_ids(ids, classes, "one_hot", device(), stream_);
  cuda_one_hot(ids.raw_data(), out.raw_data(), static_cast<int>(dtype_size(out.dtype())),
               id_size(ids), OneHot{classes, ids.numel() * classes}, stream_);
}

void CudaBackend::run_embedding_backward(const Tensor& ids, const Tensor& dout,
                                         const Tensor& dtable) {
  if (dtable.dtype() != DType::f32)
    throw UnsupportedError("embedding_backward: dtable must be f32 on " + device().str() +
                           ", got " + dtable.describe());
  CudaDeviceGuard guard(gpu_);
  check_ids(ids, dtable.shape()[0], "embedding_backward", device(), stream_);
  const std::int64_t dim = dtable.shape()[1];
  cuda_embedding_scatter_add(ids.raw_data(), dout.data<float>(), dtable.data<float>(),
                             id_size(ids), EmbeddingScatterAdd{dim, ids.numel() * dim}, stream_);
}

}  // namespace tessera
