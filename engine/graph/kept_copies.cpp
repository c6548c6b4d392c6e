#include "engine/graph/kept_copies.hpp"

namespace tessera {

Tensor KeptCopies::transposed(const Tensor& b, Backend& backend) {
  std::lock_guard lock(mutex_);
  auto [it, added] = transposed_.try_emplace({b.raw_data(), b.shape()[0], b.shape()[1]});
  if (added) {
    try {
      it->second = Tensor::empty({b.shape()[1], b.shape()[0]}, b.dtype(), backend.device());
      backend.transpose(b, it->second, {1, 0});
    } catch (...) {
      transposed_.erase(it);
      throw;
    }
  }
  return it->second;
}

Tensor KeptCopies::cast(const Tensor& x, DType dtype, Backend& backend) {
  std::lock_guard lock(mutex_);
  auto [it, added] = cast_.try_emplace({x.raw_data(), x.numel(), dtype});
  if (added) {
    try {
      it->second = Tensor::empty(x.shape(), dtype, backend.device());
      backend.cast(x, it->second);
    } catch (...) {
      cast_.erase(it);
      throw;
    }
  }
  return it->second.reshape(x.shape());
}

void KeptCopies::changed() {
  std::lock_guard lock(mutex_);
  transposed_.clear();
  cast_.clear();
  ++version_;
}

std::uint64_t KeptCopies::version() const {
  std::lock_guard lock(mutex_);
  return version_;
}

std::size_t KeptCopies::bytes() const {
  std::lock_guard lock(mutex_);
  std::size_t bytes = 0;
  for (const auto& [key, copy] : transposed_) bytes += copy.nbytes();
  for (const auto& [key, copy] : cast_) bytes += copy.nbytes();
  return bytes;
}

}  // namespace tessera
