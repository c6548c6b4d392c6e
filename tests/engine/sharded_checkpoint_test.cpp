// Sharded checkpoints: blocks of tensors written by several writers, an index,
// reading any region back (resharding), and exporting one consolidated file.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/temp_dir.hpp"
#include "engine/checkpoint/safetensors.hpp"
#include "engine/checkpoint/sharded_checkpoint.hpp"
#include "tests/test_util.hpp"

using namespace tessera;
using namespace tessera::test;
namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

namespace {

using test::TempDir;

ShardSlice box(std::vector<std::int64_t> offset, std::vector<std::int64_t> shape) {
  return ShardSlice{std::move(offset), std::move(shape)};
}

// The region `slice` of `full`, copied element by element (deliberately not the
// run-based copy of read_tensor_slice).
Tensor reference_slice(const Tensor& full, const ShardSlice& slice) {
  Tensor out = Tensor::empty(Shape(slice.shape), full.dtype());
  const std::size_t element = dtype_size(full.dtype());
  const auto strides = contiguous_strides(full.shape());
  const auto* from = static_cast<const char*>(full.raw_data());
  auto* to = static_cast<char*>(out.raw_data());
  const std::size_t rank = slice.shape.size();
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    std::int64_t rest = i, source = 0;
    for (std::size_t d = rank; d-- > 0;) {
      source += (slice.offset[d] + rest % slice.shape[d]) * strides[d];
      rest /= slice.shape[d];
    }
    std::memcpy(to + static_cast<std::size_t>(i) * element,
                from + static_cast<std::size_t>(source) * element, element);
  }
  return out;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.nbytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0);
}

Tensor random_i64(const Shape& shape, unsigned seed) {
  std::mt19937_64 gen(seed);
  std::vector<std::int64_t> values(static_cast<std::size_t>(shape.numel()));
  for (auto& v : values) v = static_cast<std::int64_t>(gen());
  return Tensor::from_vector(values, shape);
}

Tensor random_bf16(const Shape& shape, unsigned seed) {
  const std::vector<float> f = random_tensor(shape, seed).to_vector<float>();
  std::vector<bf16> values;
  for (float v : f) values.push_back(to_bf16(v));
  return Tensor::from_vector(values, shape);
}

// Where each block of each tensor goes: (tensor, writer, slice).
struct Placement {
  std::string tensor;
  int writer;
  ShardSlice slice;
};

// Writes `tensors` split as `plan` says into `dir` by `writers` writers, and
// the index; returns the index as written.
ShardIndex write_sharded(const fs::path& dir, const std::map<std::string, Tensor>& tensors,
                         const std::vector<Placement>& plan, int writers) {
  ShardIndex index;
  index.metadata["note"] = "test";
  for (int writer = 0; writer < writers; ++writer) {
    std::vector<ShardBlock> blocks;
    for (const Placement& p : plan)
      if (p.writer == writer)
        blocks.push_back({p.tensor, p.slice, reference_slice(tensors.at(p.tensor), p.slice)});
    write_shard_file(dir, writer, writers, blocks);
  }
  for (const Placement& p : plan) {
    const Tensor& t = tensors.at(p.tensor);
    add_shard(index, p.tensor, t.dtype(), t.shape().dims(), p.writer, writers, p.slice);
  }
  save_shard_index(dir, index);
  return index;
}

// The tensors of the round-trip tests and their sharding over two writers.
std::map<std::string, Tensor> sample_tensors() {
  return {
      {"mlp/dense/kernel", random_tensor({6, 4}, 1)},
      {"mlp/dense/bias", random_tensor({4}, 2)},
      {"conv/kernel", random_tensor({2, 3, 4}, 3)},
      {"ids", random_i64({5}, 4)},
      {"optimizer/mlp/dense/kernel/m", random_bf16({3, 2}, 5)},
      {"scalar", Tensor::from_vector<float>({42.5f}, {})},
      {"empty", Tensor::empty({0, 3}, DType::f32)},
  };
}

std::vector<Placement> sample_plan() {
  return {
      // 2x2 blocks, two per writer, not in an order the files would suggest.
      {"mlp/dense/kernel", 0, box({0, 0}, {3, 2})},
      {"mlp/dense/kernel", 1, box({0, 2}, {3, 2})},
      {"mlp/dense/kernel", 1, box({3, 0}, {3, 2})},
      {"mlp/dense/kernel", 0, box({3, 2}, {3, 2})},
      {"mlp/dense/bias", 0, box({0}, {4})},  // replicated: written once
      {"conv/kernel", 0, box({0, 0, 0}, {2, 1, 4})},
      {"conv/kernel", 1, box({0, 1, 0}, {2, 2, 2})},
      {"conv/kernel", 1, box({0, 1, 2}, {2, 2, 2})},
      {"ids", 1, box({0}, {2})},
      {"ids", 0, box({2}, {3})},
      {"optimizer/mlp/dense/kernel/m", 0, box({0, 0}, {3, 1})},
      {"optimizer/mlp/dense/kernel/m", 1, box({0, 1}, {3, 1})},
      {"scalar", 1, box({}, {})},
      {"empty", 0, box({0, 0}, {0, 3})},
  };
}

// Every box inside `dims` (all offsets and extents, empty ones included).
std::vector<ShardSlice> all_slices(const std::vector<std::int64_t>& dims) {
  std::vector<ShardSlice> out{box({}, {})};
  for (std::int64_t extent : dims) {
    std::vector<ShardSlice> next;
    for (const ShardSlice& s : out)
      for (std::int64_t begin = 0; begin <= extent; ++begin)
        for (std::int64_t end = begin; end <= extent; ++end) {
          ShardSlice longer = s;
          longer.offset.push_back(begin);
          longer.shape.push_back(end - begin);
          next.push_back(longer);
        }
    out = std::move(next);
  }
  return out;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

Json read_json(const fs::path& path) {
  std::ifstream in(path);
  REQUIRE(in);
  return Json::parse(in);
}

void write_json(const fs::path& path, const Json& j) {
  std::ofstream out(path, std::ios::trunc);
  out << j.dump(2);
  REQUIRE(out);
}

}  // namespace

TEST_CASE("sharded checkpoint: file names and keys") {
  CHECK(shard_file_name(0, 2) == "model-00001-of-00002.safetensors");
  CHECK(shard_file_name(1, 2) == "model-00002-of-00002.safetensors");
  CHECK(shard_file_name(0, 1) == "model-00001-of-00001.safetensors");
  CHECK_THROWS_AS(shard_file_name(2, 2), CheckpointError);
  CHECK_THROWS_AS(shard_file_name(-1, 2), CheckpointError);
  CHECK_THROWS_AS(shard_file_name(0, 0), CheckpointError);
  // Distinct blocks and tensors get distinct keys, even with '@' in names.
  CHECK(shard_key("a/b", box({0, 2}, {3, 2})) != shard_key("a/b", box({2, 0}, {3, 2})));
  CHECK(shard_key("a@1", box({}, {})) != shard_key("a", box({1}, {1})));
  CHECK(shard_key("a", box({1, 2}, {1, 1})) != shard_key("a", box({12}, {1})));
  CHECK(ShardSlice::whole({6, 4}) == box({0, 0}, {6, 4}));
  CHECK(box({1, 0}, {3, 4}).str() == "[1:4, 0:4]");
}

TEST_CASE("sharded checkpoint: round trip of blocks by two writers and every slice") {
  TempDir dir;
  const auto tensors = sample_tensors();
  const ShardIndex written = write_sharded(dir.path(), tensors, sample_plan(), 2);
  CHECK(fs::exists(dir / "model-00001-of-00002.safetensors"));
  CHECK(fs::exists(dir / "model-00002-of-00002.safetensors"));

  const ShardIndex index = load_shard_index(dir.path());
  CHECK(index.metadata == std::map<std::string, std::string>{{"note", "test"}});
  REQUIRE(index.tensors.size() == tensors.size());
  for (const auto& [name, info] : written.tensors) {
    const ShardedTensorInfo& loaded = index.tensors.at(name);
    CHECK(loaded.dtype == info.dtype);
    CHECK(loaded.shape == info.shape);
    REQUIRE(loaded.shards.size() == info.shards.size());
    for (std::size_t i = 0; i < info.shards.size(); ++i) {
      CHECK(loaded.shards[i].file == info.shards[i].file);
      CHECK(loaded.shards[i].key == info.shards[i].key);
      CHECK(loaded.shards[i].slice == info.shards[i].slice);
    }
  }

  // Whole tensors, then every region of every tensor, against the original.
  for (const auto& entry : tensors) {
    const auto& name = entry.first;
    const auto& full = entry.second;
    CAPTURE(name);
    CHECK(same_bytes(read_tensor_slice(dir.path(), index, name, ShardSlice::whole(full.shape().dims())), full));
    for (const ShardSlice& slice : all_slices(full.shape().dims())) {
      CAPTURE(slice.str());
      const Tensor got = read_tensor_slice(dir.path(), index, name, slice);
      if (!same_bytes(got, reference_slice(full, slice))) FAIL_CHECK("the slice differs");
    }
  }
  // The example of a region across all four blocks, spelled out.
  const Tensor& kernel = tensors.at("mlp/dense/kernel");
  const std::vector<float> k = kernel.to_vector<float>();
  const Tensor cut = read_tensor_slice(dir.path(), index, "mlp/dense/kernel", box({1, 1}, {4, 2}));
  CHECK(cut.to_vector<float>() == std::vector<float>{k[5], k[6], k[9], k[10], k[13], k[14], k[17], k[18]});

  // The files hold the blocks under their keys, as safetensors any reader loads.
  const SafetensorsFile first = load_safetensors(dir / "model-00001-of-00002.safetensors");
  bool found = false;
  for (const auto& [key, value] : first.tensors)
    if (key == shard_key("mlp/dense/kernel", box({3, 2}, {3, 2}))) {
      found = true;
      CHECK(same_bytes(value, reference_slice(kernel, box({3, 2}, {3, 2}))));
    }
  CHECK(found);
}

TEST_CASE("sharded checkpoint: the index file follows Hugging Face and adds Tessera blocks") {
  TempDir dir;
  write_sharded(dir.path(), sample_tensors(), sample_plan(), 2);
  const Json j = read_json(dir / kShardIndexFile);
  // weight_map: a split tensor is mapped to its first block's file.
  CHECK(j["weight_map"]["mlp/dense/kernel"] == "model-00001-of-00002.safetensors");
  CHECK(j["weight_map"]["ids"] == "model-00002-of-00002.safetensors");
  CHECK(j["weight_map"]["mlp/dense/bias"] == "model-00001-of-00002.safetensors");
  CHECK(j["weight_map"].size() == sample_tensors().size());
  // total_size: 4 * (24 + 4 + 24 + 1) + 8 * 5 + 2 * 6 bytes.
  CHECK(j["metadata"]["total_size"] == 4 * (24 + 4 + 24 + 1) + 8 * 5 + 2 * 6);
  CHECK(j["metadata"]["note"] == "test");
  const Json& kernel = j["tessera_shards"]["optimizer/mlp/dense/kernel/m"];
  CHECK(kernel["dtype"] == "BF16");
  CHECK(kernel["shape"] == Json::array({3, 2}));
  REQUIRE(kernel["shards"].size() == 2);
  CHECK(kernel["shards"][1]["file"] == "model-00002-of-00002.safetensors");
  CHECK(kernel["shards"][1]["key"] == shard_key("optimizer/mlp/dense/kernel/m", box({0, 1}, {3, 1})));
  CHECK(kernel["shards"][1]["offset"] == Json::array({0, 1}));
  CHECK(kernel["shards"][1]["shape"] == Json::array({3, 1}));
}

TEST_CASE("sharded checkpoint: a region reads only the files and bytes that hold it") {
  TempDir dir;
  const auto tensors = sample_tensors();
  const Tensor& kernel = tensors.at("mlp/dense/kernel");
  write_sharded(dir.path(), tensors, sample_plan(), 2);
  const ShardIndex index = load_shard_index(dir.path());
  const fs::path first = dir / "model-00001-of-00002.safetensors";

  // Garble the bytes of block [3:6, 2:4] in writer 0's file: regions of its
  // other block still read correctly, so those bytes were never read.
  const SafetensorsHeader header = read_safetensors_header(first);
  const SafetensorsEntry* garbled = header.find(shard_key("mlp/dense/kernel", box({3, 2}, {3, 2})));
  REQUIRE(garbled != nullptr);
  {
    std::fstream file(first, std::ios::binary | std::ios::in | std::ios::out);
    file.seekp(static_cast<std::streamoff>(garbled->offset));
    const std::string junk(garbled->bytes, '\x7f');
    file.write(junk.data(), static_cast<std::streamsize>(junk.size()));
    REQUIRE(file);
  }
  const ShardSlice inside = box({0, 0}, {3, 2});
  CHECK(same_bytes(read_tensor_slice(dir.path(), index, "mlp/dense/kernel", inside),
                   reference_slice(kernel, inside)));
  const ShardSlice across = box({2, 1}, {2, 2});  // touches the garbled block
  CHECK_FALSE(same_bytes(read_tensor_slice(dir.path(), index, "mlp/dense/kernel", across),
                         reference_slice(kernel, across)));

  // Without writer 1's file, what lies in writer 0's file still reads.
  fs::remove(dir / "model-00002-of-00002.safetensors");
  CHECK(same_bytes(read_tensor_slice(dir.path(), index, "mlp/dense/kernel", inside),
                   reference_slice(kernel, inside)));
  CHECK(same_bytes(read_tensor_slice(dir.path(), index, "mlp/dense/bias", box({1}, {2})),
                   reference_slice(tensors.at("mlp/dense/bias"), box({1}, {2}))));
  const ShardSlice ids = box({2}, {3});
  CHECK(same_bytes(read_tensor_slice(dir.path(), index, "ids", ids), reference_slice(tensors.at("ids"), ids)));
  // An empty region needs no file at all.
  CHECK(read_tensor_slice(dir.path(), index, "mlp/dense/kernel", box({0, 3}, {6, 0})).numel() == 0);
  // A region that needs the missing file fails naming it and the tensor.
  const std::string message = error_of<CheckpointError>([&] {
    read_tensor_slice(dir.path(), index, "mlp/dense/kernel", box({0, 0}, {3, 3}));
  });
  INFO(message);
  CHECK(contains(message, "model-00002-of-00002.safetensors"));
  CHECK(contains(message, "'mlp/dense/kernel'"));
}

TEST_CASE("sharded checkpoint: an index whose blocks do not tile a tensor is rejected") {
  TempDir dir;
  write_sharded(dir.path(), sample_tensors(), sample_plan(), 2);
  const fs::path path = dir / kShardIndexFile;
  const Json good = read_json(path);
  auto load_after = [&](const std::function<void(Json&)>& edit) {
    Json j = good;
    edit(j);
    write_json(path, j);
    return error_of<CheckpointError>([&] { load_shard_index(dir.path()); });
  };
  auto blocks = [](Json& j, const char* tensor) -> Json& { return j["tessera_shards"][tensor]["shards"]; };

  SUBCASE("overlapping blocks") {
    const std::string message = load_after([&](Json& j) {
      blocks(j, "mlp/dense/kernel")[2]["offset"] = Json::array({2, 0});  // rows 2:5 over rows 0:3
    });
    INFO(message);
    CHECK(contains(message, "tensor 'mlp/dense/kernel'"));
    CHECK(contains(message, "overlaps"));
    CHECK(contains(message, "model-00002-of-00002.safetensors"));
    CHECK(contains(message, kShardIndexFile));
  }
  SUBCASE("a replicated tensor written twice") {
    const std::string message = load_after([&](Json& j) {
      Json copy = blocks(j, "mlp/dense/bias")[0];
      copy["file"] = "model-00002-of-00002.safetensors";
      blocks(j, "mlp/dense/bias").push_back(copy);
    });
    INFO(message);
    CHECK(contains(message, "tensor 'mlp/dense/bias'"));
    CHECK(contains(message, "overlaps"));
  }
  SUBCASE("a gap") {
    const std::string message = load_after([&](Json& j) { blocks(j, "conv/kernel").erase(1); });
    INFO(message);
    CHECK(contains(message, "tensor 'conv/kernel'"));
    CHECK(contains(message, "gap"));
  }
  SUBCASE("a block outside the shape") {
    const std::string message = load_after([&](Json& j) { blocks(j, "ids")[1]["shape"] = Json::array({4}); });
    INFO(message);
    CHECK(contains(message, "tensor 'ids'"));
    CHECK(contains(message, "inside"));
    CHECK(contains(message, "model-00001-of-00002.safetensors"));
  }
  SUBCASE("a block of another rank") {
    const std::string message = load_after([&](Json& j) { blocks(j, "ids")[0]["offset"] = Json::array({0, 0}); });
    INFO(message);
    CHECK(contains(message, "tensor 'ids'"));
  }
  SUBCASE("a negative offset") {
    const std::string message = load_after([&](Json& j) { blocks(j, "ids")[0]["offset"] = Json::array({-1}); });
    INFO(message);
    CHECK(contains(message, "tensor 'ids'"));
    CHECK(contains(message, "'offset'"));
  }
  SUBCASE("an unknown dtype") {
    const std::string message = load_after([&](Json& j) { j["tessera_shards"]["ids"]["dtype"] = "F16"; });
    INFO(message);
    CHECK(contains(message, "tensor 'ids'"));
    CHECK(contains(message, "F16"));
  }
  SUBCASE("a file outside the directory") {
    const std::string message = load_after([&](Json& j) {
      blocks(j, "mlp/dense/bias")[0]["file"] = "../model-00001-of-00002.safetensors";
    });
    INFO(message);
    CHECK(contains(message, "tensor 'mlp/dense/bias'"));
  }
  SUBCASE("a weight_map that disagrees") {
    const std::string message = load_after([&](Json& j) { j["weight_map"].erase("ids"); });
    INFO(message);
    CHECK(contains(message, "tensor 'ids'"));
    CHECK(contains(message, "weight_map"));
  }
  SUBCASE("not an index") {
    std::ofstream(path, std::ios::trunc) << "{\"weight_map\": ";
    const std::string message = error_of<CheckpointError>([&] { load_shard_index(dir.path()); });
    INFO(message);
    CHECK(contains(message, kShardIndexFile));
    CHECK(contains(message, "JSON"));
  }
  SUBCASE("the unedited index loads") {
    CHECK(load_after([](Json&) {}) == "no error");
  }
}

TEST_CASE("sharded checkpoint: saving an index checks it first") {
  TempDir dir;
  ShardIndex index;
  add_shard(index, "w", DType::f32, {4, 2}, 0, 2, box({0, 0}, {2, 2}));
  std::string message = error_of<CheckpointError>([&] { save_shard_index(dir.path(), index); });
  CHECK(contains(message, "tensor 'w'"));
  CHECK(contains(message, "gap"));
  CHECK_FALSE(fs::exists(dir / kShardIndexFile));
  // One tensor, two shapes.
  message = error_of<CheckpointError>([&] { add_shard(index, "w", DType::f32, {4, 3}, 1, 2, box({2, 0}, {2, 2})); });
  CHECK(contains(message, "tensor 'w'"));
  add_shard(index, "w", DType::f32, {4, 2}, 1, 2, box({2, 0}, {2, 2}));
  CHECK(error_of<CheckpointError>([&] { save_shard_index(dir.path(), index); }) == "no error");
}

TEST_CASE("sharded checkpoint: files that disagree with the index are rejected") {
  TempDir dir;
  const auto tensors = sample_tensors();
  write_sharded(dir.path(), tensors, sample_plan(), 2);
  const ShardIndex good = load_shard_index(dir.path());
  const std::string second = "model-00002-of-00002.safetensors";

  SUBCASE("a key missing from the file") {
    ShardIndex index = good;
    index.tensors.at("ids").shards[0].key = "ids@7";
    const std::string message = error_of<CheckpointError>([&] {
      read_tensor_slice(dir.path(), index, "ids", box({0}, {5}));
    });
    INFO(message);
    CHECK(contains(message, "tensor 'ids'"));
    CHECK(contains(message, second));
    CHECK(contains(message, "'ids@7'"));
  }
  SUBCASE("another dtype in the file") {
    // The same split written as I32 while the index says I64.
    std::vector<std::int32_t> values{1, 2};
    write_shard_file(dir.path(), 1, 2,
                     {{"ids", box({0}, {2}), Tensor::from_vector(values, {2})}});
    const std::string message = error_of<CheckpointError>([&] {
      read_tensor_slice(dir.path(), good, "ids", box({1}, {1}));
    });
    INFO(message);
    CHECK(contains(message, "tensor 'ids'"));
    CHECK(contains(message, second));
    CHECK(contains(message, "I32"));
    CHECK(contains(message, "I64"));
  }
  SUBCASE("another block shape in the file") {
    // The file holds ids@0 as [2]; an index that says [1:3] -> ids@0 is [3].
    ShardIndex index = good;
    auto& blocks = index.tensors.at("ids").shards;
    blocks[0].slice = box({0}, {3});
    blocks[1].slice = box({3}, {2});
    check_shard_index(index, "edited");  // consistent in itself
    const std::string message = error_of<CheckpointError>([&] {
      read_tensor_slice(dir.path(), index, "ids", box({0}, {1}));
    });
    INFO(message);
    CHECK(contains(message, "tensor 'ids'"));
    CHECK(contains(message, second));
    CHECK(contains(message, "[3]"));
  }
  SUBCASE("a slice outside the tensor") {
    for (const ShardSlice& slice : {box({5, 0}, {2, 4}), box({0, 0}, {6, 5}), box({-1, 0}, {1, 1}),
                                    box({0}, {1})}) {
      const std::string message = error_of<CheckpointError>([&] {
        read_tensor_slice(dir.path(), good, "mlp/dense/kernel", slice);
      });
      INFO(message);
      CHECK(contains(message, "tensor 'mlp/dense/kernel'"));
      CHECK(contains(message, "slice"));
    }
  }
  SUBCASE("a tensor not in the index") {
    const std::string message = error_of<CheckpointError>([&] { read_tensor_slice(dir.path(), good, "nope", box({}, {})); });
    CHECK(contains(message, "tensor 'nope'"));
  }
  SUBCASE("a corrupt shard file") {
    std::ofstream(dir / second, std::ios::binary | std::ios::trunc) << "not safetensors";
    const std::string message = error_of<CheckpointError>([&] {
      read_tensor_slice(dir.path(), good, "ids", box({0}, {1}));
    });
    INFO(message);
    CHECK(contains(message, "tensor 'ids'"));
    CHECK(contains(message, second));
  }
}

TEST_CASE("sharded checkpoint: writing blocks checks them") {
  TempDir dir;
  std::string message = error_of<CheckpointError>([&] {
    write_shard_file(dir.path(), 0, 1, {{"w", box({0, 0}, {2, 2}), random_tensor({2, 3}, 1)}});
  });
  CHECK(contains(message, "tensor 'w'"));
  CHECK(contains(message, "model-00001-of-00001.safetensors"));
  message = error_of<CheckpointError>([&] {
    write_shard_file(dir.path(), 0, 1,
                     {{"w", box({0, 0}, {2, 2}), random_tensor({2, 2}, 1)},
                      {"w", box({0, 0}, {2, 2}), random_tensor({2, 2}, 2)}});
  });
  CHECK(contains(message, "tensor 'w'"));
  CHECK(contains(message, "twice"));
  message = error_of<CheckpointError>([&] { write_shard_file(dir.path(), 0, 1, {{"w", box({0, 0}, {2, 2}), Tensor()}}); });
  CHECK(contains(message, "tensor 'w'"));
  CHECK(fs::is_empty(dir.path()));  // nothing written by a failed call
}

TEST_CASE("sharded checkpoint: export_consolidated writes whole tensors") {
  TempDir dir;
  const auto tensors = sample_tensors();
  write_sharded(dir.path(), tensors, sample_plan(), 2);
  const fs::path out = dir / "export" / "model.safetensors";
  fs::create_directories(out.parent_path());
  export_consolidated(dir.path(), out, {{"source", "sharded"}});
  const SafetensorsFile file = load_safetensors(out);
  CHECK(file.metadata == std::map<std::string, std::string>{{"note", "test"}, {"source", "sharded"}});
  REQUIRE(file.tensors.size() == tensors.size());
  for (const auto& entry : file.tensors) {
    const auto& name = entry.first;
    const auto& value = entry.second;
    CAPTURE(name);
    REQUIRE(tensors.count(name) == 1);
    CHECK(same_bytes(value, tensors.at(name)));
  }
  // In pieces of one row, each read from the shards that hold it: the same
  // file, with progress once per tensor, after its last row.
  const fs::path by_rows = dir / "export" / "by_rows.safetensors";
  std::vector<std::size_t> done;
  export_consolidated(dir.path(), by_rows, {{"source", "sharded"}}, {}, 1,
                      [&](std::size_t tensors_done, std::size_t tensors, std::uint64_t) {
                        CHECK(tensors == file.tensors.size());
                        done.push_back(tensors_done);
                      });
  std::vector<std::size_t> each(file.tensors.size());
  std::iota(each.begin(), each.end(), std::size_t{1});
  CHECK(done == each);
  auto bytes = [](const fs::path& p) { std::ifstream in(p, std::ios::binary); return std::string(std::istreambuf_iterator<char>(in), {}); };
  CHECK(bytes(by_rows) == bytes(out));
  // A missing shard file fails the export, naming it; no file is left behind.
  fs::remove(out);
  fs::remove(dir / "model-00002-of-00002.safetensors");
  const std::string message = error_of<CheckpointError>([&] { export_consolidated(dir.path(), out); });
  CHECK(contains(message, "model-00002-of-00002.safetensors"));
  CHECK_FALSE(fs::exists(out));
}
