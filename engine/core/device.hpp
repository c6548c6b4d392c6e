// Device: where a tensor lives and an op runs.
//
// `cpu:N` names one of the logical CPU devices of this process (each with its own
// worker thread and share of cores, like XLA's host device count), `cuda:N` a GPU.
#pragma once

#include <string>
#include <string_view>

namespace tessera {

enum class DeviceKind : unsigned char { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  static Device cpu(int index = 0) { return {DeviceKind::cpu, index}; }
  static Device cuda(int index = 0) { return {DeviceKind::cuda, index}; }
  // Parses "cpu:3", "cuda:0" (or Keras' "gpu:0"), "cpu" (= cpu:0); throws DeviceError.
  static Device parse(std::string_view text);

  std::string str() const;
  bool operator==(const Device& other) const = default;
};

std::string_view device_kind_name(DeviceKind kind);

// Whether a kernel on `a` can read a tensor of `b` directly: the same device,
// or two logical CPU devices (they share the host's memory).
inline bool shares_memory(Device a, Device b) { return a == b || (a.kind == DeviceKind::cpu && b.kind == DeviceKind::cpu); }

// Where a run keeps its variables between steps. On a device that shares the
// host's memory (a CPU), in host tensors its kernels read directly; on one
// that does not (a GPU), as device copies, with batches copied in and outputs
// out. Residency::device asks a CPU device for the copies too: the path a GPU
// takes, run and tested where no GPU is.
enum class Residency { automatic, device };
inline bool keeps_copies(Residency residency, Device device) {
  return residency == Residency::device || !shares_memory(Device::cpu(), device);
}
// Where the host writes what `device` will hold: host memory when the device
// keeps copies of it, else the device itself (a CPU device's own memory).
inline Device host_side(bool copies, Device device) { return copies ? Device::cpu() : device; }

}  // namespace tessera
