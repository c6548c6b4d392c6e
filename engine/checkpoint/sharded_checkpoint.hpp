// Sharded checkpoints: a directory where several writers (processes) each wrote
// the blocks of the tensors they own into a safetensors file of their own, and
// one index, in the style of Hugging Face's model.safetensors.index.json, says
// which block of which tensor lies where:
//
//   dir/model-00001-of-00002.safetensors   writer 0's blocks
//   dir/model-00002-of-00002.safetensors   writer 1's blocks
//   dir/model.safetensors.index.json       {"metadata": {..., "total_size": bytes},
//                                           "weight_map": {tensor: file},
//                                           "tessera_shards": {tensor: {"dtype", "shape",
//                                             "shards": [{"file", "key", "offset", "shape"}]}}}
//
// "weight_map" keeps the index readable by Hugging Face tools for tensors that
// lie whole in one file; "tessera_shards" is the full description, which
// Tessera reads. Every tensor's blocks tile it exactly once: a tensor
// replicated over several writers is written by one of them.
//
// Loading reads any region of a tensor, whatever the sharding it was written
// with (resharding), from only the files and bytes that hold it.
//
// Files are written atomically one by one (temporary file, rename); making the
// directory as a whole appear atomically is the caller's business.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/tensor.hpp"

namespace tessera {

// A box inside a tensor: per dimension, where it starts and how far it extends.
struct ShardSlice {
  std::vector<std::int64_t> offset, shape;

  // The whole of a tensor of shape `dims`.
  static ShardSlice whole(const std::vector<std::int64_t>& dims);
  std::string str() const;  // "[1:3, 0:4]": half-open ranges per dimension
  bool operator==(const ShardSlice& other) const = default;
};

// One block of a tensor: the file it is in, its name there, and where it sits.
struct ShardEntry {
  std::string file;  // a file name inside the checkpoint directory
  std::string key;   // the tensor's name inside that file
  ShardSlice slice;
};

struct ShardedTensorInfo {
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::vector<ShardEntry> shards;
};

struct ShardIndex {
  // By tensor name ("mlp/dense/kernel", "optimizer/mlp/dense/kernel/m").
  std::map<std::string, ShardedTensorInfo> tensors;
  std::map<std::string, std::string> metadata;
};

inline constexpr const char* kShardIndexFile = "model.safetensors.index.json";

// The file of writer `writer` (0-based) of `writers`: "model-00001-of-00002.safetensors"
// (1-based, like Hugging Face's). Throws CheckpointError unless 0 <= writer < writers.
std::string shard_file_name(int writer, int writers);

// The name write_shard_file gives the block `slice` of `tensor` inside its
// file: "<tensor>@<offset,...>", distinct for distinct blocks and tensors. With
// it an index can be computed from the sharding plan alone, without the data.
std::string shard_key(const std::string& tensor, const ShardSlice& slice);

// One block to write: `value` (a defined host tensor of shape slice.shape) is
// the region `slice` of tensor `tensor`.
struct ShardBlock {
  std::string tensor;
  ShardSlice slice;
  Tensor value;
};

// Writes `blocks` into dir/shard_file_name(writer, writers) (dir must exist),
// each under shard_key(tensor, slice). Throws CheckpointError naming the file
// and tensor for a block whose value does not match its slice, two blocks at
// the same place, or a failed write.
void write_shard_file(const std::filesystem::path& dir, int writer, int writers,
                      const std::vector<ShardBlock>& blocks);

// Adds to `index` the entry that write_shard_file(dir, writer, writers, ...)
// writes for the block `slice` of `tensor` (of `dtype` and `shape`): how the
// writer of the index describes every writer's file from the global plan.
// Throws CheckpointError if `tensor` is already in the index with another
// dtype or shape.
void add_shard(ShardIndex& index, const std::string& tensor, DType dtype,
               const std::vector<std::int64_t>& shape, int writer, int writers,
               const ShardSlice& slice);

// Checks that `index` is consistent: every tensor's blocks have its rank, lie
// inside its shape and cover it exactly once (no gap, no overlap), file names
// name files inside the directory, and no two blocks share a file and key.
// `where` names the index in messages. Throws CheckpointError naming the
// tensor (and the files of the blocks at fault).
void check_shard_index(const ShardIndex& index, const std::string& where);

// Writes dir/kShardIndexFile atomically, after check_shard_index.
void save_shard_index(const std::filesystem::path& dir, const ShardIndex& index);

// Reads dir/kShardIndexFile: the JSON's structure, the dtype names, then
// check_shard_index. Throws CheckpointError naming the file and the tensor.
ShardIndex load_shard_index(const std::filesystem::path& dir);

// The region `slice` of tensor `name`, as a new host tensor of shape
// slice.shape. Opens only the files whose blocks overlap the region, reads
// their headers (which must hold the block under its key with the dtype and
// shape the index says) and then only the overlapping bytes. Throws
// CheckpointError naming the tensor (and the file) for a tensor not in the
// index, a slice outside it, a missing or mismatched file.
Tensor read_tensor_slice(const std::filesystem::path& dir, const ShardIndex& index,
                         const std::string& name, const ShardSlice& slice);
// The same into `out`, a host tensor of the slice's shape and the tensor's
// dtype (a device's block, read with no copy made on the way).
void read_tensor_slice_into(const std::filesystem::path& dir, const ShardIndex& index, const std::string& name,
                            const ShardSlice& slice, const Tensor& out);

class SliceReader;  // sharded_checkpoint.cpp

// Reads regions of the tensors of the checkpoint `dir` through its `index`
// (load_shard_index, or checkpoint_index for either form), as
// read_tensor_slice does, but opening each file and checking its header once
// for all reads: what reads many tensors or blocks keeps one. Files stay open
// while it lives.
class CheckpointReader {
 public:
  CheckpointReader(std::filesystem::path dir, ShardIndex index);
  ~CheckpointReader();
  CheckpointReader(CheckpointReader&&) noexcept;
  CheckpointReader& operator=(CheckpointReader&&) noexcept;

  const std::filesystem::path& dir() const;
  const ShardIndex& index() const { return index_; }
  Tensor read(const std::string& name, const ShardSlice& slice);
  void read_into(const std::string& name, const ShardSlice& slice, const Tensor& out);

 private:
  ShardIndex index_;
  std::unique_ptr<SliceReader> reader_;
};

// Called as a long checkpoint operation goes, after each tensor: how many of
// how many are done, and the bytes of tensor data they held.
using CheckpointProgress = std::function<void(std::size_t tensors_done, std::size_t tensors, std::uint64_t bytes_done)>;

// Writes every tensor of the checkpoint `dir` (either form: sharded, or
// model.safetensors and optimizer.safetensors), whole, into one safetensors
// file `out` (in name order), with the index's metadata updated by
// `metadata`; with `include`, only the tensors it accepts. Streams: at most
// `piece_bytes` of one tensor's rows (or one row) is in memory at a time.
void export_consolidated(const std::filesystem::path& dir, const std::filesystem::path& out,
                         const std::map<std::string, std::string>& metadata = {},
                         const std::function<bool(const std::string& tensor)>& include = {},
                         std::uint64_t piece_bytes = 64ull << 20, const CheckpointProgress& progress = {});

}  // namespace tessera
