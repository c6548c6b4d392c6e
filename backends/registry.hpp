// The devices of this process and their backends.
//
// A registry (the one kind of global mutable state the engine keeps): one
// Backend per device, created on first use and living until exit.
// `cpu:0 .. cpu:N-1` are the logical CPU devices (N = cpu_device_count(), 1 by
// default; a distribution asking for cpu:8 sets it to 8), sharing the machine's
// cores evenly. `cuda:i` is GPU i of those the CUDA runtime reports, when the
// engine was built with CUDA, unless the process made logical GPU devices:
// then cuda:0 .. cuda:N-1 share one GPU (set_cuda_logical_devices).
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

int cuda_device_count();  // GPUs: 0 without a GPU or without CUDA in the build
bool cuda_compiled();     // whether this build contains the CUDA backend

// Logical GPU devices, as cpu:N are logical CPU devices: cuda:0 .. cuda:N-1
// become N devices of GPU `gpu`, each with its own stream, and each allowed
// an even share (1/N) of the GPU's memory. One GPU can then run any mesh of
// N devices (NCCL refuses two ranks on one GPU; their collectives are
// device-to-device copies and reduction kernels, ShmCommunicator's). Meant
// to be set once, when a run starts: a cuda device whose GPU or share
// changes gets a new backend, and tensors made on the old one must not be
// used after (they keep their memory until freed). count 0 restores
// "cuda:i is GPU i". Throws DeviceError for a GPU that does not exist or a
// count above kMaxCudaLogicalDevices.
inline constexpr int kMaxCudaLogicalDevices = 64;
void set_cuda_logical_devices(int gpu, int count);
// The cuda devices usable now: the GPUs, or the logical devices of one.
int cuda_logical_device_count();
// The GPU that cuda device `device` runs on (its index when no logical devices were made).
int cuda_gpu_of(Device device);
// How many logical devices share the GPU of `device` (1: it has the GPU to itself).
int cuda_gpu_shares(Device device);

}  // namespace tessera
