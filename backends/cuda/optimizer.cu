// Optimizer kernels: grid-stride loops, four parameters a thread where they can, around the element functions of
// optimizer.hpp, one pass over parameter, gradient and state per step.
#include "backends/cuda/optimizer_kernels.hpp"

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/launch.hpp"
#include "backends/cuda/quad_access.hpp"

namespace tessera {
namespace {

// kQuads: four parameters a thread in 16-byte accesses (launch.hpp) where every
// array is aligned for them; the step sees the same floats either way.
template <bool kQuads>
__global__ void sgd_kernel(float* p, const float* g, float* v, SgdStep step, std::int64_t count) {
  for_each_element<kQuads>(
      count,
      [&](std::int64_t q) {
        // Without momentum the step neither reads nor writes the velocity.
        const bool velocity = step.momentum != 0.0f;
        Floats4 ps = load_quad(p, q), vs = velocity ? load_quad(v, q) : Floats4{};
        const Floats4 gs = load_quad(g, q);
        for (int k = 0; k < 4; ++k) step(ps.v, gs.v, vs.v, k);
        store_quad(p, q, ps);
        if (velocity) store_quad(v, q, vs);
      },
      [&](std::int64_t i) { step(p, g, v, i); });
}

template <bool kQuads>
__global__ void adam_kernel(float* p, const float* g, float* m, float* v, AdamStep step,
                            std::int64_t count) {
  for_each_element<kQuads>(
      count,
      [&](std::int64_t q) {
        Floats4 ps = load_quad(p, q), ms = load_quad(m, q), vs = load_quad(v, q);
        const Floats4 gs = load_quad(g, q);
        for (int k = 0; k < 4; ++k) step(ps.v, gs.v, ms.v, vs.v, k);
        store_quad(p, q, ps);
        store_quad(m, q, ms);
        store_quad(v, q, vs);
      },
      [&](std::int64_t i) { step(p, g, m, v, i); });
}

template <bool kQuads>
__global__ void moving_average_kernel(float* state, const float* value, float momentum,
                                      std::int64_t count) {
  for_each_element<kQuads>(
      count,
      [&](std::int64_t q) {
        Floats4 s = load_quad(state, q);
        const Floats4 x = load_quad(value, q);
        for (int k = 0; k < 4; ++k) s.v[k] = moving_average_element(s.v[k], x.v[k], momentum);
        store_quad(state, q, s);
      },
      [&](std::int64_t i) { state[i] = moving_average_element(state[i], value[i], momentum); });
}

}  // namespace

void cuda_sgd_update(float* param, const float* grad, float* velocity, const SgdStep& step,
                     std::int64_t count, cudaStream_t stream) {
  const bool quads = aligned_for_quads(param, grad, velocity);
  const LaunchConfig cfg = quads ? quad_launch_config(count) : launch_config(count);
  if (cfg.blocks == 0) return;
  (quads ? sgd_kernel<true> : sgd_kernel<false>)<<<cfg.blocks, cfg.threads, 0, stream>>>(param, grad, velocity,
                                                                                         step, count);
  cuda_check(cudaGetLastError(), "sgd_kernel<<<blocks, 256, 0, stream>>>", __FILE__, __LINE__);
}

void cuda_adam_update(float* param, const float* grad, float* m, float* v, const AdamStep& step,
                      std::int64_t count, cudaStream_t stream) {
  const bool quads = aligned_for_quads(param, grad, m, v);
  const LaunchConfig cfg = quads ? quad_launch_config(count) : launch_config(count);
  if (cfg.blocks == 0) return;
  (quads ? adam_kernel<true> : adam_kernel<false>)<<<cfg.blocks, cfg.threads, 0, stream>>>(param, grad, m, v, step,
                                                                                           count);
  cuda_check(cudaGetLastError(), "adam_kernel<<<blocks, 256, 0, stream>>>", __FILE__, __LINE__);
}

void cuda_moving_average(float* state, const float* value, float momentum, std::int64_t count,
                         cudaStream_t stream) {
  const bool quads = aligned_for_quads(state, value);
  const LaunchConfig cfg = quads ? quad_launch_config(count) : launch_config(count);
  if (cfg.blocks == 0) return;
  (quads ? moving_average_kernel<true> : moving_average_kernel<false>)<<<cfg.blocks, cfg.threads, 0, stream>>>(
      state, value, momentum, count);
  cuda_check(cudaGetLastError(), "moving_average_kernel<<<blocks, 256, 0, stream>>>", __FILE__,
             __LINE__);
}

}  // namespace tessera
