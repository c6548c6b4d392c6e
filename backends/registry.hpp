// The devices of this process and their backends.
//
// A registry (the one kind of global mutable state the engine keeps): one
// Backend per device, created on first use and living until exit.
// `cpu:0 .. cpu:N-1` are the logical CPU devices (N = cpu_device_count(), 1 by
// default; a distribution asking for cpu:8 sets it to 8), sharing the machine's
// cores evenly. `cuda:i` are the GPUs the CUDA runtime reports, when the engine
// was built with CUDA.
#pragma once

#include <string>
#include <vector>

#include "backends/backend.hpp"

namespace tessera {

// The backend of `device`; throws DeviceError naming the devices that exist.
Backend& backend_for(Device device);
Allocator& allocator_for(Device device);

// Every device usable now: the logical CPU devices, then the GPUs.
std::vector<Device> available_devices();
// The same, comma-separated ("cpu:0, cpu:1, cuda:0"), for error messages.
std::string device_list();

int cpu_device_count();
// Each logical CPU device runs a worker thread: a bound that keeps a typo
// (cpu:100000) an error instead of a process that starts that many threads.
inline constexpr int kMaxCpuDevices = 4096;
// Sets the number of logical CPU devices (1 .. kMaxCpuDevices) and gives each an
// equal share of the hardware threads (at least one). `threads_per_device` = 0
// means "even share".
void set_cpu_device_count(int count, int threads_per_device = 0);

int cuda_device_count();  // 0 without a GPU or without CUDA in the build
bool cuda_compiled();     // whether this build contains the CUDA backend

}  // namespace tessera
