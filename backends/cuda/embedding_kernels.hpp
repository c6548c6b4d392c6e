// Host-side launchers of the embedding kernels (embedding.cu). Each enqueues
// on `stream` and checks the launch; none synchronizes. Ids are i32 or i64
// (id_size 4 or 8); 0 elements launch nothing.
#pragma once

#include <cuda_runtime_api.h>

#include "backends/cuda/embedding.hpp"

namespace tessera {

// Sets *first_bad to kNoBadId, then runs IdCheck over the n ids.
void cuda_check_ids(const void* ids, int id_size, std::int64_t n, const IdCheck& check,
                    unsigned long long* first_bad, cudaStream_t stream);
// Elements of `word_size` bytes (2, 4 or 8).
void cuda_embedding_gather(const void* table, const void* ids, void* out, int word_size,
                           int id_size, const EmbeddingGather& gather, cudaStream_t stream);
// out is f32 (word_size 4, one = 0x3f800000) or bf16 (2, 0x3f80).
void cuda_one_hot(const void* ids, void* out, int word_size, int id_size, const OneHot& one_hot,
                  cudaStream_t stream);
void cuda_embedding_scatter_add(const void* ids, const float* dout, float* dtable, int id_size,
                                const EmbeddingScatterAdd& scatter, cudaStream_t stream);

}  // namespace tessera
