// KeptCopies: copies of fixed variables (inference weights) in the layout a
// backend multiplies fastest (transposed, or packed in its own layout), or in the dtype mixed precision multiplies them
// in, made once and shared by every executor of a host, so that a weight read
// by several programs (batch sizes, prefill windows) is copied once. Executor::fix_variables says which executors may
// use them; the host calls changed() whenever the variables get new values
// (a load), and the executors ask again on their next run.
//
//   auto kept = std::make_shared<KeptCopies>();
//   executor.fix_variables(kept);   // every run multiplies kept copies
//   ...load new weights into the bound tensors...
//   kept->changed();                // the next run copies them again
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "backends/backend.hpp"

namespace tessera {

class KeptCopies {
 public:
  // b [K, N] transposed into [N, K] on `backend`, made now unless it was kept
  // since the last change. Throws OutOfMemoryError where the copy does not fit.
  // Copies are found by their source's bytes (address and extent) and Buffer:
  // a copy goes once its source's Buffer is freed, so a tensor that a later
  // allocation puts at the same address gets copies of its own.
  Tensor transposed(const Tensor& b, Backend& backend);
  // op(b) (b transposed where args.transpose_b says) in `backend`'s packed
  // layout (Backend::pack_constant_b), made now unless kept since the last
  // change, found as above (and by args.transpose_b). Throws
  // OutOfMemoryError where the copy does not fit.
  PackedMatrix packed(const Tensor& b, const MatmulArgs& args, Backend& backend);
  // x converted to `dtype` on `backend` (Backend::cast), made now unless kept
  // since the last change, found as above (and by `dtype`), and returned in
  // x's shape. Throws OutOfMemoryError where it does not fit.
  Tensor cast(const Tensor& x, DType dtype, Backend& backend);
  // The variables have new values: every copy is dropped, the count moves on.
  void changed();
  // Counts changed() calls: an executor whose copies date from an earlier
  // count asks for them again.
  std::uint64_t version() const;
  // The bytes of the copies kept now.
  std::size_t bytes() const;

 private:
  mutable std::mutex mutex_;
  std::uint64_t version_ = 0;
  struct Kept {
    std::weak_ptr<Buffer> source;  // the copy's source: expired, the copy is stale
    Tensor copy;
  };
  // The copy under `key` of `source`, made by `make` unless kept; drops the
  // copies of freed sources first.
  template <typename Key, typename Make>
  static Tensor find_or_make(std::map<Key, Kept>& copies, const Key& key, const Tensor& source, Make make);
  // By the variable's storage and shape.
  std::map<std::tuple<const void*, std::int64_t, std::int64_t>, Kept> transposed_;
  // By the variable's storage and shape, and whether op(b) transposes it.
  std::map<std::tuple<const void*, std::int64_t, std::int64_t, bool>, Kept> packed_;
  // By the variable's storage, element count and the dtype cast to.
  std::map<std::tuple<const void*, std::int64_t, DType>, Kept> cast_;
};

}  // namespace tessera
