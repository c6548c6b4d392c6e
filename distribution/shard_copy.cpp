#include "distribution/shard_copy.hpp"

#include <cstring>

#include "engine/core/error.hpp"

namespace tessera {
namespace {

// Copies the block at `start` of shape `block` between `global` and a dense
// `local`, one contiguous run of the last dimension at a time.
void copy_block(std::byte* global, const Shape& global_shape, std::byte* local, const Shape& block,
                const std::vector<std::int64_t>& start, std::size_t element, bool to_local) {
  const int rank = global_shape.rank();
  if (rank == 0) {
    to_local ? std::memcpy(local, global, element) : std::memcpy(global, local, element);
    return;
  }
  const std::size_t run = static_cast<std::size_t>(block[rank - 1]) * element;
  std::vector<std::int64_t> index(static_cast<std::size_t>(rank - 1), 0);
  const std::int64_t runs = block.numel() / std::max<std::int64_t>(1, block[rank - 1]);
  for (std::int64_t r = 0; r < runs; ++r) {
    std::int64_t offset = 0;  // element offset of this run in `global`
    for (int d = 0; d < rank - 1; ++d)
      offset = offset * global_shape[d] + start[static_cast<std::size_t>(d)] + index[static_cast<std::size_t>(d)];
    offset = offset * global_shape[rank - 1] + start[static_cast<std::size_t>(rank - 1)];
    std::byte* g = global + static_cast<std::size_t>(offset) * element;
    std::byte* l = local + static_cast<std::size_t>(r) * run;
    to_local ? std::memcpy(l, g, run) : std::memcpy(g, l, run);
    for (int d = rank - 2; d >= 0; --d) {  // next index, last dimension fastest
      if (++index[static_cast<std::size_t>(d)] < block[d]) break;
      index[static_cast<std::size_t>(d)] = 0;
    }
  }
}

void check_whole(const Sharding& sharding, const DeviceMesh& mesh) {
  if (sharding.partial != 0)
    throw LayoutError("a whole tensor cannot be split as " + sharding.str(mesh) + " (partial sums)");
}

}  // namespace

Tensor extract_block(const Tensor& global, const Sharding& sharding, const DeviceMesh& mesh, int rank, Device device) {
  Tensor local = Tensor::empty(sharding.local_shape(global.shape(), mesh), global.dtype(), device);
  extract_block_into(global, sharding, mesh, rank, local);
  return local;
}

void extract_block_into(const Tensor& global, const Sharding& sharding, const DeviceMesh& mesh, int rank,
                        const Tensor& block) {
  check_whole(sharding, mesh);
  if (global.device().kind != DeviceKind::cpu || block.device().kind != DeviceKind::cpu)
    throw DeviceError("extract_block: " + global.describe() + " and " + block.describe() + " must be in host memory");
  Shape expected = sharding.local_shape(global.shape(), mesh);
  if (block.shape() != expected || block.dtype() != global.dtype())
    throw ShapeError("extract_block: device " + std::to_string(rank) + "'s block of " + global.describe() + " as " +
                     sharding.str(mesh) + " is " + std::string(dtype_name(global.dtype())) + expected.str() + ", not " +
                     block.describe());
  copy_block(static_cast<std::byte*>(global.raw_data()), global.shape(), static_cast<std::byte*>(block.raw_data()), expected,
             sharding.block_start(global.shape(), mesh, rank), dtype_size(global.dtype()), true);
}

void insert_block(const Tensor& block, const Tensor& global, const Sharding& sharding, const DeviceMesh& mesh, int rank) {
  check_whole(sharding, mesh);
  if (global.device().kind != DeviceKind::cpu) throw DeviceError("insert_block: " + global.describe() + " is not in host memory");
  Shape expected = sharding.local_shape(global.shape(), mesh);
  if (block.shape() != expected || block.dtype() != global.dtype())
    throw ShapeError("insert_block: device " + std::to_string(rank) + "'s block of " + global.describe() + " as " +
                     sharding.str(mesh) + " must be " + std::string(dtype_name(global.dtype())) + expected.str() +
                     ", got " + block.describe());
  copy_block(static_cast<std::byte*>(global.raw_data()), global.shape(), static_cast<std::byte*>(block.raw_data()),
             expected, sharding.block_start(global.shape(), mesh, rank), dtype_size(global.dtype()), false);
}

std::vector<Tensor> distribute_tensor(const Tensor& global, const TensorLayout& given, const DeviceMesh& mesh) {
  const TensorLayout layout = given.padded_to(global.shape().rank());
  layout.validate("distribute_tensor", global.shape(), mesh);
  Sharding sharding = Sharding::from_layout(layout, mesh);
  std::vector<Tensor> blocks;
  for (std::int64_t rank = 0; rank < mesh.size(); ++rank)
    blocks.push_back(extract_block(global, sharding, mesh, static_cast<int>(rank),
                                   mesh.devices()[static_cast<std::size_t>(rank)]));
  return blocks;
}

}  // namespace tessera
