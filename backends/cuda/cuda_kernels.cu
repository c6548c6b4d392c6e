// The CUDA backend's own kernels. Compiled by nvcc in a separate object
// library (see CMakeLists.txt) so that the host compiler's warning flags of
// the tessera target do not reach nvcc.
#include "backends/cuda/cuda_kernels.hpp"

#include <type_traits>

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/epilogue.hpp"
#include "backends/cuda/launch.hpp"
#include "backends/cuda/quad_access.hpp"
#include "engine/core/error.hpp"

namespace tessera {
namespace {

// One element per thread up to a cap on the blocks (launch.hpp); the kernels
// loop with a grid stride past the cap.
unsigned blocks_for(std::int64_t count) {
  return static_cast<unsigned>(launch_config(count).blocks);
}
constexpr int kThreads = kLaunchThreads;

template <typename T>
__global__ void fill_kernel(T* data, std::int64_t count, T value) {
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < count; i += stride)
    data[i] = value;
}

template <typename T>
void launch_fill(void* data, std::int64_t count, T value, cudaStream_t stream) {
  fill_kernel<T><<<blocks_for(count), kThreads, 0, stream>>>(static_cast<T*>(data), count, value);
  cuda_check(cudaGetLastError(), "fill_kernel<<<blocks, 256, 0, stream>>>", __FILE__, __LINE__);
}

// The bias's element: float, or bf16 as its raw bits.
__device__ inline float load(const float* p, std::int64_t i) { return p[i]; }
__device__ inline float load(const std::uint16_t* p, std::int64_t i) {
  return bf16_bits_to_float(p[i]);
}

// out = act(product + bias) element by element, out f32 (product itself,
// in place, or another array) or bf16 rounded once. The bias column in Index
// arithmetic: 32-bit where the output has fewer than 2^32 elements (a 64-bit
// remainder is a long routine on a GPU).
template <typename Out, typename Bias, typename Index>
__global__ void matmul_epilogue_kernel(const float* product, Out* out, const Bias* bias, std::int64_t rows,
                                       std::int64_t cols, Activation act) {
  const std::int64_t count = rows * cols;
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < count; i += stride) {
    const float b =
        bias != nullptr ? load(bias, static_cast<std::int64_t>(static_cast<Index>(i) % static_cast<Index>(cols))) : 0.0f;
    store_element(out, i, matmul_epilogue(product[i], b, act));
  }
}

// An f32 bias (or none) four elements a thread, where the rows are whole
// quads (cols % 4 == 0, so a quad never straddles two rows) and the arrays
// are aligned for them: the same element function.
template <typename Out, typename Index>
__global__ void matmul_epilogue_quads_kernel(const float* product, Out* out, const float* bias, std::int64_t rows,
                                             std::int64_t cols, Activation act) {
  const std::int64_t quads = rows * cols / 4, row_quads = cols / 4;
  for (std::int64_t q = first_index(); q < quads; q += grid_stride()) {
    Floats4 y = load_quad(product, q);
    const Floats4 b = bias != nullptr
                          ? load_quad(bias, static_cast<std::int64_t>(static_cast<Index>(q) % static_cast<Index>(row_quads)))
                          : Floats4{};
    for (int k = 0; k < 4; ++k) y.v[k] = matmul_epilogue(y.v[k], b.v[k], act);
    store_quad(out, q, y);
  }
}

template <typename Out, typename Bias>
void launch_epilogue(const float* product, void* out, const void* bias, std::int64_t rows, std::int64_t cols,
                     Activation act, cudaStream_t stream) {
  const bool narrow = rows * cols < (std::int64_t{1} << 32);  // so is cols: never a divisor of 0
  if constexpr (std::is_same_v<Bias, float>) {
    if (cols % 4 == 0 && aligned_for_quads(product, static_cast<const Out*>(out), static_cast<const float*>(bias))) {
      (narrow ? matmul_epilogue_quads_kernel<Out, std::uint32_t> : matmul_epilogue_quads_kernel<Out, std::int64_t>)
          <<<blocks_for(rows * cols / 4), kThreads, 0, stream>>>(product, static_cast<Out*>(out),
                                                                 static_cast<const float*>(bias), rows, cols, act);
      cuda_check(cudaGetLastError(), "matmul_epilogue_quads_kernel<<<blocks, 256, 0, stream>>>", __FILE__,
                 __LINE__);
      return;
    }
  }
  (narrow ? matmul_epilogue_kernel<Out, Bias, std::uint32_t> : matmul_epilogue_kernel<Out, Bias, std::int64_t>)
      <<<blocks_for(rows * cols), kThreads, 0, stream>>>(product, static_cast<Out*>(out),
                                                        static_cast<const Bias*>(bias), rows, cols, act);
  cuda_check(cudaGetLastError(), "matmul_epilogue_kernel<<<blocks, 256, 0, stream>>>", __FILE__,
             __LINE__);
}

}  // namespace

void cuda_fill(void* data, std::int64_t count, int element_size, std::uint64_t bits,
               cudaStream_t stream) {
  if (count <= 0) return;
  switch (element_size) {
    case 2: return launch_fill(data, count, static_cast<std::uint16_t>(bits), stream);
    case 4: return launch_fill(data, count, static_cast<std::uint32_t>(bits), stream);
    case 8: return launch_fill(data, count, bits, stream);
    default: throw Error("cuda_fill: element size " + std::to_string(element_size) +
                         " is not 2, 4 or 8");
  }
}

void cuda_matmul_epilogue(const float* product, void* out, bool out_bf16, const void* bias, bool bias_bf16,
                          std::int64_t rows, std::int64_t cols, Activation act, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  using bf16_bits = std::uint16_t;
  if (out_bf16) {
    if (bias_bf16) return launch_epilogue<bf16_bits, bf16_bits>(product, out, bias, rows, cols, act, stream);
    return launch_epilogue<bf16_bits, float>(product, out, bias, rows, cols, act, stream);
  }
  if (bias_bf16) return launch_epilogue<float, bf16_bits>(product, out, bias, rows, cols, act, stream);
  return launch_epilogue<float, float>(product, out, bias, rows, cols, act, stream);
}

}  // namespace tessera
