// Max and average 2-D pooling on oneDNN's pooling primitives, channels-last.
//
// oneDNN's max-pooling backward routes gradients through a workspace that the
// forward pass (in training mode) records. The Backend interface keeps nothing
// alive between forward and backward, so the backward call runs the forward
// again into a pooled output and workspace of its own, cached per shape like
// the primitives, and then the backward primitive. Average pooling excludes
// the padding from the divisor (Keras' behaviour) and needs no workspace.
#include "backends/cpu/cpu_backend.hpp"

namespace tessera {
namespace {

using dnnl::memory;

// Logical N, C, H, W descriptor of a channels-last tensor [N, H, W, C].
memory::desc data_desc(const Tensor& t) {
  const Shape& s = t.shape();
  return memory::desc({s[0], s[3], s[1], s[2]}, dnnl_type(t.dtype()), memory::format_tag::nhwc);
}

dnnl::algorithm pool_algorithm(PoolKind kind) {
  return kind == PoolKind::max ? dnnl::algorithm::pooling_max
                               : dnnl::algorithm::pooling_avg_exclude_padding;
}

std::string args_key(const Pool2dArgs& a) {
  return std::string(" ") + std::string(tessera::name(a.kind)) + " k" + std::to_string(a.window_h) +
         "," + std::to_string(a.window_w) + " s" + std::to_string(a.stride_h) + "," +
         std::to_string(a.stride_w) + " p" + std::to_string(a.pad_top) + "," +
         std::to_string(a.pad_bottom) + "," + std::to_string(a.pad_left) + "," +
         std::to_string(a.pad_right);
}

dnnl::pooling_forward::desc forward_desc(dnnl::prop_kind kind, const memory::desc& x_md,
                                         const memory::desc& y_md, const Pool2dArgs& a) {
  return {kind,
          pool_algorithm(a.kind),
          x_md,
          y_md,
          {a.stride_h, a.stride_w},
          {a.window_h, a.window_w},
          {a.pad_top, a.pad_left},
          {a.pad_bottom, a.pad_right}};
}

}  // namespace

void CpuBackend::run_pool2d_forward(const Tensor& x, const Tensor& y, const Pool2dArgs& args) {
  auto x_md = data_desc(x), y_md = data_desc(y);
  std::string key = "pool2d_forward " + cache_key(x) + cache_key(y) + args_key(args);
  const Primitive& p = primitive(key, [&] {
    // Inference mode: no workspace is written (the backward pass makes its own).
    auto desc = forward_desc(dnnl::prop_kind::forward_inference, x_md, y_md, args);
    dnnl::pooling_forward::primitive_desc pd(desc, default_attr(), engine());
    return Primitive{dnnl::pooling_forward(pd), pd};
  });
  execute(p, {{DNNL_ARG_SRC, memory(x_md, x)}, {DNNL_ARG_DST, memory(y_md, y)}});
}

void CpuBackend::run_pool2d_backward(const Tensor& x, const Tensor& dy, const Tensor& dx,
                                     const Pool2dArgs& args) {
  auto x_md = data_desc(x), dy_md = data_desc(dy), dx_md = data_desc(dx);
  std::string shapes = cache_key(x) + cache_key(dy) + args_key(args);
  // The forward in training mode: the hint of the backward primitive, and for
  // max pooling the producer of the workspace.
  const Primitive& fwd = primitive("pool2d_forward_training " + shapes, [&] {
    auto desc = forward_desc(dnnl::prop_kind::forward_training, x_md, dy_md, args);
    dnnl::pooling_forward::primitive_desc pd(desc, default_attr(), engine());
    return Primitive{dnnl::pooling_forward(pd), pd};
  });
  const Primitive& bwd = primitive("pool2d_backward " + shapes, [&] {
    // Made from the same descriptor as `fwd`, so it picks the same
    // implementation and workspace layout.
    dnnl::pooling_forward::primitive_desc hint(
        forward_desc(dnnl::prop_kind::forward_training, x_md, dy_md, args), default_attr(),
        engine());
    dnnl::pooling_backward::desc desc(pool_algorithm(args.kind), dx_md, dy_md,
                                      {args.stride_h, args.stride_w},
                                      {args.window_h, args.window_w},
                                      {args.pad_top, args.pad_left},
                                      {args.pad_bottom, args.pad_right});
    dnnl::pooling_backward::primitive_desc pd(desc, default_attr(), engine(), hint);
    return Primitive{dnnl::pooling_backward(pd), pd};
  });
  std::unordered_map<int, dnnl::memory> bargs{{DNNL_ARG_DIFF_DST, memory(dy_md, dy)},
                                              {DNNL_ARG_DIFF_SRC, memory(dx_md, dx)}};
  auto ws_md = fwd.desc.workspace_desc();
  if (ws_md.get_size() > 0) {
    // Max pooling: recompute the forward into cached buffers to get the arg-max.
    Buffer& y_scratch = scratch_buffer("pool2d_backward y " + shapes, dy.nbytes());
    Buffer& ws_scratch = scratch_buffer("pool2d_backward workspace " + shapes, ws_md.get_size());
    dnnl::memory ws(ws_md, engine(), ws_scratch.data());
    execute(fwd, {{DNNL_ARG_SRC, memory(x_md, x)},
                  {DNNL_ARG_DST, dnnl::memory(dy_md, engine(), y_scratch.data())},
                  {DNNL_ARG_WORKSPACE, ws}});
    bargs.emplace(DNNL_ARG_WORKSPACE, ws);
  }
  execute(bwd, std::move(bargs));
}

}  // namespace tessera
