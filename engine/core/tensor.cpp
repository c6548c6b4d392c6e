#include "engine/core/tensor.hpp"

namespace tessera {

Buffer::Buffer(Allocator& allocator, std::size_t bytes)
    : allocator_(&allocator), bytes_(bytes), data_(allocator.allocate(bytes)) {}

Buffer::~Buffer() { allocator_->deallocate(data_, bytes_); }

namespace {

// numel x the element size, which must fit a size_t.
std::size_t bytes_of(const Shape& shape, DType dtype) {
  std::size_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<std::size_t>(shape.numel()), dtype_size(dtype), &bytes))
    throw ShapeError(std::string(dtype_name(dtype)) + shape.str() + " has more bytes than a 64-bit count");
  return bytes;
}

}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  return view(std::make_shared<Buffer>(device_allocator(device), bytes_of(shape, dtype)), 0, shape, dtype);
}

Tensor Tensor::view(std::shared_ptr<Buffer> buffer, std::size_t byte_offset, const Shape& shape,
                    DType dtype) {
  auto bytes = bytes_of(shape, dtype);
  if (buffer == nullptr || bytes > buffer->bytes() || byte_offset > buffer->bytes() - bytes)
    throw ShapeError("Tensor::view: " + std::string(dtype_name(dtype)) + shape.str() + " (" +
                     std::to_string(bytes) + " bytes) at offset " + std::to_string(byte_offset) +
                     " does not fit in a buffer of " +
                     std::to_string(buffer ? buffer->bytes() : 0) + " bytes");
  Tensor t;
  t.buffer_ = std::move(buffer);
  t.offset_ = byte_offset;
  t.shape_ = shape;
  t.dtype_ = dtype;
  return t;
}

Device Tensor::device() const { return buffer_ ? buffer_->device() : Device::cpu(); }

void* Tensor::raw_data() const {
  if (!buffer_) throw Error("access to the data of an undefined tensor");
  return static_cast<char*>(buffer_->data()) + offset_;
}

Tensor Tensor::reshape(const Shape& shape) const {
  if (shape.numel() != numel())
    throw ShapeError("reshape: cannot view " + describe() + " as " + shape.str() + " (" +
                     std::to_string(numel()) + " vs " + std::to_string(shape.numel()) +
                     " elements)");
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::rows(std::int64_t start, std::int64_t count) const {
  if (rank() == 0 || start < 0 || count < 0 || start + count > shape_[0])
    throw ShapeError("rows: [" + std::to_string(start) + ", " + std::to_string(start + count) +
                     ") is outside the first axis of " + describe());
  auto dims = shape_.dims();
  dims[0] = count;
  std::size_t row_bytes = shape_[0] == 0 ? 0 : nbytes() / static_cast<std::size_t>(shape_[0]);
  return view(buffer_, offset_ + static_cast<std::size_t>(start) * row_bytes, Shape(dims), dtype_);
}

std::string Tensor::describe() const {
  return std::string(dtype_name(dtype_)) + shape_.str() + " on " + device().str();
}

void Tensor::check_dtype(DType expected) const {
  if (expected != dtype_)
    throw DTypeError("tensor " + describe() + " accessed as " +
                     std::string(dtype_name(expected)));
}

void Tensor::check_host(const char* what) const {
  if (device().kind != DeviceKind::cpu)
    throw DeviceError(std::string("Tensor::") + what + " needs a CPU tensor, got " + describe());
}

}  // namespace tessera
