// Tensor: a typed, shaped, contiguous view of reference-counted device memory.
//
// Copying a Tensor copies the handle, not the data (like a shared_ptr). Several
// tensors may view one Buffer at different offsets: the executor's memory plan
// carves all intermediate values of a step out of one arena this way.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/allocator.hpp"
#include "engine/core/device.hpp"
#include "engine/core/dtype.hpp"
#include "engine/core/error.hpp"
#include "engine/core/shape.hpp"

namespace tessera {

// One block of device memory, returned to its allocator when the last tensor
// viewing it goes away.
class Buffer {
 public:
  Buffer(Allocator& allocator, std::size_t bytes);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return allocator_->device(); }

 private:
  Allocator* allocator_;
  std::size_t bytes_;
  void* data_;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: no storage

  // New uninitialised storage from the device's allocator.
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  // A view of `buffer` starting `byte_offset` bytes in; throws if it does not fit.
  static Tensor view(std::shared_ptr<Buffer> buffer, std::size_t byte_offset, const Shape& shape,
                     DType dtype);
  // Host helpers (CPU devices only), for tests, data loading and printing.
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape,
                            Device device = Device::cpu());
  template <typename T>
  std::vector<T> to_vector() const;

  bool defined() const { return buffer_ != nullptr; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  Device device() const;
  int rank() const { return shape_.rank(); }
  std::int64_t numel() const { return shape_.numel(); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }

  void* raw_data() const;
  template <typename T>
  T* data() const {  // typed access; throws DTypeError on a mismatch
    check_dtype(dtype_of<T>());
    return static_cast<T*>(raw_data());
  }

  // Same storage, new shape with the same element count; throws ShapeError.
  Tensor reshape(const Shape& shape) const;
  // Same storage: rows [start, start + count) of the first axis.
  Tensor rows(std::int64_t start, std::int64_t count) const;

  std::string describe() const;  // "f32[128, 784] on cpu:0"

 private:
  void check_dtype(DType expected) const;
  void check_host(const char* what) const;

  std::shared_ptr<Buffer> buffer_;
  std::size_t offset_ = 0;
  Shape shape_;
  DType dtype_ = DType::f32;
};

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, Device device) {
  if (static_cast<std::int64_t>(values.size()) != shape.numel())
    throw ShapeError("Tensor::from_vector: " + std::to_string(values.size()) +
                     " values for shape " + shape.str());
  Tensor t = empty(shape, dtype_of<T>(), device);
  t.check_host("from_vector");
  if (t.nbytes() > 0) std::memcpy(t.raw_data(), values.data(), t.nbytes());  // an empty vector's data() may be null
  return t;
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  check_host("to_vector");
  const T* p = data<T>();
  return std::vector<T>(p, p + numel());
}

}  // namespace tessera
