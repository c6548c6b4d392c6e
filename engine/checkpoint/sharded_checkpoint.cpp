#include "engine/checkpoint/sharded_checkpoint.hpp"
#include "engine/checkpoint/json_file.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>

#include "engine/checkpoint/checkpoint.hpp"
#include "engine/checkpoint/safetensors.hpp"
#include "engine/core/file_io.hpp"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

// HF's own field in "metadata": the bytes of all tensors. Derived from the
// tensors, so written but not read back into ShardIndex::metadata.
constexpr const char* kTotalSize = "total_size";

std::string dims_text(const std::vector<std::int64_t>& dims) { return Shape(dims).str(); }

std::string errno_text(int error) { return std::generic_category().message(error); }

// The elements of a box, or -1 when they do not fit in an int64.
std::int64_t volume(const std::vector<std::int64_t>& dims) {
  std::int64_t n = 1;
  for (std::int64_t d : dims)
    if (__builtin_mul_overflow(n, d, &n)) return -1;
  return n;
}

// Whether two boxes of one tensor share an element.
bool overlap(const ShardSlice& a, const ShardSlice& b) {
  for (std::size_t d = 0; d < a.offset.size(); ++d)
    if (std::max(a.offset[d], b.offset[d]) >=
        std::min(a.offset[d] + a.shape[d], b.offset[d] + b.shape[d]))
      return false;
  return true;
}

// Whether box `a` lies wholly inside box `b`.
bool inside(const ShardSlice& a, const ShardSlice& b) {
  for (std::size_t d = 0; d < a.offset.size(); ++d)
    if (a.offset[d] < b.offset[d] || a.offset[d] + a.shape[d] > b.offset[d] + b.shape[d]) return false;
  return true;
}

// "" when `slice` is a box of rank dims.size() inside dims; else what is wrong.
std::string slice_problem(const ShardSlice& slice, const std::vector<std::int64_t>& dims) {
  if (slice.offset.size() != dims.size() || slice.shape.size() != dims.size())
    return "has offset " + dims_text(slice.offset) + " and shape " + dims_text(slice.shape) +
           ", not " + std::to_string(dims.size()) + " entries each as the tensor's rank";
  for (std::size_t d = 0; d < dims.size(); ++d)
    if (slice.offset[d] < 0 || slice.shape[d] < 0 || slice.offset[d] > dims[d] - slice.shape[d])
      return "does not lie inside the tensor's shape " + dims_text(dims) + " (dimension " +
             std::to_string(d) + ")";
  return "";
}

// A file name inside the checkpoint directory: no folders, nothing outside it.
bool plain_file_name(const std::string& file) {
  return !file.empty() && file != "." && file != ".." && file.find('/') == std::string::npos;
}

std::string describe_block(const ShardEntry& block) {
  return "block " + block.slice.str() + " in '" + block.file + "'";
}

// Non-negative integers of a JSON array, or nullopt.
std::optional<std::vector<std::int64_t>> json_dims(const Json& value) {
  if (!value.is_array()) return std::nullopt;
  std::vector<std::int64_t> dims;
  for (const Json& item : value) {
    if (!item.is_number_unsigned() ||
        item.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      return std::nullopt;
    dims.push_back(item.get<std::int64_t>());
  }
  return dims;
}

}  // namespace

// Reads regions of a checkpoint's tensors. Each file is opened, and its header
// read and checked, once, when a region first needs it.
class SliceReader {
 public:
  explicit SliceReader(const fs::path& dir) : dir_(dir) {}
  const fs::path& dir() const { return dir_; }

  Tensor read(const ShardIndex& index, const std::string& name, const ShardSlice& slice) {
    Tensor out = Tensor::empty(Shape(slice.shape), checked(index, name, slice).dtype);
    read_into(index, name, slice, out);
    return out;
  }

  void read_into(const ShardIndex& index, const std::string& name, const ShardSlice& slice, const Tensor& out) {
    auto error = [&](const std::string& message) { return tensor_error(name, message); };
    const ShardedTensorInfo& info = checked(index, name, slice);

    if (out.dtype() != info.dtype || out.shape() != Shape(slice.shape) || out.device().kind != DeviceKind::cpu)
      throw error("the slice " + slice.str() + " is read into " + out.describe() + ", not a host " +
                  std::string(dtype_name(info.dtype)) + dims_text(slice.shape));
    if (out.numel() == 0) return;  // nothing to read, no file to open
    for (const ShardEntry& block : info.shards) {
      if (!overlap(block.slice, slice)) continue;
      File& file = open(block.file, [&](const std::string& m) { return error(m); });
      const fs::path path = dir_ / block.file;
      const SafetensorsEntry* entry = file.header.find(block.key);
      if (entry == nullptr)
        throw error("'" + path.string() + "' has no tensor '" + block.key + "' (its block " +
                    block.slice.str() + ")");
      if (entry->dtype != info.dtype || entry->shape != block.slice.shape)
        throw error("'" + path.string() + "' holds '" + block.key + "' as " +
                    safetensors_dtype_name(entry->dtype) + dims_text(entry->shape) +
                    " but the index says its block " + block.slice.str() + " is " +
                    safetensors_dtype_name(info.dtype) + dims_text(block.slice.shape));
      // A block read whole is checked against its CRC-32 as it is copied
      // (a part of one cannot be: tessera verify reads those whole).
      const bool check = entry->crc32.has_value() && inside(block.slice, slice);
      std::uint32_t crc = 0;
      copy_overlap(file, path, *entry, block.slice, slice, out, check ? &crc : nullptr,
                   [&](const std::string& m) { return error(m); });
      if (check && crc != *entry->crc32)
        throw error("its block " + block.slice.str() + " in '" + path.string() + "': " +
                    checksum_mismatch(*entry->crc32, crc));
    }
  }

 private:
  struct File {
    SafetensorsHeader header;
    std::ifstream in;
  };

  CheckpointError tensor_error(const std::string& name, const std::string& message) const {
    return CheckpointError("read_tensor_slice: '" + dir_.string() + "': tensor '" + name + "': " + message);
  }

  // The index's entry of `name`, which `slice` lies inside.
  const ShardedTensorInfo& checked(const ShardIndex& index, const std::string& name, const ShardSlice& slice) const {
    const auto found = index.tensors.find(name);
    if (found == index.tensors.end()) throw tensor_error(name, "not in the index");
    if (std::string problem = slice_problem(slice, found->second.shape); !problem.empty())
      throw tensor_error(name, "the slice " + slice.str() + " asked for " + problem);
    return found->second;
  }

  template <typename MakeError>
  File& open(const std::string& name, const MakeError& error) {
    if (auto it = files_.find(name); it != files_.end()) return it->second;
    const fs::path path = dir_ / name;
    File file;
    try {
      file.header = read_safetensors_header(path);
    } catch (const CheckpointError& e) {
      throw error(std::string("cannot read the header of '") + path.string() + "': " + e.what());
    }
    file.in.open(path, std::ios::binary);
    if (!file.in) throw error("cannot open '" + path.string() + "': " + errno_text(errno));
    return files_.emplace(name, std::move(file)).first->second;
  }

  // Copies the part of `block` (the bytes of `entry` in `file`) that lies in
  // `slice` into `out` (the region `slice`). Both are row-major, so the
  // overlap is a set of contiguous runs: its innermost dimension, joined with
  // the ones outside it for as long as the overlap spans both boxes whole.
  template <typename MakeError>
  static void copy_overlap(File& file, const fs::path& path, const SafetensorsEntry& entry,
                           const ShardSlice& block, const ShardSlice& slice, const Tensor& out, std::uint32_t* crc,
                           const MakeError& error) {
    const std::size_t rank = slice.shape.size();
    std::vector<std::int64_t> begin(rank), extent(rank);
    for (std::size_t d = 0; d < rank; ++d) {
      begin[d] = std::max(block.offset[d], slice.offset[d]);
      extent[d] = std::min(block.offset[d] + block.shape[d], slice.offset[d] + slice.shape[d]) - begin[d];
    }
    // Dimensions [outer, rank) form one run of `run` elements.
    std::size_t outer = rank;
    std::int64_t run = 1;
    while (outer > 0) {
      --outer;
      run *= extent[outer];
      if (extent[outer] != block.shape[outer] || extent[outer] != slice.shape[outer]) break;
    }
    const std::vector<std::int64_t> block_strides = contiguous_strides(Shape(block.shape));
    const std::vector<std::int64_t> out_strides = contiguous_strides(Shape(slice.shape));
    const auto element = static_cast<std::int64_t>(dtype_size(entry.dtype));
    auto* out_bytes = static_cast<char*>(out.raw_data());

    std::vector<std::int64_t> index(outer, 0);  // position in the overlap's outer dimensions
    while (true) {
      std::int64_t from = 0, to = 0;
      for (std::size_t d = 0; d < rank; ++d) {
        const std::int64_t at = begin[d] + (d < outer ? index[d] : 0);
        from += (at - block.offset[d]) * block_strides[d];
        to += (at - slice.offset[d]) * out_strides[d];
      }
      const auto file_offset = static_cast<std::streamoff>(entry.offset + static_cast<std::uint64_t>(from * element));
      file.in.seekg(file_offset);
      file.in.read(out_bytes + to * element, static_cast<std::streamsize>(run * element));
      if (!file.in) {
        file.in.clear();
        throw error("cannot read " + std::to_string(run * element) + " bytes at offset " +
                    std::to_string(file_offset) + " of '" + path.string() +
                    "' (the file changed since its header was read?)");
      }
      // Runs come in the block's order: with the block inside the slice,
      // they are its bytes as the file holds them.
      if (crc != nullptr) *crc = crc32_of(out_bytes + to * element, static_cast<std::size_t>(run * element), *crc);
      std::size_t d = outer;  // next outer position, last dimension fastest
      while (d > 0 && ++index[d - 1] == extent[d - 1]) index[--d] = 0;
      if (d == 0) break;
    }
  }

  fs::path dir_;
  std::map<std::string, File> files_;
};

ShardSlice ShardSlice::whole(const std::vector<std::int64_t>& dims) {
  return ShardSlice{std::vector<std::int64_t>(dims.size(), 0), dims};
}

std::string ShardSlice::str() const {
  std::string text = "[";
  for (std::size_t d = 0; d < offset.size(); ++d) {
    if (d > 0) text += ", ";
    text += std::to_string(offset[d]) + ":" +
            (d < shape.size() ? std::to_string(offset[d] + shape[d]) : std::string("?"));
  }
  return text + "]";
}

std::string shard_file_name(int writer, int writers) {
  if (writers < 1 || writers > 99999 || writer < 0 || writer >= writers)
    throw CheckpointError("shard_file_name: writer " + std::to_string(writer) + " of " +
                          std::to_string(writers) + " (writers count from 0, up to 99999 of them)");
  char name[64];
  std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", writer + 1, writers);
  return name;
}

std::string shard_key(const std::string& tensor, const ShardSlice& slice) {
  // Offsets are digits and commas, so the last '@' ends the tensor's name:
  // distinct (tensor, offset) pairs give distinct keys.
  std::string key = tensor + "@";
  for (std::size_t d = 0; d < slice.offset.size(); ++d)
    key += (d > 0 ? "," : "") + std::to_string(slice.offset[d]);
  return key;
}

void write_shard_file(const fs::path& dir, int writer, int writers,
                      const std::vector<ShardBlock>& blocks) {
  const fs::path path = dir / shard_file_name(writer, writers);
  NamedTensors named;
  named.reserve(blocks.size());
  std::set<std::string> keys;
  for (const ShardBlock& block : blocks) {
    auto error = [&](const std::string& message) {
      return CheckpointError("write_shard_file: '" + path.string() + "': tensor '" + block.tensor +
                             "': block " + block.slice.str() + ": " + message);
    };
    if (!block.value.defined()) throw error("the value is undefined (it has no storage)");
    if (block.slice.offset.size() != block.slice.shape.size())
      throw error("offset " + dims_text(block.slice.offset) + " and shape " +
                  dims_text(block.slice.shape) + " differ in rank");
    for (std::size_t d = 0; d < block.slice.offset.size(); ++d)
      if (block.slice.offset[d] < 0) throw error("a negative offset");
    if (block.value.shape().dims() != block.slice.shape)
      throw error("the value is " + block.value.describe() + ", not of the block's shape " +
                  dims_text(block.slice.shape));
    std::string key = shard_key(block.tensor, block.slice);
    if (!keys.insert(key).second) throw error("written twice");
    named.emplace_back(std::move(key), block.value);
  }
  save_safetensors(path, named);
}

void add_shard(ShardIndex& index, const std::string& tensor, DType dtype,
               const std::vector<std::int64_t>& shape, int writer, int writers,
               const ShardSlice& slice) {
  auto [it, added] = index.tensors.try_emplace(tensor, ShardedTensorInfo{dtype, shape, {}});
  if (!added && (it->second.dtype != dtype || it->second.shape != shape))
    throw CheckpointError("add_shard: tensor '" + tensor + "' is " +
                          std::string(dtype_name(it->second.dtype)) + dims_text(it->second.shape) +
                          " in the index but " + std::string(dtype_name(dtype)) + dims_text(shape) +
                          " for the block " + slice.str());
  it->second.shards.push_back({shard_file_name(writer, writers), shard_key(tensor, slice), slice});
}

void check_shard_index(const ShardIndex& index, const std::string& where) {
  std::set<std::pair<std::string, std::string>> used;  // (file, key)
  for (const auto& [name, info] : index.tensors) {
    auto error = [&, &name = name](const std::string& message) {  // (Clang 14 cannot capture a binding implicitly)
      return CheckpointError(where + ": tensor '" + name + "': " + message);
    };
    for (std::int64_t d : info.shape)
      if (d < 0) throw error("shape " + dims_text(info.shape) + " has a negative extent");
    const std::int64_t numel = volume(info.shape);
    if (numel < 0) throw error("shape " + dims_text(info.shape) + " is too large");
    if (info.shards.empty()) throw error("has no blocks");

    std::int64_t covered = 0;
    for (std::size_t i = 0; i < info.shards.size(); ++i) {
      const ShardEntry& block = info.shards[i];
      if (!plain_file_name(block.file))
        throw error("block " + block.slice.str() + ": '" + block.file +
                    "' is not the name of a file in the checkpoint directory");
      if (block.key.empty()) throw error(describe_block(block) + " has an empty key");
      if (!used.insert({block.file, block.key}).second)
        throw error(describe_block(block) + ": key '" + block.key +
                    "' names another block of that file too");
      if (std::string problem = slice_problem(block.slice, info.shape); !problem.empty())
        throw error("block in '" + block.file + "' " + problem);
      const std::int64_t size = volume(block.slice.shape);
      if (size == 0) continue;
      for (std::size_t j = 0; j < i; ++j)
        if (overlap(info.shards[j].slice, block.slice))
          throw error(describe_block(block) + " overlaps " + describe_block(info.shards[j]) +
                      " (every element is written once; a replicated tensor by one writer)");
      covered += size;  // no overflow: disjoint boxes inside the tensor
    }
    if (covered != numel)
      throw error("its blocks cover " + std::to_string(covered) + " of its " + std::to_string(numel) +
                  " elements: a gap (a block missing from the index?)");
  }
}

void save_shard_index(const fs::path& dir, const ShardIndex& index) {
  const fs::path path = dir / kShardIndexFile;
  const std::string where = "save_shard_index: '" + path.string() + "'";
  check_shard_index(index, where);
  if (index.metadata.count(kTotalSize))
    throw CheckpointError(where + ": metadata '" + kTotalSize + "' is reserved (the index computes it)");

  std::uint64_t total_size = 0;
  Json weight_map = Json::object(), shards = Json::object();
  for (const auto& [name, info] : index.tensors) {
    total_size += static_cast<std::uint64_t>(volume(info.shape)) * dtype_size(info.dtype);
    // Hugging Face maps each tensor to the one file holding it; a tensor split
    // over several files is mapped to its first block's (HF tools cannot read
    // such a tensor whole anyway; Tessera reads "tessera_shards").
    weight_map[name] = info.shards.front().file;
    Json blocks = Json::array();
    for (const ShardEntry& block : info.shards)
      blocks.push_back(Json{{"file", block.file},
                            {"key", block.key},
                            {"offset", block.slice.offset},
                            {"shape", block.slice.shape}});
    shards[name] = Json{{"dtype", safetensors_dtype_name(info.dtype)},
                        {"shape", info.shape},
                        {"shards", std::move(blocks)}};
  }
  Json metadata = Json::object();
  metadata[kTotalSize] = total_size;
  for (const auto& [key, value] : index.metadata) metadata[key] = value;
  const Json j{{"metadata", std::move(metadata)},
               {"weight_map", std::move(weight_map)},
               {"tessera_shards", std::move(shards)}};
  std::string text;
  try {
    text = j.dump(2) + "\n";
  } catch (const nlohmann::json::exception& e) {  // names and metadata must be UTF-8
    throw CheckpointError(where + ": cannot encode the index: " + e.what());
  }
  try {
    write_file_atomic(path, {{text.data(), text.size()}}, "save_shard_index");
  } catch (const DataError& e) {
    throw CheckpointError(e.what());
  }
}

ShardIndex load_shard_index(const fs::path& dir) {
  const fs::path path = dir / kShardIndexFile;
  const std::string where = "load_shard_index: '" + path.string() + "'";
  auto error = [&](const std::string& message) { return CheckpointError(where + ": " + message); };

  const Json j = read_json_object(path, where);

  ShardIndex index;
  if (j.contains("metadata")) {
    const Json& metadata = j["metadata"];
    if (!metadata.is_object()) throw error("'metadata' is not a JSON object");
    for (const auto& [key, value] : metadata.items()) {
      if (key == kTotalSize && value.is_number()) continue;
      if (!value.is_string())
        throw error("'metadata' maps strings to strings, but '" + key + "' is " + value.type_name());
      index.metadata[key] = value.get<std::string>();
    }
  }
  if (!j.contains("tessera_shards") || !j["tessera_shards"].is_object())
    throw error("'tessera_shards' is missing or not a JSON object (an index not written by Tessera?)");
  for (const auto& [name, value] : j["tessera_shards"].items()) {
    auto tensor_error = [&, &name = name](const std::string& message) {  // (as above)
      return error("tensor '" + name + "': " + message);
    };
    if (!value.is_object()) throw tensor_error("the entry is not a JSON object");
    ShardedTensorInfo info;
    if (!value.contains("dtype") || !value["dtype"].is_string())
      throw tensor_error("'dtype' is missing or not a string");
    const std::optional<DType> dtype = parse_safetensors_dtype(value["dtype"].get<std::string>());
    if (!dtype)
      throw tensor_error("dtype '" + value["dtype"].get<std::string>() +
                         "' is not one Tessera reads (F32, BF16, I32, I64)");
    info.dtype = *dtype;
    auto dims = [&](const Json& entry, const char* key, const std::string& what) {
      std::optional<std::vector<std::int64_t>> parsed;
      if (entry.contains(key)) parsed = json_dims(entry[key]);
      if (!parsed) throw tensor_error(what + "'" + key + "' is missing or not a list of sizes");
      return *parsed;
    };
    info.shape = dims(value, "shape", "");
    if (!value.contains("shards") || !value["shards"].is_array())
      throw tensor_error("'shards' is missing or not a list");
    for (const Json& block : value["shards"]) {
      if (!block.is_object()) throw tensor_error("a block is not a JSON object");
      for (const char* key : {"file", "key"})
        if (!block.contains(key) || !block[key].is_string())
          throw tensor_error(std::string("a block's '") + key + "' is missing or not a string");
      ShardEntry entry;
      entry.file = block["file"].get<std::string>();
      entry.key = block["key"].get<std::string>();
      const std::string what = "block '" + entry.key + "' in '" + entry.file + "': ";
      entry.slice.offset = dims(block, "offset", what);
      entry.slice.shape = dims(block, "shape", what);
      info.shards.push_back(std::move(entry));
    }
    index.tensors.emplace(name, std::move(info));
  }

  // HF tools read only "weight_map": it must agree with "tessera_shards".
  if (!j.contains("weight_map") || !j["weight_map"].is_object())
    throw error("'weight_map' is missing or not a JSON object");
  for (const auto& [name, file] : j["weight_map"].items()) {
    const auto it = index.tensors.find(name);
    if (it == index.tensors.end())
      throw error("tensor '" + name + "' is in 'weight_map' but not in 'tessera_shards'");
    if (!file.is_string() || it->second.shards.empty() ||
        file.get<std::string>() != it->second.shards.front().file)
      throw error("tensor '" + name + "': 'weight_map' maps it to " + file.dump() +
                  ", not the file of its first block");
  }
  for (const auto& [name, info] : index.tensors)
    if (!j["weight_map"].contains(name))
      throw error("tensor '" + name + "' is in 'tessera_shards' but not in 'weight_map'");

  check_shard_index(index, where);
  return index;
}

CheckpointReader::CheckpointReader(std::filesystem::path dir, ShardIndex index)
    : index_(std::move(index)), reader_(std::make_unique<SliceReader>(dir)) {}
CheckpointReader::~CheckpointReader() = default;
CheckpointReader::CheckpointReader(CheckpointReader&&) noexcept = default;
CheckpointReader& CheckpointReader::operator=(CheckpointReader&&) noexcept = default;

const std::filesystem::path& CheckpointReader::dir() const { return reader_->dir(); }

Tensor CheckpointReader::read(const std::string& name, const ShardSlice& slice) { return reader_->read(index_, name, slice); }

void CheckpointReader::read_into(const std::string& name, const ShardSlice& slice, const Tensor& out) {
  reader_->read_into(index_, name, slice, out);
}

Tensor read_tensor_slice(const fs::path& dir, const ShardIndex& index, const std::string& name,
                         const ShardSlice& slice) {
  return SliceReader(dir).read(index, name, slice);
}

void read_tensor_slice_into(const fs::path& dir, const ShardIndex& index, const std::string& name,
                            const ShardSlice& slice, const Tensor& out) {
  SliceReader(dir).read_into(index, name, slice, out);
}

void export_consolidated(const fs::path& dir, const fs::path& out, const std::map<std::string, std::string>& metadata,
                         const std::function<bool(const std::string& tensor)>& include, std::uint64_t piece_bytes,
                         const CheckpointProgress& progress) {
  const ShardIndex index = checkpoint_index(dir);
  SliceReader reader(dir);
  std::vector<TensorSpec> entries;
  for (const auto& [name, info] : index.tensors)
    if (!include || include(name)) entries.push_back({name, info.dtype, Shape(info.shape)});
  std::map<std::string, std::string> merged = index.metadata;
  for (const auto& [key, value] : metadata) merged[key] = value;
  // Pieces of rows of one tensor in memory at a time, each read as it is written.
  std::uint64_t bytes_done = 0;
  const RowsOf rows = [&](std::size_t i, std::int64_t begin, std::int64_t end) {
    ShardSlice slice = ShardSlice::whole(entries[i].shape.dims());
    if (!slice.shape.empty()) {
      slice.offset[0] = begin;
      slice.shape[0] = end - begin;
    }
    Tensor piece = reader.read(index, entries[i].name, slice);
    bytes_done += piece.nbytes();
    // The tensor's last rows: it is done once they are written, which the
    // next piece's read follows (the report is a piece early at most).
    if (progress && (entries[i].shape.rank() == 0 || end == entries[i].shape.dims()[0]))
      progress(i + 1, entries.size(), bytes_done);
    return piece;
  };
  save_safetensors(out, entries, rows, piece_bytes, merged);
}

}  // namespace tessera
