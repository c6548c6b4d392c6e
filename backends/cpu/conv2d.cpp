// 2-D convolution and its two gradients on oneDNN's convolution primitives.
//
// Tensors keep Tessera's layouts, channels-last data x[N, H, W, C] and the Keras
// kernel w[KH, KW, C, F]; oneDNN always names dimensions logically (N, C, H, W
// for data, O, I, H, W for weights), so the descriptors give the logical dims
// with the nhwc / hwio format tags. Data stays channels-last; the weights are
// offered to oneDNN in any layout it prefers (`any`), which lets it pick its
// direct AVX-512 kernels over the gemm-based ones (3-4x faster on the CNN's
// second convolution); the small kernel tensor is reordered to and from the
// blocked layout around each call, through a cached per-shape buffer. On
// AVX-512 the forward pass over a few input channels (a first layer's image,
// conv2d_forward_direct.hpp) and the weight gradient
// (conv2d_weights_direct.hpp) are our own; the weight gradient goes through
// sgemm where oneDNN runs its AVX2 kernels (conv2d_weights_gemm.hpp).
//
// A stride-1 convolution's input gradient is a forward convolution: of dy
// over the kernel turned half a circle (w'[i, j] = w[KH-1-i, KW-1-j]) with
// its channel axes swapped, padded by the kernel's extent less one less the
// forward's padding on each side. oneDNN 2.6 has brgemm kernels for the
// forward pass and only its older jit kernel for backward data on AVX-512;
// on the reference CNN's [64, 24, 24, 64] -> [64, 26, 26, 32] (Zen 5,
// 2026-12-07) the forward way took 0.92-0.96 of the time on one thread and
// two, results within 1.1e-6, and 0.81-0.83 with 128 channels each side. It runs
// where its primitive is brgemm-based and the backward-data one is not, for
// the channel counts where it paid (turning_pays).
#include <cstring>
#include <string_view>

#include "backends/cpu/conv2d_forward_direct.hpp"
#include "backends/cpu/conv2d_weights_direct.hpp"
#include "backends/cpu/conv2d_weights_gemm.hpp"
#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/eltwise_algorithm.hpp"

namespace tessera {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

// Logical N, C, H, W descriptor of a channels-last tensor [N, H, W, C].
memory::desc data_desc(const Tensor& t) {
  const Shape& s = t.shape();
  return memory::desc({s[0], s[3], s[1], s[2]}, dnnl_type(t.dtype()), tag::nhwc);
}

// Logical O, I, H, W descriptor of a Keras kernel [KH, KW, I, O].
memory::desc weights_desc(const Tensor& t) {
  const Shape& s = t.shape();
  return memory::desc({s[3], s[2], s[0], s[1]}, dnnl_type(t.dtype()), tag::hwio);
}

// The same logical weights in whatever layout the primitive chooses.
memory::desc any_weights(const memory::desc& w) { return memory::desc(w.dims(), w.data_type(), tag::any); }

memory::desc bias_desc(const Tensor& t) { return plain_desc(t.shape(), t.dtype()); }

std::string args_key(const Conv2dArgs& a) {
  return " s" + std::to_string(a.stride_h) + "," + std::to_string(a.stride_w) + " p" +
         std::to_string(a.pad_top) + "," + std::to_string(a.pad_bottom) + "," +
         std::to_string(a.pad_left) + "," + std::to_string(a.pad_right) + " " + std::string(tessera::name(a.activation));
}

// Forward descriptor; also the hint the backward primitives are made against.
dnnl::convolution_forward::desc forward_desc(const memory::desc& x_md, const memory::desc& w_md,
                                             const memory::desc* bias_md,
                                             const memory::desc& y_md, const Conv2dArgs& a) {
  memory::dims strides{a.stride_h, a.stride_w};
  memory::dims pad_l{a.pad_top, a.pad_left}, pad_r{a.pad_bottom, a.pad_right};
  auto kind = dnnl::prop_kind::forward_training;
  auto alg = dnnl::algorithm::convolution_direct;
  if (bias_md != nullptr)
    return {kind, alg, x_md, w_md, *bias_md, y_md, strides, pad_l, pad_r};
  return {kind, alg, x_md, w_md, y_md, strides, pad_l, pad_r};
}

// The padding of the forward convolution that gives a stride-1
// convolution's input gradient: the kernel's extent less one less the
// convolution's own, on each side (negative: no such convolution).
Conv2dArgs turned_padding(const Shape& w, const Conv2dArgs& a) {
  const int kh = static_cast<int>(w[0]), kw = static_cast<int>(w[1]);
  return {.pad_top = kh - 1 - a.pad_top, .pad_bottom = kh - 1 - a.pad_bottom, .pad_left = kw - 1 - a.pad_left,
          .pad_right = kw - 1 - a.pad_right};
}

// Where the turned kernel's forward pass beat oneDNN 2.6's jit backward-data
// kernel (Zen 5, 2026-12-07, one and two threads): 3x3 kernels (the only
// size measured), C input and F output channels in whole vectors, C >= 32
// and F >= 64. 32 -> 64: 1.04-1.09x its speed; 64 -> 64: 1.06-1.15; 64 ->
// 128: 1.25-1.26; 128 -> 128: 1.20-1.23; 48 -> 64: 1.06. F of 32 or less
// lost: 32 -> 32 0.94-0.98, 128 -> 32 0.94, 16 -> 32 0.72-0.76, 16 -> 16
// 0.56-0.58; 64 -> 48 1.01-1.04, not worth it.
bool turning_pays(const Shape& w) {
  return w[0] == 3 && w[1] == 3 && w[2] % 16 == 0 && w[3] % 16 == 0 && w[2] >= 32 && w[3] >= 64;
}

std::string input_gradient_key(const Tensor& dy, const Tensor& w, const Tensor& dx, const Conv2dArgs& args) {
  return "conv2d_backward_data " + cache_key(dy) + cache_key(w) + cache_key(dx) + args_key(args);
}

// Whether oneDNN runs a primitive on its brgemm-based kernels.
bool is_brg(const CpuBackend::Primitive& p) { return std::string_view(p.desc.impl_info_str()).starts_with("brg"); }

}  // namespace

void CpuBackend::run_conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* bias,
                                    const Tensor& y, const Conv2dArgs& args) {
  if (conv_forward_direct(x.dtype(), x.shape(), w.shape(), args.activation)) {
    const auto floats = conv_forward_direct_scratch(x.shape(), args);
    Buffer& scratch = scratch_buffer("conv2d_forward direct", floats * sizeof(float));
    KernelScope scope(threads());
    return conv2d_forward_direct(x, w, bias, y, args, static_cast<float*>(scratch.data()), threads());
  }
  auto x_md = data_desc(x), w_md = weights_desc(w), y_md = data_desc(y);
  auto b_md = bias ? bias_desc(*bias) : memory::desc();
  std::string key = "conv2d_forward " + cache_key(x) + cache_key(w) +
                    (bias ? cache_key(*bias) : "-") + cache_key(y) + args_key(args);
  const Primitive& p = primitive(key, [&] {
    auto desc = forward_desc(x_md, any_weights(w_md), bias ? &b_md : nullptr, y_md, args);
    auto attr = default_attr();
    if (args.activation != Activation::none) {
      dnnl::post_ops ops;
      auto alg = eltwise_algorithm(activation_unary(args.activation));
      ops.append_eltwise(1.0f, alg->algorithm, alg->alpha, alg->beta);
      attr.set_post_ops(ops);
    }
    dnnl::convolution_forward::primitive_desc pd(desc, attr, engine());
    return Primitive{dnnl::convolution_forward(pd), pd};
  });
  const memory::desc wanted = p.desc.weights_desc();
  PrimitiveArgs margs{{DNNL_ARG_SRC, memory(x_md, x)},
                   {DNNL_ARG_WEIGHTS, weights_in(key, wanted, w_md, w)},
                   {DNNL_ARG_DST, memory(y_md, y)}};
  if (bias) margs.add(DNNL_ARG_BIAS, memory(b_md, *bias));
  execute(p, margs);
}

// The input gradient's primitive for these operands: oneDNN's backward-data
// primitive, or for a stride-1 convolution the forward one that computes the
// same (see the top of this file).
const CpuBackend::Primitive& CpuBackend::conv2d_input_gradient(const std::string& key, const Tensor& dy,
                                                               const Tensor& w, const Tensor& dx,
                                                               const Conv2dArgs& args, bool* as_forward) {
  auto dx_md = data_desc(dx), w_md = weights_desc(w), dy_md = data_desc(dy);
  const Primitive& p = primitive(key, [&] {
    dnnl::convolution_forward::primitive_desc hint(
        forward_desc(dx_md, any_weights(w_md), nullptr, dy_md, args), default_attr(), engine());
    dnnl::convolution_backward_data::desc desc(
        dnnl::algorithm::convolution_direct, dx_md, any_weights(w_md), dy_md, {args.stride_h, args.stride_w},
        {args.pad_top, args.pad_left}, {args.pad_bottom, args.pad_right});
    dnnl::convolution_backward_data::primitive_desc pd(desc, default_attr(), engine(), hint);
    return Primitive{dnnl::convolution_backward_data(pd), pd};
  });
  *as_forward = false;
  const Shape& ws = w.shape();
  const Conv2dArgs turned = turned_padding(ws, args);
  if (dy.dtype() != DType::f32 || args.stride_h != 1 || args.stride_w != 1 || turned.pad_top < 0 ||
      turned.pad_bottom < 0 || turned.pad_left < 0 || turned.pad_right < 0 || !turning_pays(ws) || is_brg(p))
    return p;
  const Primitive& forward = primitive(key + " as forward", [&] {
    const memory::desc turned_any({ws[2], ws[3], ws[0], ws[1]}, memory::data_type::f32, tag::any);
    dnnl::convolution_forward::primitive_desc pd(forward_desc(dy_md, turned_any, nullptr, dx_md, turned),
                                                 default_attr(), engine());
    return Primitive{dnnl::convolution_forward(pd), pd};
  });
  *as_forward = is_brg(forward);
  return *as_forward ? forward : p;
}

std::string CpuBackend::conv2d_backward_data_kernel(const Tensor& dy, const Tensor& w, const Tensor& dx,
                                                    const Conv2dArgs& args) {
  bool as_forward = false;
  const Primitive& p = conv2d_input_gradient(input_gradient_key(dy, w, dx, args), dy, w, dx, args, &as_forward);
  return std::string(p.desc.impl_info_str()) + (as_forward ? " (forward, kernel turned)" : "");
}

void CpuBackend::run_conv2d_backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx,
                                          const Conv2dArgs& args) {
  auto dx_md = data_desc(dx), w_md = weights_desc(w), dy_md = data_desc(dy);
  bool as_forward = false;
  std::string key = input_gradient_key(dy, w, dx, args);
  const Primitive& p = conv2d_input_gradient(key, dy, w, dx, args, &as_forward);
  if (as_forward) key += " as forward";
  const memory::desc wanted = p.desc.weights_desc();
  if (!as_forward) {
    execute(p, {{DNNL_ARG_DIFF_DST, memory(dy_md, dy)},
                {DNNL_ARG_WEIGHTS, weights_in(key, wanted, w_md, w)},
                {DNNL_ARG_DIFF_SRC, memory(dx_md, dx)}});
    return;
  }
  // The kernel turned: w'[i, j] = w[KH-1-i, KW-1-j], each [C, F] slab as it
  // is, which oneDNN then reads with C as the output channels.
  const Shape& ws = w.shape();
  const std::int64_t kh = ws[0], kw = ws[1], c = ws[2], f = ws[3], slab = c * f;
  const Tensor turned = scratch_tensor(key + " turned", ws, DType::f32);
  for (std::int64_t i = 0; i < kh; ++i)
    for (std::int64_t j = 0; j < kw; ++j)
      std::memcpy(turned.data<float>() + (i * kw + j) * slab, w.data<float>() + ((kh - 1 - i) * kw + kw - 1 - j) * slab,
                  static_cast<std::size_t>(slab) * sizeof(float));
  const memory::desc turned_md({c, f, kh, kw}, memory::data_type::f32, memory::dims{f, 1, kw * slab, slab});
  execute(p, {{DNNL_ARG_SRC, memory(dy_md, dy)},
              {DNNL_ARG_WEIGHTS, weights_in(key, wanted, turned_md, turned)},
              {DNNL_ARG_DST, memory(dx_md, dx)}});
}

// Where the weight gradient runs through a kernel of ours, which sums db from
// dy while dy is in cache; oneDNN 2.6's diff_bias made the reference CNN's
// step slower than a separate sum (fusion.hpp).
bool CpuBackend::computes_conv_bias_gradient(DType dtype, const Shape& x, const Shape& dy, const Shape& dw) const {
  return conv_weights_direct(dtype, dw) || conv_weights_through_gemm(dtype, x, dy, dw, threads());
}

// Our own kernel masks dy as it reads it (conv2d_weights_direct.hpp).
bool CpuBackend::takes_conv_weight_gradient_through_relu(DType dtype, const Shape& dw) const {
  return conv_weights_direct(dtype, dw);
}

void CpuBackend::run_conv2d_backward_weights_through_relu(const Tensor& x, const Tensor& y, const Tensor& dy,
                                                          const Tensor& dw, const Tensor* db, const Conv2dArgs& args) {
  const auto floats = conv_weights_direct_scratch(x.shape(), dy.shape(), dw.shape(), args, threads(), true);
  Buffer& scratch = scratch_buffer("conv2d_backward_weights direct", floats * sizeof(float));
  KernelScope scope(threads());
  conv2d_backward_weights_direct(x, dy, dw, db, args, static_cast<float*>(scratch.data()), threads(), &y);
}

void CpuBackend::run_conv2d_backward_weights(const Tensor& x, const Tensor& dy, const Tensor& dw,
                                             const Tensor* db, const Conv2dArgs& args) {
  if (conv_weights_direct(x.dtype(), dw.shape())) {
    const auto floats = conv_weights_direct_scratch(x.shape(), dy.shape(), dw.shape(), args, threads());
    Buffer& scratch = scratch_buffer("conv2d_backward_weights direct", floats * sizeof(float));
    KernelScope scope(threads());
    return conv2d_backward_weights_direct(x, dy, dw, db, args, static_cast<float*>(scratch.data()), threads());
  }
  if (conv_weights_through_gemm(x.dtype(), x.shape(), dy.shape(), dw.shape(), threads())) {
    const auto floats = conv_weights_gemm_scratch(x.shape(), dy.shape(), dw.shape(), threads());
    Buffer& scratch = scratch_buffer("conv2d_backward_weights gemm", floats * sizeof(float));
    KernelScope scope(threads());
    return conv2d_backward_weights_gemm(x, dy, dw, db, args, static_cast<float*>(scratch.data()), threads());
  }
  auto x_md = data_desc(x), dw_md = weights_desc(dw), dy_md = data_desc(dy);
  auto db_md = db ? bias_desc(*db) : memory::desc();
  std::string key = "conv2d_backward_weights " + cache_key(x) + cache_key(dy) + cache_key(dw) +
                    (db ? cache_key(*db) : "-") + args_key(args);
  const Primitive& p = primitive(key, [&] {
    dnnl::convolution_forward::primitive_desc hint(
        forward_desc(x_md, any_weights(dw_md), db ? &db_md : nullptr, dy_md, args), default_attr(), engine());
    memory::dims strides{args.stride_h, args.stride_w};
    memory::dims pad_l{args.pad_top, args.pad_left}, pad_r{args.pad_bottom, args.pad_right};
    auto alg = dnnl::algorithm::convolution_direct;
    auto dw_any = any_weights(dw_md);
    auto desc = db ? dnnl::convolution_backward_weights::desc(alg, x_md, dw_any, db_md, dy_md,
                                                              strides, pad_l, pad_r)
                   : dnnl::convolution_backward_weights::desc(alg, x_md, dw_any, dy_md, strides,
                                                              pad_l, pad_r);
    dnnl::convolution_backward_weights::primitive_desc pd(desc, default_attr(), engine(), hint);
    return Primitive{dnnl::convolution_backward_weights(pd), pd};
  });
  memory::desc blocked = p.desc.diff_weights_desc();
  bool reorder_out = blocked != dw_md;
  const PrimitiveArg dw_mem =
      reorder_out ? memory(blocked, scratch_buffer(key + " weights", blocked.get_size()).data()) : memory(dw_md, dw);
  PrimitiveArgs margs{{DNNL_ARG_SRC, memory(x_md, x)}, {DNNL_ARG_DIFF_DST, memory(dy_md, dy)}, {DNNL_ARG_DIFF_WEIGHTS, dw_mem}};
  if (db) margs.add(DNNL_ARG_DIFF_BIAS, memory(db_md, *db));
  execute(p, margs);
  if (reorder_out) reorder(key + " weights out", dw_mem, memory(dw_md, dw));
}

}  // namespace tessera
