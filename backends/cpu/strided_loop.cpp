#include "backends/cpu/strided_loop.hpp"

namespace tessera {

std::vector<std::int64_t> broadcast_strides(const Shape& operand, const Shape& out) {
  auto dense = contiguous_strides(operand);
  std::vector<std::int64_t> strides(static_cast<std::size_t>(out.rank()), 0);
  int shift = out.rank() - operand.rank();
  for (int i = 0; i < operand.rank(); ++i)
    strides[i + shift] = operand[i] == 1 ? 0 : dense[i];
  return strides;
}

}  // namespace tessera
