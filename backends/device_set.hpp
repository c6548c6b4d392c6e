// Sets of devices, as a config's `devices:` names them. One device is
// Device::parse's "cpu:3" (device number 3); a set is
//   cpu:N      N logical CPU devices, cpu:0 .. cpu:N-1
//   cuda:all   every GPU the CUDA runtime reports
//   cuda:I,J   those GPUs
//   cuda:IxN   N logical devices of GPU I, cuda:0 .. cuda:N-1 (registry.hpp's
//              set_cuda_logical_devices): every mesh of N devices on one GPU
// gpu: is another name for cuda:, as Keras names GPUs ("gpu:0").
// Parsing creates nothing and changes nothing; use_devices makes a set's
// logical devices exist, when a run is about to use them.
#pragma once

#include <string_view>
#include <vector>

#include "engine/core/device.hpp"

namespace tessera {

struct DeviceSet {
  std::vector<Device> devices;
  int shared_gpu = -1;  // cuda:IxN: I, the GPU all of them are logical devices of
  bool operator==(const DeviceSet&) const = default;
};

// Throws DeviceError naming the grammar, or the devices that exist when a
// named GPU does not.
DeviceSet parse_device_set(std::string_view text);

// Gives the registry as many logical CPU devices as `devices` has (each an
// even share of the cores) and, with `shared_gpu` >= 0, makes the cuda
// devices logical devices of that GPU (else cuda:i is GPU i).
void use_devices(const std::vector<Device>& devices, int shared_gpu = -1);

}  // namespace tessera
