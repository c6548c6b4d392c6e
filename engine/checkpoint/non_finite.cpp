#include "engine/checkpoint/non_finite.hpp"

#include "engine/core/error.hpp"

namespace tessera {

NonFiniteCount count_non_finite(const Tensor& t) {
  NonFiniteCount found;
  // NaN and infinities are the values whose exponent bits are all ones.
  auto scan = [&](const auto* bits, auto exponent) {
    for (std::int64_t i = 0; i < t.numel(); ++i)
      if ((bits[i] & exponent) == exponent && ++found.count == 1) found.first = i;
  };
  if (t.dtype() == DType::f32) scan(static_cast<const std::uint32_t*>(t.raw_data()), std::uint32_t{0x7f800000});
  if (t.dtype() == DType::bf16) scan(static_cast<const std::uint16_t*>(t.raw_data()), std::uint16_t{0x7f80});
  return found;
}

std::string describe_non_finite(const NonFiniteCount& found, std::int64_t numel) {
  return std::to_string(found.count) + " of " + std::to_string(numel) + " values are NaN or infinite (the first at element " +
         std::to_string(found.first) + ")";
}

void check_finite(const Tensor& t, const std::string& where, const std::string& what, NonFinite policy) {
  if (policy == NonFinite::allow) return;
  const NonFiniteCount found = count_non_finite(t);
  if (found.count == 0) return;
  throw CheckpointError(where + ": " + what + ": " + describe_non_finite(found, t.numel()) +
                        "; refused, as a model with them computes only NaN (to load them anyway: "
                        "--allow-non-finite, or NonFinite::allow)");
}

}  // namespace tessera
