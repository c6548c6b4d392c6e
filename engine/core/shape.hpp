// Shape: the extents of a tensor, outermost first (row-major, like NumPy).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace tessera {

class Shape {
 public:
  Shape() = default;  // rank 0: a scalar with one element
  Shape(std::initializer_list<std::int64_t> dims);
  explicit Shape(std::vector<std::int64_t> dims);

  int rank() const { return static_cast<int>(dims_.size()); }
  std::int64_t operator[](int axis) const { return dims_[static_cast<std::size_t>(axis)]; }
  std::int64_t& operator[](int axis) { return dims_[static_cast<std::size_t>(axis)]; }
  const std::vector<std::int64_t>& dims() const { return dims_; }
  std::int64_t numel() const;
  // Rows of the last axis: the product of every other extent (1 for rank 0 or
  // 1), which numel() / last cannot give when the last extent is 0.
  std::int64_t rows() const;

  // Maps a possibly negative axis (-1 = last) to [0, rank); throws ShapeError.
  int normalize_axis(int axis) const;

  std::string str() const;  // "[128, 784]"
  bool operator==(const Shape& other) const = default;

 private:
  std::vector<std::int64_t> dims_;
};

// Row-major strides in elements.
std::vector<std::int64_t> contiguous_strides(const Shape& shape);

// NumPy broadcasting of two shapes; nullopt when they do not broadcast.
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b);

}  // namespace tessera
