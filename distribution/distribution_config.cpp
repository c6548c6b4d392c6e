#include "distribution/distribution_config.hpp"

#include <algorithm>
#include <limits>

#include "backends/device_set.hpp"
#include "backends/registry.hpp"
#include "engine/config/config.hpp"
#include "tessera_features.hpp"

namespace tessera {
namespace {

const std::vector<std::string> kTypes = {"data_parallel", "model_parallel", "auto_tp", "auto"};

// 1048576, "512MiB", "2GiB", "100MB"; throws ConfigError at the node.
std::int64_t parse_bytes(const ConfigNode& node) {
  const auto text = node.as<std::string>();
  std::size_t end = 0;
  double value = 0;
  try {
    value = std::stod(text, &end);
  } catch (const std::exception&) {
    node.fail("'" + text + "' is not a size (bytes, or a number with KiB, MiB, GiB, KB, MB, GB)");
  }
  std::string unit = text.substr(end);
  unit.erase(0, unit.find_first_not_of(' '));
  const std::map<std::string, double> units = {{"", 1},          {"B", 1},     {"KiB", 1024.0}, {"MiB", 1048576.0},
                                               {"GiB", 1073741824.0}, {"KB", 1e3}, {"MB", 1e6},     {"GB", 1e9}};
  auto it = units.find(unit);
  // 1 byte to 2^60 bytes: below, it would truncate to 0 ("no limit"); above, overflow a 64-bit count.
  const double bytes = it == units.end() ? 0.0 : value * it->second;
  if (!(bytes >= 1 && bytes <= 0x1p60))
    node.fail("'" + text + "' is not a size from 1 byte to 1 EiB (bytes, or a number with KiB, MiB, GiB, KB, MB, GB)");
  return static_cast<std::int64_t>(bytes);
}

// The set `devices:` names (backends/device_set.hpp); `mesh_size` logical
// CPU devices when absent. Creates none: make_trainer does, for the run.
DeviceSet parse_devices(const std::optional<ConfigNode>& node, std::int64_t mesh_size) {
  if (!node) return {cpu_devices(static_cast<int>(mesh_size))};  // sharding over GPUs needs `devices:`
  DeviceSet devices;
  try {
    devices = parse_device_set(node->as<std::string>());
  } catch (const DeviceError& e) {
    node->fail(e.what());
  }
  if (devices.devices.front().kind == DeviceKind::cuda && devices.shared_gpu < 0 && !TESSERA_HAVE_NCCL)
    node->fail("'" + node->as<std::string>() + "': a mesh of GPUs exchanges through NCCL, and this build has none "
               "(install NCCL beside the CUDA toolkit and rebuild)");
  return devices;
}


}  // namespace

TensorLayout parse_layout(const ConfigNode& entry, const DeviceMesh& mesh) {
  if (!entry.is_sequence())
    entry.fail("a layout is a list with one entry per tensor dimension: a mesh axis name or null");
  std::vector<std::optional<std::string>> axes;
  for (std::size_t i = 0; i < entry.size(); ++i) {
    ConfigNode axis = entry.at(i);
    if (axis.is_null()) {
      axes.emplace_back();
      continue;
    }
    auto name = axis.as<std::string>();
    if (!mesh.has_axis(name)) axis.fail_unknown("mesh axis", name, mesh.axis_names());
    for (const auto& earlier : axes)
      if (earlier == name)
        axis.fail("mesh axis '" + name + "' is used twice in one layout (a dimension can be split along an axis once)");
    axes.emplace_back(name);
  }
  return TensorLayout(std::move(axes));
}

DistributionConfig parse_distribution(ConfigNode node) {
  node.expect_keys({"devices", "mesh", "type", "batch_dim_name", "layout_map", "layout_map_match", "collective_timeout_s",
                    "memory_limit", "zero"});
  DistributionConfig config;
  config.location = node.location() + ": " + node.path();
  const std::string type = node.get("type", "data_parallel");
  if (std::find(kTypes.begin(), kTypes.end(), type) == kTypes.end()) node["type"].fail_unknown("distribution type", type, kTypes);

  // The mesh first: without `devices`, its size says how many.
  std::vector<std::int64_t> shape;
  std::vector<std::string> names;
  std::int64_t mesh_size = 1;  // checked against overflow as it is multiplied out
  std::optional<ConfigNode> mesh_node = node.find("mesh");
  if (mesh_node) {
    mesh_node->expect_keys({"shape", "axis_names"});
    shape = (*mesh_node)["shape"].as<std::vector<std::int64_t>>();
    names = mesh_node->get<std::vector<std::string>>("axis_names", {});
    if (names.empty() && shape.size() == 1) names = {"batch"};
    if (names.empty() && shape.size() == 2) names = {"batch", "model"};
    if (shape.size() > kMaxMeshAxes)
      (*mesh_node)["shape"].fail("a mesh has at most " + std::to_string(kMaxMeshAxes) + " axes, this one " +
                                 std::to_string(shape.size()));
    for (std::size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] < 1) (*mesh_node)["shape"].at(i).fail("mesh extents must be >= 1, got " + std::to_string(shape[i]));
      if (__builtin_mul_overflow(mesh_size, shape[i], &mesh_size) || mesh_size > std::numeric_limits<int>::max())
        (*mesh_node)["shape"].fail("the mesh holds more than " + std::to_string(std::numeric_limits<int>::max()) +
                                   " devices");
    }
  } else if (type == "model_parallel") {
    node.fail("model_parallel needs a mesh: {shape: [B, M], axis_names: [batch, model]}");
  }
  const bool auto_tp = type == "auto_tp";
  config.auto_mesh = type == "auto";
  if (config.auto_mesh && mesh_node) (*mesh_node).fail("type auto chooses the mesh itself; remove mesh: or use another type");
  if (config.auto_mesh && !node.has("devices")) node.fail("type auto needs devices: (say cpu:8) to choose a mesh for");
  if (auto limit = node.find("memory_limit")) {
    config.memory_limit = parse_bytes(*limit);
    config.memory_limit_location = limit->location();
  }
  if (mesh_node && !node.has("devices") && mesh_size > kMaxCpuDevices)
    (*mesh_node)["shape"].fail("the mesh has " + std::to_string(mesh_size) + " positions; without devices: it would make " +
                               "as many logical CPU devices, and at most " + std::to_string(kMaxCpuDevices) + " exist");
  // Without devices: or a mesh, data parallelism takes every device, as Keras' DataParallel(): the GPUs when there are any.
  DeviceSet device_set = !mesh_node && !node.has("devices") && type == "data_parallel" && cuda_device_count() > 0 && TESSERA_HAVE_NCCL
                             ? parse_device_set("cuda:all")
                             : parse_devices(node.find("devices"), mesh_node ? mesh_size : cpu_device_count());
  const std::vector<Device>& devices = device_set.devices;
  config.shared_gpu = device_set.shared_gpu;
  if (!mesh_node) {  // data parallel over every device; auto_tp splits layers over them all
    shape = auto_tp ? std::vector<std::int64_t>{1, static_cast<std::int64_t>(devices.size())}
                    : std::vector<std::int64_t>{static_cast<std::int64_t>(devices.size())};
    names = auto_tp ? std::vector<std::string>{"batch", "model"} : std::vector<std::string>{"batch"};
  }
  if (mesh_node && mesh_size != static_cast<std::int64_t>(devices.size())) {
    std::string dims;
    for (auto d : shape) dims += (dims.empty() ? "" : "x") + std::to_string(d);
    (*mesh_node)["shape"].fail("the mesh " + dims + " has " + std::to_string(mesh_size) + " positions but there are " +
                               std::to_string(devices.size()) + " devices (" + devices.front().str() + " .. " +
                               devices.back().str() + ")");
  }
  std::optional<DeviceMesh> mesh;
  try {
    mesh.emplace(shape, names, devices);
  } catch (const Error& e) {
    (mesh_node ? *mesh_node : node).fail(e.what());
  }

  const std::string match = node.get<std::string>("layout_map_match", "search");
  if (match != "search" && match != "fullmatch")
    node["layout_map_match"].fail_unknown("layout_map_match", match, {"search", "fullmatch"});
  LayoutMap map(match == "search" ? KeyMatch::search : KeyMatch::fullmatch);
  if (auto layout_map = node.find("layout_map")) {
    config.map_location = layout_map->location() + ": " + layout_map->path();
    if (type != "model_parallel")
      layout_map->fail(type + (auto_tp ? " chooses the layouts itself" : " replicates every variable") +
                       "; a layout_map needs type: model_parallel");
    for (const auto& key : layout_map->keys()) {
      ConfigNode entry = (*layout_map)[key];
      config.key_locations[key] = entry.location() + ": " + entry.path();
      try {
        map.add(key, parse_layout(entry, *mesh));
      } catch (const LayoutError& e) {
        entry.fail(e.what());
      }
    }
  }
  std::string batch = node.get("batch_dim_name", mesh->axis_names()[0]);
  if (!mesh->has_axis(batch)) node["batch_dim_name"].fail_unknown("mesh axis", batch, mesh->axis_names());
  // DataParallel (Keras too) splits batches along the mesh's first axis.
  if (type == "data_parallel" && batch != mesh->axis_names()[0])
    node["batch_dim_name"].fail("data_parallel splits batches along the mesh's first axis '" + mesh->axis_names()[0] +
                                "'; batch_dim_name '" + batch + "' needs type: model_parallel");
  if (auto_tp) {
    // The axis named `model`, else the last one that does not split batches.
    const auto& axes = mesh->axis_names();
    for (auto it = axes.rbegin(); it != axes.rend() && config.auto_tp_axis.empty(); ++it)
      if (*it != batch) config.auto_tp_axis = *it;
    if (mesh->has_axis("model") && batch != "model") config.auto_tp_axis = "model";
    if (config.auto_tp_axis.empty())
      (mesh_node ? *mesh_node : node).fail("auto_tp needs a mesh axis besides the batch axis '" + batch + "' to split layers over");
  }
  if (type == "data_parallel" && mesh->rank() > 1)
    config.warnings.push_back(mesh_node->location() + ": " + mesh_node->path() + ": data_parallel splits batches along the mesh's first axis '" +
                              mesh->axis_names()[0] + "' and replicates along the others (Keras warns the same: its DataParallel expects a 1-D mesh)");
  if (type == "data_parallel") config.distribution = std::make_unique<DataParallel>(*mesh);
  else config.distribution = std::make_unique<ModelParallel>(*mesh, map, batch);
  const auto zero = node.get<std::int64_t>("zero", 0);
  if (zero != 0 && zero != 1)
    node["zero"].fail("zero: 1 splits optimizer state and updates along the batch axis (ZeRO-1); 0 does not; got " +
                      std::to_string(zero));
  config.distribution->set_zero(zero == 1);
  double timeout = node.get<double>("collective_timeout_s", 60.0);
  // Whole milliseconds from 1 ms to a week: below truncates to 0, above is a hang by another name.
  if (!(timeout >= 0.001 && timeout <= 7 * 24 * 3600.0))
    node["collective_timeout_s"].fail("collective_timeout_s must be from 0.001 (1 ms) to 604800 (a week)");
  config.collective_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeout * 1000));
  return config;
}

}  // namespace tessera
