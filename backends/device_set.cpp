#include "backends/device_set.hpp"

#include <algorithm>
#include <string>

#include "backends/registry.hpp"
#include "engine/core/error.hpp"

namespace tessera {

DeviceSet parse_device_set(std::string_view text) {
  const auto colon = text.find(':');
  std::string kind(text.substr(0, colon));
  if (kind == "gpu") kind = "cuda";  // as Keras names GPUs
  const std::string rest(colon == std::string_view::npos ? "" : text.substr(colon + 1));
  const std::string quoted = "'" + std::string(text) + "'";
  std::vector<Device> devices;
  if (kind == "cpu") {
    int n = 0;
    if (!rest.empty() && rest.size() <= 5 && rest.find_first_not_of("0123456789") == std::string::npos) n = std::stoi(rest);
    if (rest.empty()) n = 1;
    if (n < 1 || n > kMaxCpuDevices || std::to_string(n) != (rest.empty() ? "1" : rest))
      throw DeviceError(quoted + " is not cpu:N with N from 1 to " + std::to_string(kMaxCpuDevices) +
                        " (the number of logical CPU devices)");
    for (int i = 0; i < n; ++i) devices.push_back(Device::cpu(i));
    return {devices};
  }
  if (kind == "cuda") {
    if (const auto x = rest.find('x'); x != std::string::npos) {  // cuda:IxN
      const std::string gpu = rest.substr(0, x), count = rest.substr(x + 1);
      auto number = [](const std::string& t) {
        return !t.empty() && t.size() <= 4 && t.find_first_not_of("0123456789") == std::string::npos ? std::stoi(t) : -1;
      };
      const int g = number(gpu), n = number(count);
      if (g < 0 || n < 1 || n > kMaxCudaLogicalDevices || std::to_string(n) != count)
        throw DeviceError(quoted + " is not cuda:IxN, N logical devices (1 to " + std::to_string(kMaxCudaLogicalDevices) +
                          ") of GPU I");
      if (g >= cuda_device_count())
        throw DeviceError(quoted + " asks for logical devices of GPU " + gpu + ", but " +
                          (!cuda_compiled()          ? std::string("this build has no CUDA backend")
                           : cuda_device_count() == 0 ? std::string("no GPU was found")
                                                      : std::to_string(cuda_device_count()) + " GPU(s) were found") +
                          "; devices: " + device_list());
      for (int i = 0; i < n; ++i) devices.push_back(Device::cuda(i));
      return {devices, g};
    }
    if (rest == "all") {
      for (int i = 0; i < cuda_device_count(); ++i) devices.push_back(Device::cuda(i));
    } else {
      std::size_t start = 0;
      for (;;) {
        const std::size_t comma = rest.find(',', start);
        const std::string item = rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (item.empty() || item.size() > 4 || item.find_first_not_of("0123456789") != std::string::npos)
          throw DeviceError(quoted + " is not cuda:all, cuda:I,J,... (GPU indices) or cuda:IxN (N logical devices of GPU I)");
        devices.push_back(Device::cuda(std::stoi(item)));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    }
    if (devices.empty())
      throw DeviceError(quoted + " asks for GPUs, but " +
                        std::string(cuda_compiled() ? "none was found" : "this build has no CUDA backend") +
                        "; devices: " + device_list());
    for (const auto& d : devices)
      if (d.index >= cuda_device_count()) throw DeviceError(d.str() + " does not exist; devices: " + device_list());
    return {devices};
  }
  throw DeviceError(quoted + " names no device kind: use cpu:N, cuda:all, cuda:0,1 or cuda:0x4");
}

void use_devices(const std::vector<Device>& devices, int shared_gpu) {
  int cpus = 0, gpus = 0;
  for (const auto& d : devices) {
    if (d.kind == DeviceKind::cpu) cpus = std::max(cpus, d.index + 1);
    else gpus = std::max(gpus, d.index + 1);
  }
  if (cpus > 0) set_cpu_device_count(cpus);
  if (shared_gpu >= 0) set_cuda_logical_devices(shared_gpu, gpus);
  else if (gpus > 0) set_cuda_logical_devices(0, 0);  // cuda:i is GPU i again
}

}  // namespace tessera
