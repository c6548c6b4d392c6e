// Copies between a whole (global) host tensor and one device's block of it,
// as a Sharding splits it: how variables are distributed to the devices and
// gathered back into a VariableStore, and how batches are split.
#pragma once

#include "distribution/sharding.hpp"
#include "engine/core/tensor.hpp"

namespace tessera {

// Device `rank`'s block of `global` (partial sums are not allowed: a whole
// tensor holds no partial sums), as a new tensor on `device`.
Tensor extract_block(const Tensor& global, const Sharding& sharding, const DeviceMesh& mesh, int rank, Device device);
// The same into an existing `block` of the block's shape (no allocation).
void extract_block_into(const Tensor& global, const Sharding& sharding, const DeviceMesh& mesh, int rank,
                        const Tensor& block);
// Writes device `rank`'s `block` into its place in `global`.
void insert_block(const Tensor& block, const Tensor& global, const Sharding& sharding, const DeviceMesh& mesh, int rank);

// Keras' distribute_tensor: every device's block of `global` under `layout`, in rank order.
std::vector<Tensor> distribute_tensor(const Tensor& global, const TensorLayout& layout, const DeviceMesh& mesh);

}  // namespace tessera
