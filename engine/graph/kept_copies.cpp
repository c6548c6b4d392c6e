#include "engine/graph/kept_copies.hpp"

namespace tessera {

template <typename Key, typename Make>
Tensor KeptCopies::find_or_make(std::map<Key, Kept>& copies, const Key& key, const Tensor& source, Make make) {
  std::erase_if(copies, [](const auto& entry) { return entry.second.source.expired(); });
  if (auto it = copies.find(key); it != copies.end() && it->second.source.lock() == source.buffer())
    return it->second.copy;
  Tensor copy = make();  // a throw keeps nothing
  copies[key] = Kept{source.buffer(), copy};
  return copy;
}

Tensor KeptCopies::transposed(const Tensor& b, Backend& backend) {
  std::lock_guard lock(mutex_);
  return find_or_make(transposed_, {b.raw_data(), b.shape()[0], b.shape()[1]}, b, [&] {
    Tensor copy = Tensor::empty({b.shape()[1], b.shape()[0]}, b.dtype(), backend.device());
    backend.transpose(b, copy, {1, 0});
    return copy;
  });
}

PackedMatrix KeptCopies::packed(const Tensor& b, const MatmulArgs& args, Backend& backend) {
  std::lock_guard lock(mutex_);
  const std::int64_t rows = b.shape()[args.transpose_b ? 1 : 0], cols = b.shape()[args.transpose_b ? 0 : 1];
  Tensor data = find_or_make(packed_, {b.raw_data(), b.shape()[0], b.shape()[1], args.transpose_b}, b, [&] {
    PackedMatrix made{Tensor::empty({backend.packed_b_floats(rows, cols)}, DType::f32, backend.device()), rows, cols};
    backend.pack_constant_b(b, args, made);
    return made.data;
  });
  return {data, rows, cols};
}

Tensor KeptCopies::cast(const Tensor& x, DType dtype, Backend& backend) {
  std::lock_guard lock(mutex_);
  return find_or_make(cast_, {x.raw_data(), x.numel(), dtype}, x, [&] {
    Tensor copy = Tensor::empty(x.shape(), dtype, backend.device());
    backend.cast(x, copy);
    return copy;
  }).reshape(x.shape());
}

void KeptCopies::changed() {
  std::lock_guard lock(mutex_);
  transposed_.clear();
  packed_.clear();
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
  for (const auto& [key, kept] : transposed_) bytes += kept.copy.nbytes();
  for (const auto& [key, kept] : packed_) bytes += kept.copy.nbytes();
  for (const auto& [key, kept] : cast_) bytes += kept.copy.nbytes();
  return bytes;
}

}  // namespace tessera
