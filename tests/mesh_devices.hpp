// The devices the sharding tests run their meshes on. By default eight
// logical CPU devices with a thread each; with TESSERA_TEST_MESH_DEVICES=cuda,
// eight logical devices of GPU 0 (cuda:0x8, backends/registry.hpp), so that
// one GPU runs every mesh (scripts/gpu-check.sh does), and the one-device
// run they are compared with runs on cuda:0.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/registry.hpp"
#include "distribution/device_mesh.hpp"
#include "engine/core/error.hpp"

namespace tessera::test {

inline bool meshes_on_gpu() {
  const char* env = std::getenv("TESSERA_TEST_MESH_DEVICES");
  const std::string kind = env ? env : "cpu";
  if (kind != "cpu" && kind != "cuda")
    throw Error("TESSERA_TEST_MESH_DEVICES='" + kind + "': use cpu (logical CPU devices) or cuda (logical devices of GPU 0)");
  return kind == "cuda";
}

// Makes the eight devices for the life of the scope; then one CPU device, and cuda:i is GPU i again.
class MeshDeviceScope {
 public:
  MeshDeviceScope() {
    if (meshes_on_gpu()) set_cuda_logical_devices(0, 8);
    else set_cpu_device_count(8, 1);
  }
  ~MeshDeviceScope() {
    set_cpu_device_count(1);
    if (meshes_on_gpu()) set_cuda_logical_devices(0, 0);
  }
  MeshDeviceScope(const MeshDeviceScope&) = delete;
  MeshDeviceScope& operator=(const MeshDeviceScope&) = delete;
};

// The first n of them.
inline std::vector<Device> mesh_devices(std::int64_t n) {
  if (!meshes_on_gpu()) return cpu_devices(static_cast<int>(n));
  std::vector<Device> devices;
  for (int i = 0; i < n; ++i) devices.push_back(Device::cuda(i));
  return devices;
}

// Where the one-device run that a mesh is compared with runs.
inline Device single_device() { return meshes_on_gpu() ? Device::cuda(0) : Device::cpu(0); }

}  // namespace tessera::test
