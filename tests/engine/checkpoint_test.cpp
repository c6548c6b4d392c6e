// safetensors files, checkpoint directories, and resuming a run from one.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/checkpoint/checkpoint.hpp"
#include "engine/checkpoint/safetensors.hpp"
#include "engine/config/config.hpp"
#include "engine/data/synthetic.hpp"
#include "engine/run/trainer.hpp"
#include "tests/temp_dir.hpp"
#include "tests/test_util.hpp"
#include "tests/source_tree.hpp"

using namespace tessera;
using namespace tessera::test;
namespace fs = std::filesystem;

namespace {

using test::TempDir;

std::vector<std::uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out);
}

// A safetensors file with this header text (padded) and these data bytes.
void write_safetensors_raw(const fs::path& path, std::string header, std::size_t data_bytes) {
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes += static_cast<char>(header.size() >> (8 * i));
  bytes += header;
  bytes.append(data_bytes, '\x42');
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

template <typename T>
Tensor tensor_of(const std::vector<T>& values, const Shape& shape) {
  return Tensor::from_vector(values, shape);
}

// One tensor of every dtype, a scalar, and empty tensors.
NamedTensors sample_tensors() {
  return {
      {"dense/kernel", random_tensor({2, 3}, 7)},
      {"bf16", tensor_of<bf16>({to_bf16(1.5f), to_bf16(-2.0f), to_bf16(0.1f), to_bf16(3.0f)}, {4})},
      {"ids", tensor_of<std::int32_t>({1, -2, 3}, {3, 1})},
      {"big", tensor_of<std::int64_t>({std::int64_t{1} << 40, -7}, {2})},
      {"scalar", tensor_of<float>({42.5f}, {})},
      {"empty", Tensor::empty({0, 5}, DType::f32)},
      {"empty_ids", Tensor::empty({0}, DType::i64)},
      {"after_empty", tensor_of<float>({-1.25f, 8.0f}, {2})},
  };
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.nbytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0);
}

std::string load_error(const fs::path& path) {
  try {
    load_safetensors(path);
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "no error";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The model and training of training_test.cpp, with Adam and a cosine
// schedule so that the step counter matters.
Model classifier(int units = 16, bool extra_layer = false) {
  return Model::from_config(ConfigNode::parse(
      "model:\n"
      "  name: clf\n"
      "  inputs: [{name: x, shape: [8]}]\n"
      "  layers:\n"
      "    - {type: Dense, units: " + std::to_string(units) + ", activation: relu}\n" +
      (extra_layer ? "    - {type: Dense, units: 8, activation: relu}\n" : "") +
      "    - {type: Dense, units: 3}\n")["model"]);
}

TrainingSpec spec(const std::string& extra = "", int epochs = 4, int seed = 3) {
  return parse_training(ConfigNode::parse(
      "training: {loss: {type: sparse_categorical_crossentropy, from_logits: true}, "
      "optimizer: {type: adam, learning_rate: 0.01, schedule: {type: cosine, warmup_steps: 5}}, "
      "metrics: [accuracy], batch_size: 16, epochs: " + std::to_string(epochs) +
      ", seed: " + std::to_string(seed) + extra + "}")["training"]);
}

// Every variable's bytes, by path.
std::map<std::string, std::vector<std::uint8_t>> snapshot(const VariableStore& store) {
  std::map<std::string, std::vector<std::uint8_t>> bytes;
  for (const auto& v : store.variables()) {
    const auto* p = static_cast<const std::uint8_t*>(v.value.raw_data());
    bytes[v.path].assign(p, p + v.value.nbytes());
  }
  return bytes;
}

struct SimulatedCrash {};

TrainingState at(std::int64_t step, std::int64_t epoch = 0, std::int64_t batch = 0, std::uint64_t seed = 0) {
  TrainingState state;
  state.step = step;
  state.epoch = epoch;
  state.batch = batch;
  state.seed = seed;
  return state;
}

}  // namespace

TEST_CASE("checkpoint: safetensors round trip of every dtype, a scalar and empty tensors") {
  TempDir tmp;
  NamedTensors tensors = sample_tensors();
  std::map<std::string, std::string> metadata{{"format", "tessera"}, {"note", "ünïcode ok"}};
  save_safetensors(tmp / "t.safetensors", tensors, metadata);
  CHECK(tmp.entries() == std::vector<std::string>{"t.safetensors"});  // no temporary left
  SafetensorsFile file = load_safetensors(tmp / "t.safetensors");
  CHECK(file.metadata == metadata);
  REQUIRE(file.tensors.size() == tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    CAPTURE(tensors[i].first);
    CHECK(file.tensors[i].first == tensors[i].first);  // the writer's order
    CHECK(same_bytes(file.tensors[i].second, tensors[i].second));
  }
  CHECK(file.tensors[4].second.rank() == 0);
  CHECK(file.tensors[5].second.shape() == Shape{0, 5});

  // No tensors at all is a valid file too.
  save_safetensors(tmp / "none.safetensors", {});
  CHECK(load_safetensors(tmp / "none.safetensors").tensors.empty());
}

TEST_CASE("checkpoint: a Tessera safetensors file parses with an independent reader") {
  TempDir tmp;
  NamedTensors tensors = sample_tensors();
  save_safetensors(tmp / "t.safetensors", tensors, {{"format", "tessera"}});
  std::vector<std::uint8_t> bytes = read_bytes(tmp / "t.safetensors");
  REQUIRE(bytes.size() >= 8);
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t{bytes[i]} << (8 * i);
  CHECK(n % 8 == 0);  // padded as the reference writer pads
  REQUIRE(8 + n <= bytes.size());
  std::string text(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  CHECK(text.front() == '{');
  nlohmann::json header = nlohmann::json::parse(text);
  CHECK(header["__metadata__"]["format"] == "tessera");
  CHECK(header["__metadata__"].size() == 2);  // and the checksums (the Python reader below checks them)
  CHECK(header["__metadata__"].contains("tessera.crc32"));
  CHECK(header.size() == tensors.size() + 1);
  const std::map<DType, std::string> names{{DType::f32, "F32"}, {DType::bf16, "BF16"}, {DType::i32, "I32"}, {DType::i64, "I64"}};
  std::uint64_t offset = 0;
  for (const auto& named : tensors) {
    const auto& name = named.first;
    const auto& t = named.second;
    CAPTURE(name);
    const nlohmann::json& entry = header.at(name);
    CHECK(entry["dtype"] == names.at(t.dtype()));
    CHECK(entry["shape"] == nlohmann::json(t.shape().dims()));
    std::uint64_t begin = entry["data_offsets"][0], end = entry["data_offsets"][1];
    CHECK(begin == offset);  // in the given order, back to back
    CHECK(end - begin == t.nbytes());
    REQUIRE(8 + n + end <= bytes.size());
    CHECK((t.nbytes() == 0 || std::memcmp(bytes.data() + 8 + n + begin, t.raw_data(), t.nbytes()) == 0));
    offset = end;
  }
  CHECK(8 + n + offset == bytes.size());
}

TEST_CASE("checkpoint: a Tessera safetensors file reads in Python with only json and struct") {
  if (std::system("python3 -c 'import json, struct' > /dev/null 2>&1") != 0)
    FAIL("python3 is not on PATH (or cannot import json and struct): this test runs "
         "tests/python/read_safetensors.py, an independent reader; install python3");
  TempDir tmp;
  NamedTensors tensors = sample_tensors();
  const fs::path file = tmp / "py.safetensors", out = tmp / "py.out";
  save_safetensors(file, tensors, {{"format", "tessera"}});
  const std::string script = test::source_path("tests/python/read_safetensors.py");
  const std::string command = "python3 '" + script + "' '" + file.string() + "' > '" + out.string() + "' 2>&1";
  int status = std::system(command.c_str());
  std::ifstream in(out);
  std::stringstream printed;
  printed << in.rdbuf();
  INFO("python printed:\n" << printed.str());
  REQUIRE(status == 0);

  std::map<std::string, std::vector<std::string>> rows;  // name -> dtype, shape, sum
  int checksum_lines = 0;
  std::string line;
  std::istringstream lines(printed.str());
  while (std::getline(lines, line)) {
    std::vector<std::string> fields;
    std::istringstream cells(line);
    for (std::string cell; std::getline(cells, cell, '\t');) fields.push_back(cell);
    REQUIRE(fields.size() >= 2);
    if (fields[0] == "__metadata__") {
      CHECK(fields[1] == "format=tessera");
      continue;
    }
    if (fields[0] == "__checksums__") {  // zlib's CRC-32 of every tensor, as Tessera recorded it
      CHECK(fields[1] == std::to_string(tensors.size()) + " matched");
      checksum_lines++;
      continue;
    }
    REQUIRE(fields.size() == 4);
    rows[fields[0]] = {fields[1], fields[2], fields[3]};
  }
  REQUIRE(rows.size() == tensors.size());
  CHECK(checksum_lines == 1);
  for (const auto& named : tensors) {
    const auto& name = named.first;
    const auto& t = named.second;
    CAPTURE(name);
    const auto& row = rows.at(name);
    CHECK(row[0] == safetensors_dtype_name(t.dtype()));
    CHECK(row[1] == t.shape().str());
    switch (t.dtype()) {
      case DType::f32: {
        double sum = 0;
        for (float v : t.to_vector<float>()) sum += v;
        CHECK(std::stod(row[2]) == doctest::Approx(sum).epsilon(1e-12));
        break;
      }
      case DType::bf16: {
        double sum = 0;
        for (bf16 v : t.to_vector<bf16>()) sum += to_f32(v);
        CHECK(std::stod(row[2]) == doctest::Approx(sum).epsilon(1e-12));
        break;
      }
      case DType::i32: {
        long long sum = 0;
        for (std::int32_t v : t.to_vector<std::int32_t>()) sum += v;
        CHECK(std::stoll(row[2]) == sum);
        break;
      }
      case DType::i64: {
        long long sum = 0;
        for (std::int64_t v : t.to_vector<std::int64_t>()) sum += v;
        CHECK(std::stoll(row[2]) == sum);
        break;
      }
    }
  }
}

TEST_CASE("checkpoint: corrupt safetensors files are CheckpointErrors naming the file and tensor") {
  TempDir tmp;
  const fs::path good = tmp / "good.safetensors";
  save_safetensors(good, {{"w", random_tensor({4, 4}, 1)}, {"b", random_tensor({4}, 2)}});
  const std::vector<std::uint8_t> bytes = read_bytes(good);
  const fs::path bad = tmp / "bad.safetensors";
  auto check_error = [&](const std::string& expected, const std::string& tensor = "") {
    std::string message = load_error(bad);
    INFO(message);
    CHECK(contains(message, bad.string()));
    CHECK(contains(message, expected));
    if (!tensor.empty()) CHECK(contains(message, "tensor '" + tensor + "'"));
  };

  SUBCASE("truncated in the data") {
    write_bytes(bad, {bytes.begin(), bytes.end() - 4});
    check_error("run past the end of the data", "b");
  }
  SUBCASE("a flipped data byte: the checksum saved with the tensor catches it") {
    std::vector<std::uint8_t> flipped = bytes;
    REQUIRE(flipped.size() > 8);
    flipped[flipped.size() - 1] ^= 0x40;  // the last byte of 'b', a weight that still parses
    write_bytes(bad, flipped);
    check_error("its bytes do not match the checksum saved with them", "b");
  }
  SUBCASE("damaged header bytes are echoed escaped, never raw") {
    write_safetensors_raw(bad, "{\"w\xff\x01\": 1}", 0);
    check_error("ill-formed UTF-8 byte; last read: '\"w\\xff'");
    CHECK(load_error(bad).find('\xff') == std::string::npos);
    write_safetensors_raw(bad, R"({"w\u0001": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}})", 8);
    check_error("tensor 'w\\x01': dtype 'F64'");
  }
  SUBCASE("a checksum that is not one") {
    write_safetensors_raw(bad, R"({"__metadata__": {"tessera.crc32": "{\"w\": 7}"}, "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 4);
    check_error("not 8 hex digits", "w");
  }
  SUBCASE("truncated in the header length") {
    write_bytes(bad, {bytes.begin(), bytes.begin() + 5});
    check_error("fewer than the 8");
  }
  SUBCASE("truncated in the header") {
    write_bytes(bad, {bytes.begin(), bytes.begin() + 20});
    check_error("header length");
  }
  SUBCASE("missing") { check_error("cannot open"); }
  SUBCASE("bad JSON") {
    write_safetensors_raw(bad, R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]})", 4);
    check_error("not valid JSON");
  }
  SUBCASE("not an object") {
    write_safetensors_raw(bad, "[1, 2]", 0);
    check_error("not a JSON object");
  }
  SUBCASE("offsets out of range") {
    write_safetensors_raw(bad, R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8);
    check_error("run past the end of the data", "w");
  }
  SUBCASE("offsets reversed") {
    write_safetensors_raw(bad, R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", 8);
    check_error("end before they begin", "w");
  }
  SUBCASE("wrong byte length") {
    write_safetensors_raw(bad, R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8);
    check_error("takes 12 bytes", "w");
  }
  SUBCASE("overlapping tensors") {
    write_safetensors_raw(bad,
                          R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                          R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                          12);
    check_error("overlap tensor 'a'", "b");
  }
  SUBCASE("a gap and trailing bytes") {
    write_safetensors_raw(bad, R"({"a": {"dtype": "I32", "shape": [1], "data_offsets": [4, 8]}})", 8);
    check_error("gap of 4 bytes", "a");
    write_safetensors_raw(bad, R"({"a": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]}})", 8);
    check_error("cover 4 of the 8");
  }
  SUBCASE("unsupported dtype") {
    write_safetensors_raw(bad, R"({"h": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}})", 4);
    check_error("'F16'", "h");
  }
  SUBCASE("a negative dimension") {
    write_safetensors_raw(bad, R"({"n": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4);
    check_error("not a size", "n");
  }
  SUBCASE("a name given twice") {
    write_safetensors_raw(bad,
                          R"({"a": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]},)"
                          R"( "a": {"dtype": "I32", "shape": [1], "data_offsets": [4, 8]}})",
                          8);
    check_error("names 'a' twice");
  }
  SUBCASE("metadata that is not strings") {
    write_safetensors_raw(bad, R"({"__metadata__": {"epoch": 3}})", 0);
    check_error("'epoch' is number");
  }
}

TEST_CASE("checkpoint: save_safetensors rejects what it cannot write") {
  TempDir tmp;
  auto error_of = [&](const NamedTensors& tensors) -> std::string {
    try {
      save_safetensors(tmp / "x.safetensors", tensors);
    } catch (const CheckpointError& e) {
      return e.what();
    }
    return "no error";
  };
  CHECK(contains(error_of({{"u", Tensor()}}), "tensor 'u' is undefined"));
  CHECK(contains(error_of({{"a", zeros({1})}, {"a", zeros({1})}}), "'a' appears twice"));
  CHECK(contains(error_of({{"__metadata__", zeros({1})}}), "reserved"));
  CHECK(contains(error_of({{"bad \xff name", zeros({1})}}), "cannot encode"));
  CHECK(contains(error_of({{"x", zeros({1})}}), "no error"));
  CHECK_THROWS_AS(save_safetensors(tmp / "missing-folder" / "x.safetensors", {{"x", zeros({1})}}), CheckpointError);
}

TEST_CASE("checkpoint: a streamed save holds one piece of rows at a time and writes the file a whole save writes") {
  TempDir tmp;
  const NamedTensors tensors = {{"a", random_tensor({5, 3}, 1)}, {"b", random_tensor({7}, 2)}, {"c", zeros({2, 2})},
                                {"s", random_tensor({}, 3)}, {"e", zeros({0, 4})}};
  std::vector<TensorSpec> entries;
  for (const auto& [name, t] : tensors) entries.push_back({name, t.dtype(), t.shape()});
  std::weak_ptr<Buffer> previous;  // the piece made last
  std::vector<std::string> pieces;
  const RowsOf rows = [&](std::size_t i, std::int64_t begin, std::int64_t end) {
    CHECK(previous.expired());  // written and released before the next is made
    const Tensor& whole = tensors[i].second;
    pieces.push_back(tensors[i].first + "[" + std::to_string(begin) + ":" + std::to_string(end) + "]");
    const Shape shape = whole.rank() == 0 ? whole.shape() : whole.rows(begin, end - begin).shape();
    Tensor piece = Tensor::empty(shape, whole.dtype());
    const std::size_t row_bytes = whole.rank() == 0 || whole.shape()[0] == 0 ? 0 : whole.nbytes() / static_cast<std::size_t>(whole.shape()[0]);
    if (piece.nbytes() > 0)
      std::memcpy(piece.raw_data(), static_cast<const char*>(whole.raw_data()) + static_cast<std::size_t>(begin) * row_bytes, piece.nbytes());
    previous = piece.buffer();
    return piece;
  };
  // 16 bytes a piece: one row of a [5, 3] f32 tensor fits, two do not; four rows of b do.
  save_safetensors(tmp / "streamed.safetensors", entries, rows, 16, {{"k", "v"}});
  CHECK(pieces == std::vector<std::string>{"a[0:1]", "a[1:2]", "a[2:3]", "a[3:4]", "a[4:5]", "b[0:4]", "b[4:7]",
                                           "c[0:2]", "s[0:1]", "e[0:0]"});
  save_safetensors(tmp / "whole.safetensors", tensors, {{"k", "v"}});
  // The same data bytes and tensors; only a whole save's header records
  // checksums (a streamed one would need them before its pieces exist).
  const std::vector<std::uint8_t> streamed_bytes = read_bytes(tmp / "streamed.safetensors");
  const std::vector<std::uint8_t> whole_bytes = read_bytes(tmp / "whole.safetensors");
  const std::size_t data_bytes = 108;  // 15 + 7 + 4 + 1 + 0 floats
  REQUIRE(streamed_bytes.size() > data_bytes);
  CHECK(std::equal(streamed_bytes.end() - data_bytes, streamed_bytes.end(), whole_bytes.end() - data_bytes));
  const SafetensorsFile streamed = load_safetensors(tmp / "streamed.safetensors");
  CHECK(streamed.metadata == std::map<std::string, std::string>{{"k", "v"}});
  CHECK(load_safetensors(tmp / "whole.safetensors").metadata == streamed.metadata);  // the checksums are not the user's
  for (const SafetensorsEntry& entry : read_safetensors_header(tmp / "streamed.safetensors").tensors)
    CHECK_FALSE(entry.crc32.has_value());
  for (const SafetensorsEntry& entry : read_safetensors_header(tmp / "whole.safetensors").tensors)
    CHECK(entry.crc32.has_value());
  // A piece that is not what its entry says is an error naming it, and no file is left.
  const RowsOf wrong = [&](std::size_t i, std::int64_t, std::int64_t) { return i == 1 ? zeros({8}) : tensors[i].second; };
  CHECK_THROWS_WITH_AS(save_safetensors(tmp / "bad.safetensors", entries, wrong, std::numeric_limits<std::uint64_t>::max()),
                       doctest::Contains("tensor 'b' rows [0, 7) are f32[8] on cpu:0, not the f32[7]"), CheckpointError);
  CHECK_FALSE(fs::exists(tmp / "bad.safetensors"));
  CHECK(std::distance(fs::directory_iterator(tmp.path()), fs::directory_iterator{}) == 2);  // no temporary file either
}

TEST_CASE("checkpoint: save and load restore the model, the optimizer state and the training state") {
  TempDir tmp;
  Model model = classifier();
  Dataset data = synthetic_classification(64, {8}, 3, 1);
  VariableStore store;
  Trainer trainer(model, spec("", 1), store);
  trainer.fit(data, nullptr);
  TrainingState state = trainer.state();
  CHECK(state.step == 4);
  CHECK(state.epoch == 1);
  CHECK(state.batch == 0);
  CHECK(state.seed == 3);
  save_checkpoint(tmp / "ckpt/", store, state, "model: {}\n");
  CHECK(tmp.entries() == std::vector<std::string>{"ckpt"});
  for (const char* file : {"model.safetensors", "optimizer.safetensors", "training_state.json"})
    CHECK(fs::exists(tmp / "ckpt" / file));

  // The model file holds exactly the model's variables, by path.
  SafetensorsFile weights = load_safetensors(tmp / "ckpt" / "model.safetensors");
  std::vector<std::string> names;
  for (const auto& [name, t] : weights.tensors) names.push_back(name);
  CHECK(names == std::vector<std::string>{"clf/dense/kernel", "clf/dense/bias", "clf/dense_1/kernel", "clf/dense_1/bias"});
  SafetensorsFile optimizer = load_safetensors(tmp / "ckpt" / "optimizer.safetensors");
  std::vector<std::string> optimizer_names, store_optimizer_names;
  for (const auto& [name, t] : optimizer.tensors) optimizer_names.push_back(name);
  for (const auto& v : store.variables())
    if (v.path.rfind("optimizer/", 0) == 0) store_optimizer_names.push_back(v.path);
  CHECK(optimizer_names.size() == 8);  // m and v of each
  CHECK(optimizer_names == store_optimizer_names);  // in the store's order
  CHECK(std::find(optimizer_names.begin(), optimizer_names.end(), "optimizer/clf/dense/kernel/m") !=
        optimizer_names.end());

  std::ifstream in(tmp / "ckpt" / "training_state.json");
  nlohmann::json json = nlohmann::json::parse(in);
  CHECK(json["format_version"] == kCheckpointFormatVersion);
  CHECK(json["step"] == 4);
  CHECK(json["config"] == "model: {}\n");
  CHECK(json["model_variables"][0] == nlohmann::json{{"path", "clf/dense/kernel"}, {"shape", {8, 16}}, {"dtype", "f32"}});

  // Into a fresh store holding only the model: the optimizer state is added.
  VariableStore fresh;
  model.build(fresh, 99);  // other initial values, overwritten
  CHECK(fresh.variables().size() == 4);
  TrainingState loaded = load_checkpoint(tmp / "ckpt", fresh);
  CHECK(loaded.step == 4);
  CHECK(loaded.epoch == 1);
  CHECK(loaded.seed == 3);
  CHECK(loaded.config == "model: {}\n");
  CHECK(snapshot(fresh) == snapshot(store));
  CHECK_FALSE(fresh.find("optimizer/clf/dense/kernel/m")->trainable);
}

TEST_CASE("checkpoint: a checkpoint of another model is rejected and leaves the store untouched") {
  TempDir tmp;
  VariableStore saved;
  classifier(16).build(saved, 1);
  save_checkpoint(tmp / "ckpt", saved, TrainingState{}, "");

  auto attempt = [&](const Model& other) -> std::string {
    VariableStore store;
    other.build(store, 2);
    auto before = snapshot(store);
    std::size_t count = store.variables().size();
    std::string message = "no error";
    try {
      load_checkpoint(tmp / "ckpt", store);
    } catch (const CheckpointError& e) {
      message = e.what();
    }
    CHECK(store.variables().size() == count);
    CHECK(snapshot(store) == before);
    return message;
  };
  std::string wider = attempt(classifier(32));
  INFO(wider);
  CHECK(contains(wider, "another model"));
  CHECK(contains(wider, "'clf/dense/kernel'"));  // the first variable that differs
  CHECK(contains(wider, "f32[8, 32] in the model but f32[8, 16] in the checkpoint"));

  std::string deeper = attempt(classifier(16, /*extra_layer=*/true));
  INFO(deeper);
  CHECK(contains(deeper, "'clf/dense_1/kernel'"));
  CHECK(contains(deeper, "f32[16, 8] in the model but f32[16, 3]"));

  // A store missing one of the checkpoint's variables.
  VariableStore partial;
  classifier(16).build(partial, 1);
  partial.variables().pop_back();
  auto before = snapshot(partial);
  try {
    load_checkpoint(tmp / "ckpt", partial);
    FAIL("expected a CheckpointError");
  } catch (const CheckpointError& e) {
    CHECK(contains(e.what(), "its variable 'clf/dense_1/bias' (f32[3]) is not in the model"));
  }
  CHECK(snapshot(partial) == before);

  // A store with an extra variable: the first mismatch names it.
  VariableStore extra;
  classifier(16).build(extra, 1);
  extra.get_or_create("clf/extra/scale", {2}, DType::f32, true, {}, [](const Tensor& t, std::span<const std::int64_t>) { std::memset(t.raw_data(), 0, t.nbytes()); });
  try {
    load_checkpoint(tmp / "ckpt", extra);
    FAIL("expected a CheckpointError");
  } catch (const CheckpointError& e) {
    CHECK(contains(e.what(), "the model's variable 'clf/extra/scale' (f32[2]) is not in it"));
  }
}

TEST_CASE("checkpoint: the learning-rate factor, the epoch's figures, its sums and the callbacks' counts round-trip, and older files load without them") {
  TempDir tmp;
  VariableStore store;
  classifier().build(store, 1);
  TrainingState state = at(7);
  state.learning_rate_scale = 0.25;
  state.figures = {{"loss", 0.5}, {"val_accuracy", 0.875}, {"auc", std::nan("")}};  // NaN is left out
  state.batch = 3;
  state.epoch_sums = EpochSums{.loss = 0.1 + 0.2, .samples = 48, .metrics = {{{1.0 / 3.0, 2.5}, {7}}, {}}};
  state.callbacks = {{"early_stopping val_loss", {{"wait", 2}, {"best", 0.1 + 0.2}}}, {"reduce_lr_on_plateau loss", {}}};
  save_checkpoint(tmp / "ckpt", store, state, "");
  for (const TrainingState& read : {read_training_state(tmp / "ckpt"), load_checkpoint(tmp / "ckpt", store)}) {
    CHECK(read.step == 7);
    CHECK(read.learning_rate_scale == 0.25);
    CHECK(read.figures == std::map<std::string, double>{{"loss", 0.5}, {"val_accuracy", 0.875}});
    REQUIRE(read.epoch_sums.has_value());
    CHECK(read.epoch_sums->loss == 0.1 + 0.2);  // every bit of a double
    CHECK(read.epoch_sums->samples == 48);
    CHECK(read.epoch_sums->metrics == state.epoch_sums->metrics);
    CHECK(read.callbacks.at("early_stopping val_loss") == std::map<std::string, double>{{"wait", 2}, {"best", 0.1 + 0.2}});
  }

  // Saved again by another JSON writer: nlohmann::json sorts each object's keys.
  auto rewritten = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json json = nlohmann::json::parse(std::ifstream(tmp / "ckpt" / "training_state.json"));
    edit(json);
    std::ofstream(tmp / "ckpt" / "training_state.json") << json.dump();
  };
  rewritten([](nlohmann::json& j) {  // as written before 2026-11-28
    j.erase("learning_rate_scale");
    j.erase("figures");
    j.erase("epoch_sums");
    j.erase("callbacks");
  });
  const TrainingState old = load_checkpoint(tmp / "ckpt", store);
  CHECK(old.learning_rate_scale == 1);
  CHECK(old.figures.empty());
  CHECK_FALSE(old.epoch_sums.has_value());
  CHECK(old.callbacks.empty());

  auto state_error = [&] { return error_of<CheckpointError>([&] { read_training_state(tmp / "ckpt"); }); };
  rewritten([](nlohmann::json& j) { j["learning_rate_scale"] = -2; });
  CHECK(contains(state_error(), "'learning_rate_scale' is -2, not a positive number"));
  rewritten([](nlohmann::json& j) {
    j["learning_rate_scale"] = 1;
    j["figures"] = {{"loss", "low"}};
  });
  CHECK(contains(state_error(), "figure 'loss' is \"low\", not a number"));
  rewritten([](nlohmann::json& j) {
    j["figures"] = nlohmann::json::object();
    j["epoch_sums"]["metrics"] = {{{1, "two"}}};
  });
  CHECK(contains(state_error(), "'epoch_sums' is not {loss: number, samples: count, metrics: [[[numbers]]]}"));
  rewritten([](nlohmann::json& j) {
    j.erase("epoch_sums");
    j["callbacks"] = {{"early_stopping loss", {{"wait", "two"}}}};
  });
  CHECK(contains(state_error(), "'callbacks' entry 'early_stopping loss': 'wait' is \"two\", not a number"));
  CHECK(contains(error_of<CheckpointError>([&] { read_training_state(tmp / "nowhere"); }),
                 "has no training_state.json"));
}

TEST_CASE("checkpoint: broken checkpoint directories are errors naming the file") {
  TempDir tmp;
  VariableStore store;
  classifier().build(store, 1);
  save_checkpoint(tmp / "ckpt", store, at(7), "");
  auto error_of = [&](const fs::path& dir) -> std::string {
    VariableStore target;
    classifier().build(target, 1);
    try {
      load_checkpoint(dir, target);
    } catch (const CheckpointError& e) {
      return e.what();
    }
    return "no error";
  };
  CHECK(contains(error_of(tmp / "nowhere"), "no such checkpoint directory"));
  CHECK(error_of(tmp / "ckpt") == "no error");

  fs::copy(tmp / "ckpt", tmp / "copy");
  fs::remove(tmp / "copy" / "optimizer.safetensors");
  CHECK(contains(error_of(tmp / "copy"), "has no optimizer.safetensors"));

  std::ofstream(tmp / "ckpt" / "training_state.json") << "{\"format\": ";
  std::string message = error_of(tmp / "ckpt");
  CHECK(contains(message, (tmp / "ckpt" / "training_state.json").string()));
  CHECK(contains(message, "not valid JSON"));

  std::ofstream(tmp / "ckpt" / "training_state.json")
      << R"({"format": "tessera-checkpoint", "format_version": 99})";
  CHECK(contains(error_of(tmp / "ckpt"), "written by a newer Tessera"));

  // Files of two different checkpoints put together.
  save_checkpoint(tmp / "ckpt", store, TrainingState{}, "");
  VariableStore small;
  classifier(4).build(small, 1);
  save_checkpoint(tmp / "other", small, TrainingState{}, "");
  fs::copy_file(tmp / "other" / "model.safetensors", tmp / "ckpt" / "model.safetensors",
                fs::copy_options::overwrite_existing);
  CHECK(contains(error_of(tmp / "ckpt"), "does not describe"));

  // A corrupt tensor file names that file.
  save_checkpoint(tmp / "ckpt", store, TrainingState{}, "");
  auto bytes = read_bytes(tmp / "ckpt" / "model.safetensors");
  bytes.resize(bytes.size() - 1);
  write_bytes(tmp / "ckpt" / "model.safetensors", bytes);
  CHECK(contains(error_of(tmp / "ckpt"), (tmp / "ckpt" / "model.safetensors").string()));
}

TEST_CASE("checkpoint: a checkpoint directory is replaced atomically") {
  TempDir tmp;
  const fs::path dir = tmp / "ckpt";
  VariableStore first;
  classifier().build(first, 1);
  save_checkpoint(dir, first, at(1), "first");

  VariableStore second;
  classifier().build(second, 2);
  save_checkpoint(dir, second, at(2), "second");
  CHECK(tmp.entries() == std::vector<std::string>{"ckpt"});  // the old one and the scratch are gone
  VariableStore check;
  classifier().build(check, 3);
  CHECK(load_checkpoint(dir, check).step == 2);
  CHECK(snapshot(check) == snapshot(second));

  auto check_intact = [&] {
    VariableStore target;
    classifier().build(target, 3);
    TrainingState state = load_checkpoint(dir, target);
    CHECK(state.step == 2);
    CHECK(state.config == "second");
    CHECK(snapshot(target) == snapshot(second));
    CHECK(tmp.entries() == std::vector<std::string>{"ckpt"});  // no half-written leftovers
  };

  SUBCASE("a store with an undefined tensor") {
    VariableStore broken;
    classifier().build(broken, 4);
    broken.variables().push_back(Variable{"optimizer/clf/dense/kernel/m", Tensor(), false, {}});
    CHECK_THROWS_WITH_AS(save_checkpoint(dir, broken, at(3), "third"),
                         doctest::Contains("'optimizer/clf/dense/kernel/m' is undefined"), CheckpointError);
    check_intact();
  }
  SUBCASE("a failure after the tensor files are written") {
    // training_state.json is written last; a config that is not UTF-8 cannot be encoded.
    VariableStore third;
    classifier().build(third, 4);
    CHECK_THROWS_WITH_AS(save_checkpoint(dir, third, at(3), "bad \xff config"),
                         doctest::Contains("cannot encode training_state.json"), CheckpointError);
    check_intact();
  }
  SUBCASE("an unwritable parent folder") {
    if (::geteuid() == 0) {
      MESSAGE("skipped: permissions do not bind root");
      return;
    }
    fs::permissions(tmp.path(), fs::perms::owner_read | fs::perms::owner_exec);
    CHECK_THROWS_AS(save_checkpoint(dir, second, at(3), "third"), CheckpointError);
    fs::permissions(tmp.path(), fs::perms::owner_all);
    check_intact();
  }
  SUBCASE("a folder that is not a checkpoint is never replaced") {
    fs::create_directories(tmp / "data");
    std::ofstream(tmp / "data" / "train.csv") << "x,y\n";
    CHECK_THROWS_WITH_AS(save_checkpoint(tmp / "data", second, TrainingState{}, ""),
                         doctest::Contains("is not a checkpoint"), CheckpointError);
    CHECK(fs::exists(tmp / "data" / "train.csv"));
    fs::remove_all(tmp / "data");
    check_intact();
  }
  SUBCASE("a folder inside the checkpoint stops the save, which would delete it") {
    fs::create_directories(dir / "plots");
    CHECK_THROWS_WITH_AS(save_checkpoint(dir, first, at(3), "third"), doctest::Contains("holds 'plots'"), CheckpointError);
    CHECK(fs::exists(dir / "plots"));
    fs::remove(dir / "plots");
    check_intact();
  }
}

TEST_CASE("checkpoint: damaged weights are caught on load, naming the file and the tensor") {
  // Issue 18: flipping the last 40 data bytes of model.safetensors gave an
  // eval with loss 1.7e26 and exit 0, and a resume that trained on them.
  TempDir tmp;
  const fs::path dir = tmp / "ckpt";
  VariableStore store;
  classifier().build(store, 1);
  save_checkpoint(dir, store, at(1), "first");
  const fs::path model = dir / "model.safetensors";
  const std::vector<std::uint8_t> good = read_bytes(model);
  // The first tensor, in data order, that the damage reaches.
  auto first_reached = [&](std::uint64_t damaged_bytes) {
    for (const SafetensorsEntry& e : read_safetensors_header(model).tensors)
      if (e.bytes > 0 && e.offset + e.bytes > good.size() - damaged_bytes) return e.name;
    return std::string("none");
  };
  std::string expected;
  auto load_message = [&] {
    VariableStore target;
    classifier().build(target, 2);
    const std::vector<float> before = target.variables().front().value.to_vector<float>();
    std::string message = "no error";
    try {
      load_checkpoint(dir, target);
    } catch (const CheckpointError& e) {
      message = e.what();
    }
    CHECK(target.variables().front().value.to_vector<float>() == before);  // nothing was written into the store
    return message;
  };
  SUBCASE("the last 40 data bytes flipped") {
    std::vector<std::uint8_t> bad = good;
    for (std::size_t i = bad.size() - 40; i < bad.size(); ++i) bad[i] ^= 0xff;
    expected = first_reached(40);
    write_bytes(model, bad);
  }
  SUBCASE("a NaN written over a weight") {
    std::vector<std::uint8_t> bad = good;
    const std::uint8_t nan[4] = {0x00, 0x00, 0xc0, 0x7f};
    std::copy(nan, nan + 4, bad.end() - 4);
    expected = first_reached(4);
    write_bytes(model, bad);
  }
  const std::string message = load_message();
  INFO(message);
  CHECK(contains(message, model.filename().string()));
  CHECK(contains(message, "tensor '" + expected + "'"));
  CHECK(contains(message, "do not match the checksum saved with them"));
}

TEST_CASE("checkpoint: verify reads every tensor against its checksum and lists those holding NaN or infinities") {
  TempDir tmp;
  VariableStore store;
  classifier().build(store, 1);
  save_checkpoint(tmp / "ok", store, at(1), "");
  // Progress after each tensor read, ending at every tensor and byte.
  std::vector<std::pair<std::size_t, std::size_t>> heard;
  std::uint64_t bytes_heard = 0;
  const CheckpointReport ok = verify_checkpoint(tmp / "ok", [&](std::size_t done, std::size_t total, std::uint64_t bytes) {
    heard.emplace_back(done, total);
    bytes_heard = bytes;
  });
  CHECK(ok.tensors == store.variables().size());
  REQUIRE(heard.size() == ok.tensors);
  for (std::size_t i = 0; i < heard.size(); ++i) CHECK(heard[i] == std::pair{i + 1, ok.tensors});
  CHECK(bytes_heard == ok.bytes);
  CHECK(ok.blocks == ok.tensors);  // one block per tensor in a single-file checkpoint
  CHECK(ok.checksummed == ok.blocks);
  CHECK(ok.non_finite.empty());

  Variable& first = store.variables().front();
  auto* values = static_cast<float*>(first.value.raw_data());
  values[3] = std::numeric_limits<float>::quiet_NaN();
  values[5] = std::numeric_limits<float>::infinity();
  save_checkpoint(tmp / "nan", store, at(1), "");
  const CheckpointReport nan = verify_checkpoint(tmp / "nan");
  REQUIRE(nan.non_finite.size() == 1);
  CHECK(nan.non_finite[0] == first.path + ": 2 of " + std::to_string(first.value.numel()) +
                                 " values are NaN or infinite (the first at element 3)");

  CHECK_THROWS_WITH_AS(verify_checkpoint(tmp / "missing"), doctest::Contains("no such checkpoint directory"),
                       CheckpointError);
}

TEST_CASE("checkpoint: a load refuses weights holding NaN or infinities unless allowed") {
  // Issue 18: a NaN written into a weight (with a checksum that agrees, or a
  // file without one) loaded silently, and the model then computed only NaN.
  TempDir tmp;
  VariableStore store;
  classifier().build(store, 1);
  Variable& first = store.variables().front();
  static_cast<float*>(first.value.raw_data())[4] = -std::numeric_limits<float>::infinity();
  save_checkpoint(tmp / "inf", store, at(1), "");

  VariableStore target;
  classifier().build(target, 2);
  const std::vector<float> before = target.variables().front().value.to_vector<float>();
  const std::string expected = "tensor '" + first.path + "': 1 of " + std::to_string(first.value.numel()) +
                               " values are NaN or infinite (the first at element 4); refused";
  CHECK_THROWS_WITH_AS(load_checkpoint(tmp / "inf", target), doctest::Contains(expected.c_str()), CheckpointError);
  CHECK(target.variables().front().value.to_vector<float>() == before);  // nothing written

  load_checkpoint(tmp / "inf", target, LoadValues::all, NonFinite::allow);
  CHECK(target.variables().front().value.to_vector<float>() == first.value.to_vector<float>());
  // Loading no values checks none: whoever reads the slices checks them.
  CHECK_NOTHROW(load_checkpoint(tmp / "inf", target, LoadValues::none));
}

TEST_CASE("checkpoint: a renamed model's checkpoint fails saying so, and loads under the old name") {
  // Issue 19: renaming a Sequential model made its checkpoints unloadable
  // with a message that did not mention the rename.
  auto named = [](const std::string& name) {
    return Model::from_config(ConfigNode::parse("model:\n  name: " + name +
                                                "\n  inputs: [{name: x, shape: [8]}]\n  layers:\n"
                                                "    - {type: Dense, units: 3}\n")["model"]);
  };
  TempDir tmp;
  VariableStore saved;
  named("old").build(saved, 1);
  save_checkpoint(tmp / "ckpt", saved, at(1), "");
  VariableStore renamed;
  named("new").build(renamed, 2);
  CHECK_THROWS_WITH_AS(load_checkpoint(tmp / "ckpt", renamed),
                       doctest::Contains("under the name 'old' instead of 'new': was the model renamed? "
                                         "Load it under the name it was saved with: name: old under model:"),
                       CheckpointError);
  VariableStore same;
  named("old").build(same, 2);
  CHECK_NOTHROW(load_checkpoint(tmp / "ckpt", same));
  // Another model altogether gets no such hint.
  CHECK(renamed_model_hint({"new/dense/kernel"}, {"old/dense_1/kernel"}).empty());
  CHECK(renamed_model_hint({"m/dense/kernel"}, {"m/dense/kernel"}).empty());
}

TEST_CASE("checkpoint: a save removes the scratch folders killed saves left, and only those") {
  // Issue 18: a job killed during its saves again and again filled its disk
  // with scratch folders. A pid that no longer exists: an exited child's.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  REQUIRE(::waitpid(child, nullptr, 0) == child);
  char name[256] = {};
  REQUIRE(::gethostname(name, sizeof name - 1) == 0);
  const std::string host = name, dead = std::to_string(child), alive = std::to_string(::getpid());

  TempDir tmp;
  const std::vector<std::string> stale = {
      "ckpt.tmp-" + host + "-" + dead + "-0-123",  // a killed single-process save of this host
      "ckpt.tmp-" + dead + "-1-456",               // the same, named before the host was recorded
      "ckpt.tmp-step12",                           // a killed sharded save
  };
  const std::vector<std::string> kept = {
      "ckpt.old-" + host + "-" + dead + "-0-7",        // may hold the only good checkpoint
      "ckpt.tmp-" + host + "-" + alive + "-9-789",     // a save of a live process
      "ckpt.tmp-otherhost-" + dead + "-0-1",           // another host's: its pids mean nothing here
      "other.tmp-" + host + "-" + dead + "-0-1",       // another checkpoint's
      "ckpt.tmp-notes",                                // not a scratch folder's name
  };
  for (const auto& folder : stale) {
    fs::create_directories(tmp / folder);
    write_bytes(tmp / folder / "model.safetensors", std::vector<std::uint8_t>(1 << 20, 7));
  }
  for (const auto& folder : kept) fs::create_directories(tmp / folder);
  VariableStore store;
  classifier().build(store, 1);
  save_checkpoint(tmp / "ckpt", store, at(1), "first");
  std::vector<std::string> expected = kept;
  expected.push_back("ckpt");
  std::sort(expected.begin(), expected.end());
  CHECK(tmp.entries() == expected);
}

TEST_CASE("checkpoint: a link to a checkpoint directory saves into the directory it names") {
  TempDir tmp;
  VariableStore store;
  classifier().build(store, 1);
  save_checkpoint(tmp / "real", store, at(1), "first");
  fs::create_directory_symlink("real", tmp / "link");
  save_checkpoint(tmp / "link", store, at(2), "second");
  CHECK(fs::is_symlink(tmp / "link"));
  VariableStore check;
  classifier().build(check, 3);
  CHECK(load_checkpoint(tmp / "real", check).step == 2);
  CHECK(tmp.entries() == std::vector<std::string>{"link", "real"});
}

TEST_CASE("checkpoint: the user's files in a checkpoint directory survive its replacement") {
  TempDir tmp;
  const fs::path dir = tmp / "ckpt";
  VariableStore store;
  classifier().build(store, 1);
  save_checkpoint(dir, store, at(1), "first");
  std::ofstream(dir / "NOTES.txt") << "lr 1e-3 works";
  std::ofstream log(dir / "metrics.jsonl");  // a log being written while training saves
  log << "{\"epoch\": 1}\n" << std::flush;
  save_checkpoint(dir, store, at(2), "second");
  log << "{\"epoch\": 2}\n" << std::flush;
  std::ifstream notes(dir / "NOTES.txt");
  CHECK(std::string(std::istreambuf_iterator<char>(notes), {}) == "lr 1e-3 works");
  std::ifstream lines(dir / "metrics.jsonl");
  CHECK(std::string(std::istreambuf_iterator<char>(lines), {}) == "{\"epoch\": 1}\n{\"epoch\": 2}\n");
  CHECK(tmp.entries() == std::vector<std::string>{"ckpt"});
}

TEST_CASE("checkpoint: training.checkpoint is parsed, resolved against the config's folder") {
  TrainingSpec s = parse_training(ConfigNode::parse(
      "training: {loss: mse, checkpoint: {dir: runs/x, every_epochs: 2}}", "/work/configs/run.yaml")["training"]);
  CHECK(s.checkpoint.dir == fs::path("/work/configs/runs/x"));
  CHECK(s.checkpoint.every_epochs == 2);
  TrainingSpec none = parse_training(ConfigNode::parse("training: {loss: mse}")["training"]);
  CHECK(none.checkpoint.dir.empty());
  CHECK_THROWS_WITH_AS(parse_training(ConfigNode::parse(
                           "training: {loss: mse, checkpoint: {dir: x, every_epochs: 0}}", "run.yaml")["training"]),
                       doctest::Contains("every_epochs must be >= 1"), ConfigError);
  CHECK_THROWS_WITH_AS(parse_training(ConfigNode::parse(
                           "training: {loss: mse, checkpoint: {dir: x, every: 2}}", "run.yaml")["training"]),
                       doctest::Contains("unknown key 'every'"), ConfigError);
}

// THE KEY PROPERTY: 4 epochs in one go, or 2 epochs, a crash, and a resume from
// the checkpoint in a fresh process-like setting (new store, model, trainer),
// end with bit-identical weights and optimizer state.
TEST_CASE("checkpoint: a run resumed from a checkpoint ends bit-identical to an uninterrupted one") {
  TempDir tmp;
  Dataset data = synthetic_classification(200, {8}, 3, 1);  // 13 batches of 16, the last of 8

  Model model = classifier();
  VariableStore whole;
  Trainer uninterrupted(model, spec(), whole);
  auto logs = uninterrupted.fit(data, nullptr);
  REQUIRE(logs.size() == 4);
  CHECK(uninterrupted.step() == 52);
  // A new trainer resumed from `dir` and fitted to the end: it must end as `whole` did.
  auto check_resumed_run = [&](const fs::path& dir, const FitCallbacks& callbacks) {
    Model resumed_model = classifier();
    VariableStore store;
    resumed_model.build(store, 3);
    Trainer trainer(resumed_model, spec(), store);
    trainer.resume(load_checkpoint(dir, store));
    auto rest = trainer.fit(data, nullptr, callbacks);
    CHECK(trainer.step() == 52);
    CHECK(snapshot(store) == snapshot(whole));  // memcmp of every variable, optimizer state included
    return rest;
  };

  SUBCASE("from the end of an epoch, saved by training.checkpoint") {
    const fs::path dir = tmp / "run";
    {
      Model first_model = classifier();
      VariableStore store;
      Trainer trainer(first_model, spec(", checkpoint: {dir: " + dir.string() + ", every_epochs: 1}"), store);
      std::vector<std::int64_t> saved_epochs;
      FitCallbacks callbacks;
      callbacks.on_checkpoint = [&](const fs::path& where, const TrainingState& state) {
        CHECK(where == dir);
        saved_epochs.push_back(state.epoch);
        if (state.epoch == 2) throw SimulatedCrash{};  // the run dies right after saving epoch 2
      };
      CHECK_THROWS_AS(trainer.fit(data, nullptr, callbacks), SimulatedCrash);
      CHECK(saved_epochs == std::vector<std::int64_t>{1, 2});
    }
    Model resumed_model = classifier();
    VariableStore store;
    resumed_model.build(store, 3);
    TrainingState state = load_checkpoint(dir, store);
    CHECK(state.epoch == 2);
    CHECK(state.batch == 0);
    CHECK(state.step == 26);
    Trainer trainer(resumed_model, spec(), store);
    trainer.resume(state);
    auto rest = trainer.fit(data, nullptr);
    REQUIRE(rest.size() == 2);
    CHECK(rest[0].epoch == 3);
    CHECK(rest[1].train.loss == logs[3].train.loss);
    CHECK(trainer.step() == 52);
    CHECK(snapshot(store) == snapshot(whole));  // memcmp of every variable, optimizer state included
  }

  SUBCASE("from the middle of an epoch") {
    const fs::path dir = tmp / "mid";
    {
      Model first_model = classifier();
      VariableStore store;
      Trainer trainer(first_model, spec(), store);
      FitCallbacks callbacks;
      callbacks.on_batch = [&](std::int64_t epoch, std::int64_t batch, std::int64_t, const Evaluation&) {
        if (epoch == 3 && batch == 5) throw SimulatedCrash{};
      };
      CHECK_THROWS_AS(trainer.fit(data, nullptr, callbacks), SimulatedCrash);
      TrainingState state = trainer.state();
      CHECK(state.epoch == 2);
      CHECK(state.batch == 5);
      CHECK(state.step == 31);
      save_checkpoint(dir, store, state, "");
    }
    std::int64_t first_batch = 0;
    FitCallbacks callbacks;
    callbacks.on_batch = [&](std::int64_t, std::int64_t batch, std::int64_t, const Evaluation&) {
      if (first_batch == 0) first_batch = batch;
    };
    check_resumed_run(dir, callbacks);
    CHECK(first_batch == 6);
  }

  SUBCASE("interrupted between batches (Ctrl-C), saved by fit itself") {
    const fs::path dir = tmp / "interrupted";
    {
      Model first_model = classifier();
      VariableStore store;
      Trainer trainer(first_model, spec(", checkpoint: {dir: " + dir.string() + ", every_epochs: 1}"), store);
      std::vector<TrainingState> saved;
      std::int64_t steps = 0;
      FitCallbacks callbacks;
      callbacks.interrupted = [&] { return ++steps == 20; };  // asked after each step: epoch 2, batch 7
      callbacks.on_checkpoint = [&](const fs::path&, const TrainingState& state) { saved.push_back(state); };
      const auto logs_before = trainer.fit(data, nullptr, callbacks);
      CHECK(logs_before.size() == 1);  // epoch 1 whole; epoch 2 cut short
      REQUIRE(saved.size() == 2);      // epoch 1's checkpoint, then the interrupted position
      CHECK(saved[1].epoch == 1);
      CHECK(saved[1].batch == 7);
      CHECK(saved[1].step == 20);
      CHECK(trainer.state().batch == 7);
      REQUIRE(saved[1].epoch_sums.has_value());  // epoch 2's first 7 batches
      CHECK(saved[1].epoch_sums->samples == 7 * 16);
    }
    const auto rest = check_resumed_run(dir, {});
    REQUIRE(rest.size() == 3);
    // Epoch 2's log covers all its batches, as the uninterrupted run's does, to the bit.
    CHECK(rest[0].epoch == 2);
    CHECK(rest[0].train.samples == logs[1].train.samples);
    CHECK(rest[0].train.loss == logs[1].train.loss);
    CHECK(rest[0].train.metrics == logs[1].train.metrics);
  }

  SUBCASE("a mid-epoch checkpoint's sums of other metrics are left out of the resumed epoch's log") {
    const fs::path dir = tmp / "other_metrics";
    Model first_model = classifier();
    VariableStore first_store;
    Trainer first(first_model, spec(), first_store);
    FitCallbacks stop;
    stop.interrupted = [] { return true; };  // after epoch 1's first batch
    first.fit(data, nullptr, stop);
    TrainingState state = first.state();
    REQUIRE(state.epoch_sums.has_value());
    state.epoch_sums->metrics = {{{1.0, 2.0, 3.0}}, {{4.0}}};  // as if saved with two other metrics
    save_checkpoint(dir, first_store, state, "");
    const auto rest = check_resumed_run(dir, {});
    CHECK(rest[0].train.samples == 200 - 16);  // the batches this run trained
    CHECK(rest[0].train.metrics.contains("accuracy"));
  }

  SUBCASE("interrupted at an epoch's last batch: the epoch ends whole and is saved") {
    const fs::path dir = tmp / "at_end";
    Model first_model = classifier();
    VariableStore store;
    Trainer trainer(first_model, spec(", checkpoint: {dir: " + dir.string() + ", every_epochs: 3}"), store);
    std::int64_t steps = 0;
    FitCallbacks callbacks;
    callbacks.interrupted = [&] { return ++steps >= 13; };  // the 13th step ends epoch 1
    CHECK(trainer.fit(data, nullptr, callbacks).size() == 1);
    const TrainingState state = read_training_state(dir);
    CHECK(state.epoch == 1);
    CHECK(state.batch == 0);
    CHECK(state.figures.contains("loss"));
  }
}

TEST_CASE("checkpoint: resuming with another seed, data of another size or mid-epoch with another batch size is refused") {
  TempDir tmp;
  Model model = classifier();
  VariableStore store;
  Trainer trainer(model, spec("", 4, 4), store);
  CHECK_THROWS_WITH_AS(trainer.resume(at(26, 2, 0, 3)),
                       doctest::Contains("seed 3"), CheckpointError);
  Trainer same_seed(model, spec(), store);
  same_seed.resume(at(30, 2, 20, 3));
  Dataset data = synthetic_classification(200, {8}, 3, 1);  // 13 batches an epoch
  CHECK_THROWS_WITH_AS(same_seed.fit(data, nullptr), doctest::Contains("has 13 batches"), CheckpointError);

  // Saved after 3 batches of 16 of epoch 3: batches of 32 would start at sample 96, not 48.
  TrainingState mid_epoch = at(29, 2, 3, 3);
  mid_epoch.epoch_sums = EpochSums{.loss = 1, .samples = 48, .metrics = {}};
  same_seed.resume(mid_epoch);
  REQUIRE(same_seed.state().epoch_sums.has_value());  // saved again before a step, it keeps them
  CHECK(same_seed.state().epoch_sums->samples == 48);
  TrainingSpec larger_batches = spec();
  larger_batches.batch_size = 32;
  Trainer other_batches(model, larger_batches, store);
  CHECK_THROWS_WITH_AS(other_batches.resume(mid_epoch),
                       doctest::Contains("cannot resume at batch 3 of epoch 3 with training.batch_size 32: the checkpoint "
                                         "was saved after 48 samples of that epoch, in batches of 16"),
                       CheckpointError);
}
