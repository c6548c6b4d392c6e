// broadcast_to, transpose, slice and concat on the CUDA backend: each op's
// shapes become a StridedCopy (layout.hpp) run by one kernel (layout.cu) for
// any dtype.
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/layout_kernels.hpp"

namespace tessera {

void CudaBackend::run_broadcast_to(const Tensor& x, const Tensor& out) {
  const StridedCopy copy = make_broadcast_copy(x.shape().dims(), out.shape().dims());
  CudaDeviceGuard guard(gpu_);
  cuda_strided_copy(x.raw_data(), out.raw_data(), static_cast<int>(dtype_size(x.dtype())), copy,
                    stream_);
}

void CudaBackend::run_transpose(const Tensor& x, const Tensor& out, const std::vector<int>& perm) {
  const StridedCopy copy = make_transpose_copy(x.shape().dims(), perm);
  CudaDeviceGuard guard(gpu_);
  cuda_strided_copy(x.raw_data(), out.raw_data(), static_cast<int>(dtype_size(x.dtype())), copy,
                    stream_);
}

void CudaBackend::run_cache_write(const Tensor& cache, const Tensor& rows, const Tensor& positions) {
  const Shape& s = cache.shape();
  const CacheWrite write{.heads = s[1], .length = rows.shape()[2], .capacity = s[2], .width = s[3], .count = rows.numel()};
  CudaDeviceGuard guard(gpu_);
  cuda_cache_write(rows.raw_data(), positions.data<std::int32_t>(), cache.raw_data(),
                   static_cast<int>(dtype_size(cache.dtype())), write, stream_);
}

void CudaBackend::run_slice(const Tensor& x, const Tensor& out, int axis, std::int64_t start) {
  const StridedCopy copy = make_slice_copy(x.shape().dims(), out.shape().dims(), axis, start);
  CudaDeviceGuard guard(gpu_);
  cuda_strided_copy(x.raw_data(), out.raw_data(), static_cast<int>(dtype_size(x.dtype())), copy,
                    stream_);
}

void CudaBackend::run_concat(const std::vector<Tensor>& inputs, const Tensor& out, int axis) {
  // Build every copy first: an UnsupportedError then leaves out untouched.
  std::vector<StridedCopy> copies;
  std::int64_t offset = 0;
  for (const Tensor& in : inputs) {
    copies.push_back(make_concat_copy(in.shape().dims(), out.shape().dims(), axis, offset));
    offset += in.shape()[axis];
  }
  CudaDeviceGuard guard(gpu_);
  for (std::size_t i = 0; i < inputs.size(); ++i)
    cuda_strided_copy(inputs[i].raw_data(), out.raw_data(),
                      static_cast<int>(dtype_size(out.dtype())), copies[i], stream_);
}

}  // namespace tessera
