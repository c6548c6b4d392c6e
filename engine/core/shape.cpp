#include "engine/core/shape.hpp"

#include <algorithm>

#include "engine/core/error.hpp"

namespace tessera {

Shape::Shape(std::initializer_list<std::int64_t> dims) : Shape(std::vector<std::int64_t>(dims)) {}

Shape::Shape(std::vector<std::int64_t> dims) : dims_(std::move(dims)) {
  for (auto d : dims_)
    if (d < 0) throw ShapeError("negative dimension in shape " + str());
}

std::int64_t Shape::numel() const {
  std::int64_t n = 1;
  for (auto d : dims_)
    if (__builtin_mul_overflow(n, d, &n)) throw ShapeError("shape " + str() + " has more elements than a 64-bit count");
  return n;
}

std::int64_t Shape::rows() const {
  return dims_.empty() ? 1 : Shape(std::vector<std::int64_t>(dims_.begin(), dims_.end() - 1)).numel();
}

int Shape::normalize_axis(int axis) const {
  int a = axis < 0 ? axis + rank() : axis;
  if (a < 0 || a >= rank())
    throw ShapeError("axis " + std::to_string(axis) + " is out of range for shape " + str());
  return a;
}

std::string Shape::str() const {
  std::string s = "[";
  for (std::size_t i = 0; i < dims_.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[i]);
  }
  return s + "]";
}

std::vector<std::int64_t> contiguous_strides(const Shape& shape) {
  std::vector<std::int64_t> strides(static_cast<std::size_t>(shape.rank()), 1);
  for (int i = shape.rank() - 2; i >= 0; --i) strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  int rank = std::max(a.rank(), b.rank());
  std::vector<std::int64_t> dims(static_cast<std::size_t>(rank));
  for (int i = 0; i < rank; ++i) {
    int ia = a.rank() - rank + i, ib = b.rank() - rank + i;
    std::int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1) return std::nullopt;
    dims[i] = da == 1 ? db : da;
  }
  return Shape(std::move(dims));
}

}  // namespace tessera
