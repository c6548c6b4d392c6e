// DeviceMesh, TensorLayout and LayoutMap: Keras' semantics and every
// validation, with messages that name the variable, dimension, sizes and axis.
#include <doctest/doctest.h>

#include "backends/registry.hpp"
#include "distribution/layout_map.hpp"
#include "distribution/shard_copy.hpp"
#include "engine/core/error.hpp"

using namespace tessera;

namespace {

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

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
