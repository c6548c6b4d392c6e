#include "backends/registry.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "backends/cpu/cpu_backend.hpp"
#include "tessera_features.hpp"
#if TESSERA_HAVE_CUDA
#include "backends/cuda/cuda_backend.hpp"
#endif

namespace tessera {
namespace {

struct Registry {
  std::mutex mutex;
  int cpu_count = 1;
  int cpu_threads = 0;  // 0 = even share
  int logical_gpu = -1;  // >= 0: cuda:0 .. cuda:logical_count-1 share this GPU
  int logical_count = 0;
  std::map<std::pair<int, int>, std::unique_ptr<Backend>> backends;  // (kind, index)
  // Backends of cuda devices that set_cuda_logical_devices changed: their
  // tensors may still hold their allocators, so they live until exit too.
  std::vector<std::unique_ptr<Backend>> retired;
};

Registry& registry() {
  static Registry r;
  return r;
}

int threads_per_cpu_device(const Registry& r) {
  if (r.cpu_threads > 0) return r.cpu_threads;
  int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, hw / r.cpu_count);
}

}  // namespace

bool cuda_compiled() { return TESSERA_HAVE_CUDA != 0; }

int cuda_device_count() {
#if TESSERA_HAVE_CUDA
  return cuda_runtime_device_count();
#else
  return 0;
#endif
}

int cuda_logical_device_count() {
  {
    std::lock_guard lock(registry().mutex);
    if (registry().logical_gpu >= 0) return registry().logical_count;
  }
  return cuda_device_count();
}

int cuda_gpu_of(Device device) {
  std::lock_guard lock(registry().mutex);
  return registry().logical_gpu >= 0 ? registry().logical_gpu : device.index;
}

int cuda_gpu_shares(Device) {
  std::lock_guard lock(registry().mutex);
  return registry().logical_gpu >= 0 ? registry().logical_count : 1;
}

void set_cuda_logical_devices(int gpu, int count) {
  if (count < 0 || count > kMaxCudaLogicalDevices)
    throw DeviceError("the number of logical devices of a GPU must be 1 to " + std::to_string(kMaxCudaLogicalDevices) +
                      ", got " + std::to_string(count));
  if (count > 0 && (gpu < 0 || gpu >= cuda_device_count()))
    throw DeviceError("cuda:" + std::to_string(gpu) + "x" + std::to_string(count) + " asks for logical devices of GPU " +
                      std::to_string(gpu) + ", but " +
                      (cuda_compiled() ? std::to_string(cuda_device_count()) + " GPU(s) were found"
                                       : std::string("this build has no CUDA backend")));
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  const int new_gpu = count > 0 ? gpu : -1;
  if (new_gpu == r.logical_gpu && count == r.logical_count) return;
  r.logical_gpu = new_gpu;
  r.logical_count = count;
  // Every cuda device changes its GPU or its share of it: new backends, made on first use.
  for (auto it = r.backends.begin(); it != r.backends.end();) {
    if (it->first.first != static_cast<int>(DeviceKind::cuda)) {
      ++it;
      continue;
    }
    it->second->synchronize();
    r.retired.push_back(std::move(it->second));
    it = r.backends.erase(it);
  }
}

int cpu_device_count() {
  std::lock_guard lock(registry().mutex);
  return registry().cpu_count;
}

void set_cpu_device_count(int count, int threads_per_device) {
  if (count < 1 || count > kMaxCpuDevices)
    throw DeviceError("the number of logical CPU devices must be 1 to " + std::to_string(kMaxCpuDevices) + ", got " +
                      std::to_string(count));
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  r.cpu_count = count;
  r.cpu_threads = threads_per_device;
  for (auto& [key, backend] : r.backends)
    if (key.first == static_cast<int>(DeviceKind::cpu))
      static_cast<CpuBackend&>(*backend).set_threads(threads_per_cpu_device(r));
}

std::string device_list() {
  std::string s;
  for (const auto& d : available_devices()) s += (s.empty() ? "" : ", ") + d.str();
  return s;
}

std::vector<Device> available_devices() {
  std::vector<Device> devices;
  for (int i = 0; i < cpu_device_count(); ++i) devices.push_back(Device::cpu(i));
  for (int i = 0; i < cuda_logical_device_count(); ++i) devices.push_back(Device::cuda(i));
  return devices;
}

Backend& backend_for(Device device) {
  auto& r = registry();
  if (device.kind == DeviceKind::cuda) {
    if (!cuda_compiled())
      throw DeviceError("device " + device.str() +
                        " requested, but this build of Tessera has no CUDA backend "
                        "(rebuild with a CUDA toolkit, TESSERA_CUDA=ON); devices: " + device_list());
    if (device.index < 0 || device.index >= cuda_logical_device_count())
      throw DeviceError("device " + device.str() + " does not exist: " +
                        (cuda_logical_device_count() == cuda_device_count()
                             ? std::to_string(cuda_device_count()) + " GPU(s) found"
                             : std::to_string(cuda_logical_device_count()) + " logical devices of GPU " +
                                   std::to_string(cuda_gpu_of(device))) +
                        "; devices: " + device_list());
  }
  std::unique_lock lock(r.mutex);
  if (device.kind == DeviceKind::cpu && device.index >= r.cpu_count) {
    lock.unlock();
    throw DeviceError("device " + device.str() + " does not exist: this process has " +
                      std::to_string(cpu_device_count()) +
                      " logical CPU device(s) (ask for more with devices: cpu:N); devices: " +
                      device_list());
  }
  auto key = std::make_pair(static_cast<int>(device.kind), device.index);
  auto& slot = r.backends[key];
  if (!slot) {
    if (device.kind == DeviceKind::cpu) {
      slot = std::make_unique<CpuBackend>(device, threads_per_cpu_device(r));
    } else {
#if TESSERA_HAVE_CUDA
      const bool logical = r.logical_gpu >= 0;
      slot = make_cuda_backend(device, logical ? r.logical_gpu : device.index, logical ? r.logical_count : 1);
#endif
    }
  }
  return *slot;
}

Allocator& allocator_for(Device device) { return backend_for(device).allocator(); }

// Fills the core's allocator table before main, so Tensor::empty reaches the
// backends. Its name is what the tessera target's link options require
// (CMakeLists.txt), so that no program leaves this file out.
extern "C" const bool tessera_backends_registered;
const bool tessera_backends_registered = [] {
  register_allocator_source(DeviceKind::cpu, allocator_for);
  register_allocator_source(DeviceKind::cuda, allocator_for);
  return true;
}();

}  // namespace tessera
