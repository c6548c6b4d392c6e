// The embedding kernels (embedding.hpp), instantiated per id type and, for the
// gather, per element size.
#include "backends/cuda/embedding_kernels.hpp"

#include <cstdint>

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/launch.hpp"

namespace tessera {
namespace {

template <typename Id>
__global__ void check_ids_kernel(const Id* ids, std::int64_t n, IdCheck check,
                                 unsigned long long* first_bad) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) check(ids, first_bad, i);
}

template <typename Word, typename Id>
__global__ void gather_kernel(const Word* table, const Id* ids, Word* out, EmbeddingGather gather) {
  for (std::int64_t i = first_index(); i < gather.count; i += grid_stride())
    gather(table, ids, out, i);
}

template <typename Word, typename Id>
__global__ void one_hot_kernel(const Id* ids, Word* out, Word one, OneHot one_hot) {
  for (std::int64_t i = first_index(); i < one_hot.count; i += grid_stride())
    one_hot(ids, out, one, i);
}

template <typename Id>
__global__ void scatter_add_kernel(const Id* ids, const float* dout, float* dtable,
                                   EmbeddingScatterAdd scatter) {
  for (std::int64_t i = first_index(); i < scatter.count; i += grid_stride())
    scatter(ids, dout, dtable, i);
}

template <typename Word>
void gather_words(const void* table, const void* ids, void* out, int id_size,
                  const EmbeddingGather& gather, const LaunchConfig& cfg, cudaStream_t stream) {
  if (id_size == 4)
    gather_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(
        static_cast<const Word*>(table), static_cast<const std::int32_t*>(ids),
        static_cast<Word*>(out), gather);
  else
    gather_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(
        static_cast<const Word*>(table), static_cast<const std::int64_t*>(ids),
        static_cast<Word*>(out), gather);
}

template <typename Word>
void one_hot_words(const void* ids, void* out, Word one, int id_size, const OneHot& one_hot,
                   const LaunchConfig& cfg, cudaStream_t stream) {
  if (id_size == 4)
    one_hot_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(
        static_cast<const std::int32_t*>(ids), static_cast<Word*>(out), one, one_hot);
  else
    one_hot_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(
        static_cast<const std::int64_t*>(ids), static_cast<Word*>(out), one, one_hot);
}

}  // namespace

void cuda_check_ids(const void* ids, int id_size, std::int64_t n, const IdCheck& check,
                    unsigned long long* first_bad, cudaStream_t stream) {
  TESSERA_CUDA_CHECK(cudaMemsetAsync(first_bad, 0xff, sizeof *first_bad, stream));
  const LaunchConfig cfg = launch_config(n);
  if (cfg.blocks == 0) return;
  if (id_size == 4)
    check_ids_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(static_cast<const std::int32_t*>(ids),
                                                             n, check, first_bad);
  else
    check_ids_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(static_cast<const std::int64_t*>(ids),
                                                             n, check, first_bad);
  cuda_check(cudaGetLastError(), "check_ids_kernel<<<blocks, 256, 0, stream>>>", __FILE__,
             __LINE__);
}

void cuda_embedding_gather(const void* table, const void* ids, void* out, int word_size,
                           int id_size, const EmbeddingGather& gather, cudaStream_t stream) {
  const LaunchConfig cfg = launch_config(gather.count);
  if (cfg.blocks == 0) return;
  switch (word_size) {
    case 2: gather_words<std::uint16_t>(table, ids, out, id_size, gather, cfg, stream); break;
    case 4: gather_words<std::uint32_t>(table, ids, out, id_size, gather, cfg, stream); break;
    default: gather_words<std::uint64_t>(table, ids, out, id_size, gather, cfg, stream); break;
  }
  cuda_check(cudaGetLastError(), "gather_kernel<<<blocks, 256, 0, stream>>>", __FILE__, __LINE__);
}

void cuda_one_hot(const void* ids, void* out, int word_size, int id_size, const OneHot& one_hot,
                  cudaStream_t stream) {
  const LaunchConfig cfg = launch_config(one_hot.count);
  if (cfg.blocks == 0) return;
  if (word_size == 2)
    one_hot_words<std::uint16_t>(ids, out, 0x3f80u, id_size, one_hot, cfg, stream);
  else
    one_hot_words<std::uint32_t>(ids, out, 0x3f800000u, id_size, one_hot, cfg, stream);
  cuda_check(cudaGetLastError(), "one_hot_kernel<<<blocks, 256, 0, stream>>>", __FILE__, __LINE__);
}

void cuda_embedding_scatter_add(const void* ids, const float* dout, float* dtable, int id_size,
                                const EmbeddingScatterAdd& scatter, cudaStream_t stream) {
  const LaunchConfig cfg = launch_config(scatter.count);
  if (cfg.blocks == 0) return;
  if (id_size == 4)
    scatter_add_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(
        static_cast<const std::int32_t*>(ids), dout, dtable, scatter);
  else
    scatter_add_kernel<<<cfg.blocks, cfg.threads, 0, stream>>>(
        static_cast<const std::int64_t*>(ids), dout, dtable, scatter);
  cuda_check(cudaGetLastError(), "scatter_add_kernel<<<blocks, 256, 0, stream>>>", __FILE__,
             __LINE__);
}

}  // namespace tessera
