#include "engine/core/device.hpp"

#include <charconv>

#include "engine/core/error.hpp"

namespace tessera {

std::string_view device_kind_name(DeviceKind kind) {
  return kind == DeviceKind::cpu ? "cpu" : "cuda";
}

Device Device::parse(std::string_view text) {
  auto colon = text.find(':');
  std::string_view kind = text.substr(0, colon);
  Device device;
  if (kind == "cpu") {
    device.kind = DeviceKind::cpu;
  } else if (kind == "cuda" || kind == "gpu") {  // gpu:N as Keras names a GPU
    device.kind = DeviceKind::cuda;
  } else {
    throw DeviceError("unknown device '" + std::string(text) +
                      "': expected cpu:N or cuda:N (or gpu:N)");
  }
  if (colon == std::string_view::npos) return device;
  std::string_view index = text.substr(colon + 1);
  auto [end, ec] = std::from_chars(index.data(), index.data() + index.size(), device.index);
  if (ec != std::errc() || end != index.data() + index.size() || device.index < 0)
    throw DeviceError("bad device index in '" + std::string(text) +
                      "': expected a non-negative integer after ':'");
  return device;
}

std::string Device::str() const {
  return std::string(device_kind_name(kind)) + ":" + std::to_string(index);
}

}  // namespace tessera
