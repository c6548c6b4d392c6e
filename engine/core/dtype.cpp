#include "engine/core/dtype.hpp"

#include <array>
#include <string>

#include "engine/core/error.hpp"

namespace tessera {
namespace {

struct DTypeInfo {
  std::string_view name;
  std::size_t size;
  bool floating;
};

constexpr std::array<DTypeInfo, kDTypeCount> kDTypeInfo = {{
    {"f32", 4, true},
    {"bf16", 2, true},
    {"i32", 4, false},
    {"i64", 8, false},
}};

const DTypeInfo& info(DType dtype) { return kDTypeInfo[static_cast<std::size_t>(dtype)]; }

}  // namespace

std::size_t dtype_size(DType dtype) { return info(dtype).size; }
std::string_view dtype_name(DType dtype) { return info(dtype).name; }
bool is_floating(DType dtype) { return info(dtype).floating; }

DType parse_dtype(std::string_view name) {
  for (int i = 0; i < kDTypeCount; ++i)
    if (kDTypeInfo[i].name == name) return static_cast<DType>(i);
  throw DTypeError("unknown dtype '" + std::string(name) + "' (known: f32, bf16, i32, i64)");
}

}  // namespace tessera
