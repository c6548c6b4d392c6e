// Sets of devices, as a config's `devices:` names them. One device is
// Device::parse's "cpu:3" (device number 3); a set is
//   cpu:N      N logical CPU devices, cpu:0 .. cpu:N-1
//   cuda:all   every GPU the CUDA runtime reports
//   cuda:I,J   those GPUs
// Parsing creates nothing and changes nothing; use_devices makes a set's
// logical CPU devices exist, when a run is about to use them.
#pragma once

#include <string_view>
#include <vector>

#include "engine/core/device.hpp"

namespace tessera {

// Throws DeviceError naming the grammar, or the devices that exist when a
// named GPU does not.
std::vector<Device> parse_device_set(std::string_view text);

// Gives the registry as many logical CPU devices as `devices` has (each an
// even share of the cores); GPUs need nothing.
void use_devices(const std::vector<Device>& devices);

}  // namespace tessera
