// Elementwise unary, unary-backward and broadcasting binary kernels: grid-stride
// loops (launch.hpp), four elements a thread where they can, around the host/device element functions of
// elementwise.hpp and broadcast_index.hpp, which tests check on the host.
// The op is a kernel argument switched on per element: it is the same for
// every thread (no divergence) and the kernels are memory-bound.
#include "backends/cuda/elementwise_kernels.hpp"

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/elementwise.hpp"
#include "backends/cuda/launch.hpp"
#include "backends/cuda/quad_access.hpp"

namespace tessera {
namespace {

// kQuads: four elements a thread in 16-byte accesses (launch.hpp), where
// every pointer is aligned for them; the element functions are the same.
// Out: float, or std::uint16_t for bf16 bits (the result rounded as it is stored).
template <bool kQuads, typename Out>
__global__ void unary_kernel(UnaryOp op, const float* x, Out* y, std::int64_t count) {
  for_each_element<kQuads>(
      count,
      [&](std::int64_t q) {
        Floats4 v = load_quad(x, q);
        for (float& e : v.v) e = unary_forward(op, e);
        store_quad(y, q, v);
      },
      [&](std::int64_t i) { store_element(y, i, unary_forward(op, x[i])); });
}

template <typename Out>
void launch_unary(UnaryOp op, const float* x, Out* y, std::int64_t count, cudaStream_t stream) {
  const bool quads = aligned_for_quads(x, y);
  const LaunchConfig cfg = quads ? quad_launch_config(count) : launch_config(count);
  if (cfg.blocks == 0) return;
  (quads ? unary_kernel<true, Out> : unary_kernel<false, Out>)<<<cfg.blocks, cfg.threads, 0, stream>>>(op, x, y,
                                                                                                       count);
  cuda_check(cudaGetLastError(), "unary_kernel<<<blocks, 256, 0, stream>>>", __FILE__, __LINE__);
}

template <bool kQuads>
__global__ void unary_backward_kernel(UnaryOp op, const float* x, const float* dy, float* dx,
                                      std::int64_t count) {
  for_each_element<kQuads>(
      count,
      [&](std::int64_t q) {
        const Floats4 xs = load_quad(x, q);
        Floats4 d = load_quad(dy, q);
        for (int k = 0; k < 4; ++k) d.v[k] = unary_backward(op, xs.v[k], d.v[k]);
        store_quad(dx, q, d);
      },
      [&](std::int64_t i) { dx[i] = unary_backward(op, x[i], dy[i]); });
}

template <typename Index>
__global__ void binary_kernel(BinaryOp op, const float* a, const float* b, float* out,
                              BroadcastIndex index, std::int64_t count) {
  for (std::int64_t i = first_index(); i < count; i += grid_stride()) {
    const BroadcastOffsets o = index.at(static_cast<Index>(i));
    out[i] = binary_apply(op, a[o.a], b[o.b]);
  }
}

// Operands of the output's shape (the index merged them into one contiguous
// axis): no index arithmetic, whose 64-bit divisions cost as much as the loads.
template <bool kQuads>
__global__ void binary_same_shape_kernel(BinaryOp op, const float* a, const float* b, float* out,
                                         std::int64_t count) {
  for_each_element<kQuads>(
      count,
      [&](std::int64_t q) {
        Floats4 x = load_quad(a, q);
        const Floats4 y = load_quad(b, q);
        for (int k = 0; k < 4; ++k) x.v[k] = binary_apply(op, x.v[k], y.v[k]);
        store_quad(out, q, x);
      },
      [&](std::int64_t i) { out[i] = binary_apply(op, a[i], b[i]); });
}

}  // namespace

void cuda_unary(UnaryOp op, const float* x, float* y, std::int64_t count, cudaStream_t stream) {
  launch_unary(op, x, y, count, stream);
}

void cuda_unary_to_bf16(UnaryOp op, const float* x, std::uint16_t* y, std::int64_t count, cudaStream_t stream) {
  launch_unary(op, x, y, count, stream);
}

void cuda_unary_backward(UnaryOp op, const float* x, const float* dy, float* dx,
                         std::int64_t count, cudaStream_t stream) {
  const bool quads = aligned_for_quads(x, dy, dx);
  const LaunchConfig cfg = quads ? quad_launch_config(count) : launch_config(count);
  if (cfg.blocks == 0) return;
  (quads ? unary_backward_kernel<true> : unary_backward_kernel<false>)<<<cfg.blocks, cfg.threads, 0, stream>>>(
      op, x, dy, dx, count);
  cuda_check(cudaGetLastError(), "unary_backward_kernel<<<blocks, 256, 0, stream>>>", __FILE__,
             __LINE__);
}

void cuda_binary(BinaryOp op, const float* a, const float* b, float* out,
                 const BroadcastIndex& index, std::int64_t count, cudaStream_t stream) {
  const LaunchConfig cfg = launch_config(count);
  if (cfg.blocks == 0) return;
  const bool same_shape = index.rank == 1 && index.a_stride[0] == 1 && index.b_stride[0] == 1;
  if (same_shape && aligned_for_quads(a, b, out))
    binary_same_shape_kernel<true><<<quad_launch_config(count).blocks, cfg.threads, 0, stream>>>(op, a, b, out, count);
  else if (same_shape)
    binary_same_shape_kernel<false><<<cfg.blocks, cfg.threads, 0, stream>>>(op, a, b, out, count);
  else if (index.narrow(count))
    binary_kernel<std::uint32_t><<<cfg.blocks, cfg.threads, 0, stream>>>(op, a, b, out, index, count);
  else
    binary_kernel<std::int64_t><<<cfg.blocks, cfg.threads, 0, stream>>>(op, a, b, out, index, count);
  cuda_check(cudaGetLastError(), "binary_kernel<<<blocks, 256, 0, stream>>>", __FILE__, __LINE__);
}

}  // namespace tessera
