// Layer normalisation over the last axis on oneDNN's layer_normalization
// primitives, with gamma and beta as separate scale and shift tensors.
//
// oneDNN saves the mean and the VARIANCE; the Backend interface saves the mean
// and rstd = 1 / sqrt(variance + epsilon). The forward lets oneDNN write the
// variance into the rstd tensor and converts it there (no scratch memory). The
// backward has no epsilon argument, so it hands oneDNN the variance
// 1 / rstd^2 (= variance + epsilon) with an epsilon of 0, from which oneDNN
// recovers exactly rstd; that variance lives in a scratch buffer cached per
// shape.
#include <bit>
#include <cmath>
#include <cstdint>

#include "backends/cpu/cpu_backend.hpp"

namespace tessera {
namespace {

using dnnl::memory;

dnnl::normalization_flags scale_and_shift() {
  return dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
}

// x viewed as [rows, features].
Shape rows_view(const Tensor& x) {
  std::int64_t features = x.shape()[x.rank() - 1];
  return Shape{x.numel() / features, features};
}

}  // namespace

void CpuBackend::run_layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                const Tensor& y, const Tensor& mean, const Tensor& rstd,
                                float epsilon) {
  if (x.numel() == 0) return;
  if (y.dtype() != x.dtype())  // bf16 y
    return rounded_from_f32("layer_norm f32 y", y,
                            [&](const Tensor& wide) { run_layer_norm(x, gamma, beta, wide, mean, rstd, epsilon); });
  Shape view = rows_view(x);
  auto x_md = plain_desc(view, x.dtype());
  auto stat_md = plain_desc(Shape{view[0]}, DType::f32);
  auto scale_md = plain_desc(gamma.shape(), gamma.dtype());
  std::string key = "layer_norm " + std::string(dtype_name(x.dtype())) + view.str() + " eps " +
                    std::to_string(std::bit_cast<std::uint32_t>(epsilon));  // exact, unlike %f
  const Primitive& p = primitive(key, [&] {
    dnnl::layer_normalization_forward::desc desc(dnnl::prop_kind::forward_training, x_md, stat_md,
                                                 epsilon, scale_and_shift());
    dnnl::layer_normalization_forward::primitive_desc pd(desc, default_attr(), engine());
    return Primitive{dnnl::layer_normalization_forward(pd), pd};
  });
  execute(p, {{DNNL_ARG_SRC, memory(x_md, x)},
              {DNNL_ARG_SCALE, memory(scale_md, gamma)},
              {DNNL_ARG_SHIFT, memory(scale_md, beta)},
              {DNNL_ARG_DST, memory(x_md, y)},
              {DNNL_ARG_MEAN, memory(stat_md, mean)},
              {DNNL_ARG_VARIANCE, memory(stat_md, rstd)}});
  float* r = rstd.data<float>();
  for (std::int64_t i = 0; i < view[0]; ++i) r[i] = 1.0f / std::sqrt(r[i] + epsilon);
}

void CpuBackend::run_layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                         const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                                         const Tensor& dgamma, const Tensor& dbeta) {
  if (x.numel() == 0) {
    // No rows: the parameter gradients are sums over nothing.
    run_fill(dgamma, 0.0);
    run_fill(dbeta, 0.0);
    return;
  }
  Shape view = rows_view(x);
  auto x_md = plain_desc(view, x.dtype());
  auto stat_md = plain_desc(Shape{view[0]}, DType::f32);
  auto scale_md = plain_desc(gamma.shape(), gamma.dtype());
  std::string key = "layer_norm_backward " + std::string(dtype_name(x.dtype())) + view.str();
  const Primitive& p = primitive(key, [&] {
    dnnl::layer_normalization_forward::desc fwd_desc(dnnl::prop_kind::forward_training, x_md,
                                                     stat_md, 0.0f, scale_and_shift());
    dnnl::layer_normalization_forward::primitive_desc hint(fwd_desc, default_attr(), engine());
    dnnl::layer_normalization_backward::desc desc(dnnl::prop_kind::backward, x_md, x_md, stat_md,
                                                  0.0f, scale_and_shift());
    dnnl::layer_normalization_backward::primitive_desc pd(desc, default_attr(), engine(), hint);
    return Primitive{dnnl::layer_normalization_backward(pd), pd};
  });
  Buffer& variance = scratch_buffer(key, stat_md.get_size());
  const float* r = rstd.data<float>();
  float* v = static_cast<float*>(variance.data());
  for (std::int64_t i = 0; i < view[0]; ++i) v[i] = 1.0f / (r[i] * r[i]);
  execute(p, {{DNNL_ARG_SRC, memory(x_md, x)},
              {DNNL_ARG_MEAN, memory(stat_md, mean)},
              {DNNL_ARG_VARIANCE, memory(stat_md, v)},
              {DNNL_ARG_DIFF_DST, memory(x_md, dy)},
              {DNNL_ARG_SCALE, memory(scale_md, gamma)},
              // oneDNN insists on a shift operand with use_shift although the
              // backward formulas never read beta; gamma stands in for it.
              {DNNL_ARG_SHIFT, memory(scale_md, gamma)},
              {DNNL_ARG_DIFF_SRC, memory(x_md, dx)},
              {DNNL_ARG_DIFF_SCALE, memory(scale_md, dgamma)},
              {DNNL_ARG_DIFF_SHIFT, memory(scale_md, dbeta)}});
}

}  // namespace tessera
