// DeviceMesh, TensorLayout and LayoutMap: Keras' semantics and every
// validation, with messages that name the variable, dimension, sizes and axis.
#include <doctest/doctest.h>

#include "backends/registry.hpp"
#include "distribution/distribution.hpp"
#include "distribution/distribution_config.hpp"
#include "distribution/layout_map.hpp"
#include "distribution/shard_copy.hpp"
#include "engine/config/config.hpp"
#include "engine/core/error.hpp"
#include "tests/test_util.hpp"

using namespace tessera;
using tessera::test::error_of;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("a device mesh fills its grid row-major and groups ranks per axis") {
  DeviceMesh mesh({2, 4}, {"batch", "model"}, cpu_devices(8));
  CHECK(mesh.size() == 8);
  CHECK(mesh.axis_size("model") == 4);
  CHECK(mesh.coordinates(6) == std::vector<std::int64_t>{1, 2});
  CHECK(mesh.groups_along("model") == std::vector<std::vector<std::int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}});
  CHECK(mesh.groups_along("batch") == std::vector<std::vector<std::int64_t>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(mesh.str() == "mesh [2, 4] (batch, model) over cpu:0..cpu:7");
}

TEST_CASE("device mesh validation") {
  CHECK(contains(error_of([] { DeviceMesh({}, {}, cpu_devices(1)); }), "empty"));
  CHECK(contains(error_of([] { DeviceMesh({2, 4}, {"batch"}, cpu_devices(8)); }), "1 axis names"));
  CHECK(contains(error_of([] { DeviceMesh({2, 4}, {"x", "x"}, cpu_devices(8)); }), "'x' is used twice"));
  CHECK(contains(error_of([] { DeviceMesh({2, 4}, {"batch", "model"}, cpu_devices(6)); }), "holds 8 devices but 6"));
  CHECK(contains(error_of([] { DeviceMesh({0}, {"batch"}, {}); }), "extent 0"));
  CHECK(contains(error_of([] { DeviceMesh({2}, {"batch"}, {Device::cpu(1), Device::cpu(1)}); }), "cpu:1 appears twice"));
  CHECK(contains(error_of([] {
          std::vector<std::string> names;
          for (int i = 0; i < 17; ++i) names.push_back("a" + std::to_string(i));
          DeviceMesh(std::vector<std::int64_t>(17, 1), names, cpu_devices(1));
        }),
        "has 17 axes; a mesh has at most 16"));
  CHECK(contains(error_of([] { DeviceMesh({std::int64_t{1} << 62, 4}, {"batch", "model"}, cpu_devices(4)); }),
                 "more devices than a 64-bit count"));
  DeviceMesh mesh({8}, {"batch"}, cpu_devices(8));
  CHECK(contains(error_of([&] { mesh.axis_index("model"); }), "(batch)"));
}

TEST_CASE("tensor layouts check rank, axes, reuse and divisibility against the tensor and mesh") {
  DeviceMesh mesh({2, 4}, {"batch", "model"}, cpu_devices(8));
  TensorLayout columns({std::nullopt, "model"});
  columns.validate("dense/kernel", {784, 1024}, mesh);
  CHECK(columns.shard_shape({784, 1024}, mesh) == Shape{784, 256});
  CHECK(columns.str() == "[None, model]");

  std::string e = error_of([&] { columns.validate("dense/bias", {1024}, mesh); });
  CHECK(contains(e, "'dense/bias'"));
  CHECK(contains(e, "rank 1"));
  e = error_of([&] { TensorLayout({"heads", std::nullopt}).validate("w", {8, 8}, mesh); });
  CHECK(contains(e, "'heads'"));
  CHECK(contains(e, "batch, model"));
  e = error_of([&] { TensorLayout({"model", "model"}).validate("w", {8, 8}, mesh); });
  CHECK(contains(e, "both dimension 0 and dimension 1"));
  e = error_of([&] { columns.validate("head/kernel", {256, 50257}, mesh); });
  CHECK(contains(e, "'head/kernel'"));
  CHECK(contains(e, "dimension 1 of size 50257"));
  CHECK(contains(e, "'model' of size 4"));
}

TEST_CASE("layout map lookup follows Keras: exact key, then one regex match, else replicated") {
  LayoutMap map;
  map.add("dense.*kernel", TensorLayout({std::nullopt, "model"}));
  map.add("dense.*bias", TensorLayout({"model"}));
  map.add("sequential/dense_2/kernel", TensorLayout({"model", std::nullopt}));
  CHECK(map.lookup("sequential/dense_1/kernel") == TensorLayout({std::nullopt, "model"}));
  CHECK(map.lookup("sequential/dense_1/bias") == TensorLayout({"model"}));
  // An exact key wins over the regex keys that also match.
  CHECK(map.lookup("sequential/dense_2/kernel") == TensorLayout({"model", std::nullopt}));
  CHECK_FALSE(map.lookup("sequential/conv2d/kernel").has_value());

  map.add("kernel", TensorLayout({"model", std::nullopt}));
  std::string e = error_of([&] { map.lookup("sequential/dense_1/kernel"); });
  CHECK(contains(e, "'sequential/dense_1/kernel'"));
  CHECK(contains(e, "'dense.*kernel'"));
  CHECK(contains(e, "'kernel'"));
  CHECK(contains(error_of([&] { map.add("kernel", TensorLayout()); }), "given twice"));
  CHECK(contains(error_of([&] { map.add("dense[", TensorLayout()); }), "not a valid regular expression"));
}

TEST_CASE("layout map keys match as Keras' LayoutMap: searched up to Keras 3.13, the whole path from 3.14") {
  // Keras <= 3.13 (and the distribution guide): re.search; Keras >= 3.14: re.fullmatch.
  for (KeyMatch mode : {KeyMatch::search, KeyMatch::fullmatch}) {
    CAPTURE(name(mode));
    LayoutMap map(mode);
    map.add("dense.*kernel", TensorLayout({std::nullopt, "model"}));
    map.add(".*/dense_2/bias", TensorLayout({"model"}));
    CHECK(map.lookup("sequential/dense_1/kernel").has_value() == (mode == KeyMatch::search));
    CHECK(map.lookup("dense_1/kernel").has_value());                  // the whole path either way
    CHECK(map.lookup("sequential/dense_2/bias").has_value());         // the key reaches both ends
    CHECK(map.lookup("sequential/dense_2/bias/extra").has_value() == (mode == KeyMatch::search));
    // What the other rule decides differently, for inspect, plan and train to print.
    const auto lines = map.other_mode_differences({"sequential/dense_1/kernel", "dense_1/kernel", "conv/kernel"});
    REQUIRE(lines.size() == 1);
    CHECK(contains(lines[0], "'sequential/dense_1/kernel'"));
    CHECK(contains(lines[0], mode == KeyMatch::search ? "by key 'dense.*kernel' under layout_map_match: search"
                                                        : "by no key (replicated) under layout_map_match: fullmatch"));
  }
  // Two keys that both match under one rule only: the other rule's error is named, not raised.
  LayoutMap map;
  map.add("kernel", TensorLayout({"model", std::nullopt}));
  map.add("dense/kernel", TensorLayout({std::nullopt, "model"}));
  CHECK(contains(error_of([&] { map.lookup("block/dense/kernel"); }), "matches two keys"));
  const auto lines = map.other_mode_differences({"block/dense/kernel"});
  REQUIRE(lines.size() == 1);
  CHECK(contains(lines[0], "by two keys (an error) under layout_map_match: search, by no key (replicated) under fullmatch"));
}

TEST_CASE("a variable's own layout comes before every key of the map, as Keras reads a variable's _layout first") {
  for (KeyMatch mode : {KeyMatch::search, KeyMatch::fullmatch}) {
    LayoutMap map(mode);
    map.add("mlp/dense/kernel", TensorLayout({"model", std::nullopt}));  // an exact key: first among the keys
    map.add("kernel", TensorLayout({"model", std::nullopt}));
    map.pin("mlp/dense/kernel", TensorLayout({std::nullopt, "model"}));
    const auto found = map.match("mlp/dense/kernel");
    REQUIRE(found);
    CHECK(found->pinned);
    CHECK(found->layout == TensorLayout({std::nullopt, "model"}));
    CHECK_FALSE(map.match("mlp/dense_1/kernel", KeyMatch::search)->pinned);
    CHECK(map.other_mode_differences({"mlp/dense/kernel"}).empty());  // its own layout under either rule
    CHECK(contains(error_of([&] { map.pin("mlp/dense/kernel", TensorLayout()); }), "two layouts of its own"));
    map.pin("mlp/dense/kernel", TensorLayout({std::nullopt, "model"}));  // the same again: no change
    CHECK(map.match("mlp/dense/kernel")->layout == TensorLayout({std::nullopt, "model"}));
  }
}

TEST_CASE("a layout map key in Python regex syntax that ECMAScript reads otherwise is an error saying what to write") {
  const std::vector<std::pair<std::string, std::string>> python_only = {
      {"(?P<layer>dense)/kernel", "an unnamed group (...)"},
      {"(dense)/(?P=layer)", "a numbered one, \\1"},
      {"(?i)Dense/kernel", "the cases spelled out"},
      {"(?<=dense)/kernel", "a lookbehind"},
      {"\\Adense/kernel", "write ^ instead"},
      {"dense/kernel\\Z", "write $ instead"},
  };
  for (const auto& [key_binding, says] : python_only) {
    const std::string& key = key_binding;  // lambdas below capture it (Clang 14: not a binding)
    CAPTURE(key);
    LayoutMap map;
    const std::string e = error_of([&] { map.add(key, TensorLayout({"model"})); });
    CHECK(contains(e, "key '" + key + "'"));
    CHECK(contains(e, "Python regex syntax"));
    CHECK(contains(e, says));
  }
  // ECMAScript's own groups, and an escaped backslash before an A, are keys like any other.
  LayoutMap map;
  map.add("(?:dense|conv)/kernel", TensorLayout({"model"}));
  map.add("(?=dense_1)dense_\\d/bias", TensorLayout({"model"}));
  map.add("odd\\\\Apath", TensorLayout({"model"}));
  CHECK(map.lookup("dense/kernel").has_value());
  CHECK(map.lookup("dense_1/bias").has_value());
  CHECK(map.lookup("odd\\Apath").has_value());
}

TEST_CASE("a layout shorter than its tensor is padded with None at the end, as JAX reads a PartitionSpec") {
  DeviceMesh mesh({2, 2}, {"batch", "model"}, cpu_devices(4));
  LayoutMap map;
  map.add("dense/kernel", TensorLayout({"model"}));
  map.add("dense/bias", TensorLayout({std::nullopt, "model", std::nullopt}));
  ModelParallel distribution(mesh, map, "batch");
  CHECK(distribution.variable_layout("dense/kernel", {8, 6}).layout == TensorLayout({"model", std::nullopt}));
  const std::string e = error_of([&] { distribution.variable_layout("dense/bias", {6}); });
  CHECK(contains(e, "'dense/bias'"));
  CHECK(contains(e, "3 entries for a tensor of rank 1"));
  CHECK(contains(e, "key 'dense/bias'"));
  // distribute_tensor pads as well.
  set_cpu_device_count(4);
  const auto blocks = distribute_tensor(Tensor::empty({4, 3}, DType::f32), TensorLayout({"model"}), mesh);
  CHECK(blocks[0].shape() == Shape{2, 3});
  set_cpu_device_count(1);
}

TEST_CASE("distribution config: data_parallel on a mesh of several axes warns, as Keras' DataParallel does") {
  const DistributionConfig two_axes = parse_distribution(ConfigNode::parse(
      "distribution: {devices: cpu:4, mesh: {shape: [2, 2], axis_names: [data, model]}}")["distribution"]);
  REQUIRE(two_axes.warnings.size() == 1);
  CHECK(contains(two_axes.warnings[0], "1:"));  // where, in the config
  CHECK(contains(two_axes.warnings[0], "splits batches along the mesh's first axis 'data' and replicates along the others"));
  CHECK(two_axes.distribution->batch_dim_name() == "data");
  CHECK(parse_distribution(ConfigNode::parse("distribution: {devices: cpu:4, mesh: {shape: [4]}}")["distribution"])
            .warnings.empty());
  // Without devices: or a mesh, every device there is: the logical CPU devices here, the GPUs where there are any.
  if (cuda_device_count() == 0)
    CHECK(parse_distribution(ConfigNode::parse("distribution: {type: data_parallel}")["distribution"])
              .distribution->mesh().devices() == cpu_devices(cpu_device_count()));
}

TEST_CASE("distribution config: layout_map_match chooses the rule, and names the two it knows") {
  DistributionConfig fullmatch = parse_distribution(ConfigNode::parse(R"(distribution:
  devices: cpu:2
  mesh: {shape: [1, 2], axis_names: [batch, model]}
  type: model_parallel
  layout_map: {'dense.*kernel': [null, model]}
  layout_map_match: fullmatch
)")["distribution"]);
  CHECK(fullmatch.distribution->layout_map().key_match() == KeyMatch::fullmatch);
  CHECK_FALSE(fullmatch.distribution->layout_map().lookup("model/dense/kernel").has_value());
  CHECK(parse_distribution(ConfigNode::parse("distribution: {devices: cpu:2}")["distribution"])
            .distribution->layout_map().key_match() == KeyMatch::search);
  const std::string e = error_of([] {
    parse_distribution(ConfigNode::parse("distribution: {devices: cpu:2, layout_map_match: regex}")["distribution"]);
  });
  CHECK(contains(e, "layout_map_match"));
  CHECK(contains(e, "'regex'"));
  CHECK(contains(e, "search, fullmatch"));
  CHECK(contains(e, "1:"));  // where, in the config
}

TEST_CASE("distribute_tensor gives each device its block, and insert_block puts it back") {
  set_cpu_device_count(4, 1);
  DeviceMesh mesh({2, 2}, {"batch", "model"}, cpu_devices(4));
  std::vector<float> values(24);
  for (int i = 0; i < 24; ++i) values[static_cast<std::size_t>(i)] = static_cast<float>(i);
  Tensor whole = Tensor::from_vector(values, {4, 6});  // row r holds 6r .. 6r + 5
  auto blocks = distribute_tensor(whole, TensorLayout({"batch", "model"}), mesh);
  REQUIRE(blocks.size() == 4);
  // Rank 3 = (batch 1, model 1): rows 2-3, columns 3-5.
  CHECK(blocks[3].shape() == Shape{2, 3});
  CHECK(blocks[3].to_vector<float>() == std::vector<float>{15, 16, 17, 21, 22, 23});
  CHECK(blocks[1].to_vector<float>() == std::vector<float>{3, 4, 5, 9, 10, 11});
  Tensor rebuilt = Tensor::from_vector(std::vector<float>(24, -1.0f), {4, 6});
  Sharding sharding = Sharding::from_layout(TensorLayout({"batch", "model"}), mesh);
  for (int r = 0; r < 4; ++r) insert_block(blocks[static_cast<std::size_t>(r)], rebuilt, sharding, mesh, r);
  CHECK(rebuilt.to_vector<float>() == values);
  CHECK_THROWS_WITH_AS(distribute_tensor(whole, TensorLayout({"model", "model"}), mesh), doctest::Contains("model"),
                       LayoutError);
  set_cpu_device_count(1);
}
