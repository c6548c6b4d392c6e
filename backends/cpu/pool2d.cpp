// Max and average 2-D pooling on oneDNN's pooling primitives, channels-last;
// f32 max pooling's gradient in a loop of its own.
//
// oneDNN's max-pooling backward routes gradients through a workspace that the
// forward pass (in training mode) records. The Backend interface keeps nothing
// alive between forward and backward, so that path runs the forward again
// into a pooled output and workspace of its own, cached per shape like the
// primitives, and then the backward primitive: three passes over x-sized
// memory. For f32 the loop below finds each window's arg-max and routes dy in
// one pass, and takes a ReLU before the pool in the same pass (relu_before).
// Average pooling excludes the padding from the divisor (Keras' behaviour)
// and needs no workspace.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "backends/cpu/parallel_for.hpp"
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

// One window's share of max pooling's dx over `width` channels: the window's
// max first (from -inf, so a NaN is passed over as oneDNN's forward passes it),
// then each position in order takes what is left of dy where it equals the
// max, so the first maximum gets it. Branch-free over the channels. Where the
// windows tile x (`tiled`), each position is written once, not added to.
inline void route_window(const float* x, const float* dy, float* dx, std::int64_t y0, std::int64_t y1,
                         std::int64_t x0, std::int64_t x1, std::int64_t w, std::int64_t c,
                         bool relu_before, bool tiled, std::int64_t width) {
  for (std::int64_t k = 0; k < width; ++k) {
    float best = -std::numeric_limits<float>::infinity();
    for (std::int64_t iy = y0; iy < y1; ++iy)
      for (std::int64_t ix = x0; ix < x1; ++ix) best = std::max(best, x[(iy * w + ix) * c + k]);
    float left = !relu_before || best > 0.0f ? dy[k] : 0.0f;
    for (std::int64_t iy = y0; iy < y1; ++iy)
      for (std::int64_t ix = x0; ix < x1; ++ix) {
        const std::int64_t at = (iy * w + ix) * c + k;
        const bool hit = x[at] == best;
        dx[at] = (tiled ? 0.0f : dx[at]) + (hit ? left : 0.0f);
        left = hit ? 0.0f : left;
      }
  }
}

// The same over a vector of channels at once, in GCC's vector types of
// kBytes: written as loops, the lanes were unrolled into branches and ran 8x
// slower. Each ISA gets its own register width: 16 lanes (64 bytes) compiled
// for AVX2 were lowered lane by lane through the stack, and the whole pass
// took 36 ms of the CNN's training step on a Zen 1, against 3.2 ms in 8
// lanes. Unaligned, and allowed to alias the float tensors it views
// (as __m512_u is declared: Clang ignores `aligned` in the `using` form and
// assumed the vector's size).
template <int kBytes>
struct FloatLanes {
  typedef float type __attribute__((vector_size(kBytes), aligned(4), may_alias));
};

template <int kBytes, bool kTiled>
[[gnu::always_inline]] inline void route_window_lanes(const float* x, const float* dy, float* dx, std::int64_t y0,
                                                      std::int64_t y1, std::int64_t x0, std::int64_t x1,
                                                      std::int64_t w, std::int64_t c, bool relu_before) {
  using Lanes = typename FloatLanes<kBytes>::type;
  static_assert(alignof(Lanes) == alignof(float));
  const Lanes zero{};
  Lanes best = zero - std::numeric_limits<float>::infinity();
  for (std::int64_t iy = y0; iy < y1; ++iy)
    for (std::int64_t ix = x0; ix < x1; ++ix) {
      const Lanes v = *reinterpret_cast<const Lanes*>(x + (iy * w + ix) * c);
      best = v > best ? v : best;
    }
  Lanes left = *reinterpret_cast<const Lanes*>(dy);
  if (relu_before) left = best > zero ? left : zero;
  for (std::int64_t iy = y0; iy < y1; ++iy)
    for (std::int64_t ix = x0; ix < x1; ++ix) {
      const std::int64_t at = (iy * w + ix) * c;
      const auto hit = *reinterpret_cast<const Lanes*>(x + at) == best;
      Lanes& out = *reinterpret_cast<Lanes*>(dx + at);
      out = kTiled ? (hit ? left : zero) : out + (hit ? left : zero);
      left = hit ? zero : left;
    }
}

// Threads split work in blocks of this many channels (below).
constexpr std::int64_t kBlock = 16;

// Whether the windows tile x: stride = window, no padding, no rows or columns
// left over. Each position of x is then in exactly one window.
bool windows_tile(std::int64_t h, std::int64_t w, std::int64_t oh, std::int64_t ow, const Pool2dArgs& a) {
  return a.stride_h == a.window_h && a.stride_w == a.window_w && a.pad_top == 0 && a.pad_bottom == 0 &&
         a.pad_left == 0 && a.pad_right == 0 && oh * a.stride_h == h && ow * a.stride_w == w;
}

// dx of one image's channels [c_begin, c_end) of f32 max pooling,
// channels-last x[H, W, C]: each window's dy goes to its first maximum
// (windows that overlap add up), times x > 0 under relu_before; kBytes / 4
// channels at a time, the rest one by one. Where the windows tile x (kTiled)
// the routing writes every position of dx, and no pass zeroes it first (the
// reference CNN's pooling gradient, operands cold, one thread of a Zen 5:
// 1.34 ms with that pass, 1.00 ms without).
template <int kBytes, bool kTiled>
[[gnu::always_inline]] inline void max_pool_backward_channels(const float* x, const float* dy, float* dx,
                                                              std::int64_t h, std::int64_t w, std::int64_t c,
                                                              std::int64_t oh, std::int64_t ow, const Pool2dArgs& a,
                                                              std::int64_t c_begin, std::int64_t c_end) {
  constexpr std::int64_t lanes = kBytes / static_cast<std::int64_t>(sizeof(float));
  static_assert(kBlock % lanes == 0, "a thread's block of channels is whole vectors");
  if (!kTiled && c_begin == 0 && c_end == c)
    std::memset(dx, 0, static_cast<std::size_t>(h * w * c) * sizeof(float));
  else if (!kTiled)
    for (std::int64_t at = 0; at < h * w; ++at)
      std::fill(dx + at * c + c_begin, dx + at * c + c_end, 0.0f);
  for (std::int64_t oy = 0; oy < oh; ++oy)
    for (std::int64_t ox = 0; ox < ow; ++ox) {
      const std::int64_t y0 = std::max<std::int64_t>(oy * a.stride_h - a.pad_top, 0);
      const std::int64_t y1 = std::min<std::int64_t>(oy * a.stride_h - a.pad_top + a.window_h, h);
      const std::int64_t x0 = std::max<std::int64_t>(ox * a.stride_w - a.pad_left, 0);
      const std::int64_t x1 = std::min<std::int64_t>(ox * a.stride_w - a.pad_left + a.window_w, w);
      if (y0 >= y1 || x0 >= x1) continue;  // a window wholly in the padding
      const float* d = dy + (oy * ow + ox) * c;
      std::int64_t c0 = c_begin;
      for (; c0 + lanes <= c_end; c0 += lanes)
        route_window_lanes<kBytes, kTiled>(x + c0, d + c0, dx + c0, y0, y1, x0, x1, w, c, a.relu_before);
      if (c0 < c_end)
        route_window(x + c0, d + c0, dx + c0, y0, y1, x0, x1, w, c, a.relu_before, kTiled, c_end - c0);
    }
}

// One body compiled three times, each in its ISA's widest registers, picked
// once by the CPU the process runs on.
using ChannelsKernel = void (*)(const float*, const float*, float*, std::int64_t, std::int64_t, std::int64_t,
                                std::int64_t, std::int64_t, const Pool2dArgs&, std::int64_t, std::int64_t);
[[gnu::target("avx512f")]] void max_pool_backward_channels_avx512(
    const float* x, const float* dy, float* dx, std::int64_t h, std::int64_t w, std::int64_t c, std::int64_t oh,
    std::int64_t ow, const Pool2dArgs& a, std::int64_t c_begin, std::int64_t c_end) {
  if (windows_tile(h, w, oh, ow, a))
    return max_pool_backward_channels<64, true>(x, dy, dx, h, w, c, oh, ow, a, c_begin, c_end);
  max_pool_backward_channels<64, false>(x, dy, dx, h, w, c, oh, ow, a, c_begin, c_end);
}
[[gnu::target("avx2")]] void max_pool_backward_channels_avx2(
    const float* x, const float* dy, float* dx, std::int64_t h, std::int64_t w, std::int64_t c, std::int64_t oh,
    std::int64_t ow, const Pool2dArgs& a, std::int64_t c_begin, std::int64_t c_end) {
  if (windows_tile(h, w, oh, ow, a))
    return max_pool_backward_channels<32, true>(x, dy, dx, h, w, c, oh, ow, a, c_begin, c_end);
  max_pool_backward_channels<32, false>(x, dy, dx, h, w, c, oh, ow, a, c_begin, c_end);
}
void max_pool_backward_channels_baseline(const float* x, const float* dy, float* dx, std::int64_t h, std::int64_t w,
                                         std::int64_t c, std::int64_t oh, std::int64_t ow, const Pool2dArgs& a,
                                         std::int64_t c_begin, std::int64_t c_end) {
  if (windows_tile(h, w, oh, ow, a))
    return max_pool_backward_channels<16, true>(x, dy, dx, h, w, c, oh, ow, a, c_begin, c_end);
  max_pool_backward_channels<16, false>(x, dy, dx, h, w, c, oh, ow, a, c_begin, c_end);
}
ChannelsKernel channels_kernel_for_this_cpu() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return max_pool_backward_channels_avx512;
  if (__builtin_cpu_supports("avx2")) return max_pool_backward_channels_avx2;
  return max_pool_backward_channels_baseline;
}

// Images are independent, and so are blocks of 16 channels (each writes its
// own part of dx, overlapping windows included): threads split the images,
// or with fewer images than threads (a batch of one) the images' blocks.
void max_pool_backward(const Tensor& x, const Tensor& dy, const Tensor& dx, const Pool2dArgs& a) {
  const Shape &xs = x.shape(), &ys = dy.shape();
  const std::int64_t c = xs[3], image = xs[1] * xs[2] * c, pooled = ys[1] * ys[2] * c;
  static const ChannelsKernel channels_kernel = channels_kernel_for_this_cpu();
  const std::int64_t blocks = xs[0] >= omp_get_max_threads() ? 1 : (c + kBlock - 1) / kBlock;
  const std::int64_t span = blocks == 1 ? c : kBlock, units = xs[0] * blocks;
  parallel_for(units, x.numel() > 65536, [&](std::int64_t u) {
    const std::int64_t n = u / blocks, c_begin = u % blocks * span;
    channels_kernel(x.data<float>() + n * image, dy.data<float>() + n * pooled,
                    dx.data<float>() + n * image, xs[1], xs[2], c, ys[1], ys[2], a, c_begin,
                    std::min(c, c_begin + span));
  });
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
  if (args.kind == PoolKind::max && x.dtype() == DType::f32) {
    KernelScope scope(threads());
    return max_pool_backward(x, dy, dx, args);
  }
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
  PrimitiveArgs bargs{{DNNL_ARG_DIFF_DST, memory(dy_md, dy)}, {DNNL_ARG_DIFF_SRC, memory(dx_md, dx)}};
  const memory::desc ws_md = fwd.desc.workspace_desc();
  if (ws_md.get_size() > 0) {
    // Max pooling: recompute the forward into cached buffers to get the arg-max.
    Buffer& y_scratch = scratch_buffer("pool2d_backward y " + shapes, dy.nbytes());
    Buffer& ws_scratch = scratch_buffer("pool2d_backward workspace " + shapes, ws_md.get_size());
    const PrimitiveArg ws = memory(ws_md, ws_scratch.data());
    execute(fwd, {{DNNL_ARG_SRC, memory(x_md, x)}, {DNNL_ARG_DST, memory(dy_md, y_scratch.data())}, {DNNL_ARG_WORKSPACE, ws}});
    bargs.add(DNNL_ARG_WORKSPACE, ws);
  }
  execute(bwd, bargs);
}

}  // namespace tessera
