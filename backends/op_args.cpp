#include "backends/op_args.hpp"

#include <algorithm>
#include <string>

#include "engine/core/error.hpp"

namespace tessera {
namespace {

[[noreturn]] void fail(std::string_view op, const std::string& what) {
  throw ShapeError(std::string(op) + ": " + what);
}

// Window positions along an axis; 0 when the window is larger than the padded
// input (the division truncates toward zero, so it alone would give 1).
std::int64_t window_output(std::int64_t in, int window, int stride, int pad_before, int pad_after) {
  std::int64_t padded = in + pad_before + pad_after;
  return padded < window ? 0 : (padded - window) / stride + 1;
}

// "HxW" of x after padding, for messages.
template <typename Args>
std::string padded_size(const Shape& x, const Args& args) {
  return std::to_string(x[1] + args.pad_top + args.pad_bottom) + "x" +
         std::to_string(x[2] + args.pad_left + args.pad_right);
}

}  // namespace

Shape matmul_output_shape(const Shape& a, const Shape& b, const MatmulArgs& args) {
  if (a.rank() < 2 || b.rank() < 2)
    fail("matmul", "operands need rank >= 2, got a" + a.str() + " and b" + b.str());
  std::int64_t m = args.transpose_a ? a[a.rank() - 1] : a[a.rank() - 2];
  std::int64_t ka = args.transpose_a ? a[a.rank() - 2] : a[a.rank() - 1];
  std::int64_t kb = args.transpose_b ? b[b.rank() - 1] : b[b.rank() - 2];
  std::int64_t n = args.transpose_b ? b[b.rank() - 2] : b[b.rank() - 1];
  if (ka != kb)
    fail("matmul", "contracting dimensions differ: a" + a.str() + (args.transpose_a ? "ᵀ" : "") +
                       " has K=" + std::to_string(ka) + ", b" + b.str() +
                       (args.transpose_b ? "ᵀ" : "") + " has K=" + std::to_string(kb));
  Shape batch_a(std::vector<std::int64_t>(a.dims().begin(), a.dims().end() - 2));
  Shape batch_b(std::vector<std::int64_t>(b.dims().begin(), b.dims().end() - 2));
  auto batch = broadcast_shapes(batch_a, batch_b);
  if (!batch)
    fail("matmul", "batch dimensions of a" + a.str() + " and b" + b.str() + " do not broadcast");
  auto dims = batch->dims();
  dims.push_back(m);
  dims.push_back(n);
  return Shape(std::move(dims));
}

Shape attention_rows_shape(std::string_view op, const Shape& q, const Shape& k, const Shape& v,
                           const AttentionArgs& args) {
  if (args.tokens_first && (q.rank() != 4 || k.rank() != 4))
    fail(op, "q" + q.str() + " and k" + k.str() + " are said to be [B, T, H, K] (tokens first) but are not of rank 4");
  auto heads_first = [&](const Shape& s) { return args.tokens_first ? Shape{s[0], s[2], s[1], s[3]} : s; };
  const Shape qs = heads_first(q), ks = heads_first(k);
  const int rank = qs.rank();
  bool leading_equal = rank >= 2 && ks.rank() == rank;
  for (int i = 0; leading_equal && i < rank - 2; ++i) leading_equal = qs[i] == ks[i];
  if (!leading_equal || qs[rank - 1] != ks[rank - 1] || (args.causal && qs[rank - 2] > ks[rank - 2]))
    fail(op, "q" + q.str() + " must be " +
                 (args.tokens_first ? "[B, Tq, H, K] and k [B, Tk, H, K]" : "[..., Tq, K] and k [..., Tk, K]") +
                 " with the same other axes" + (args.causal ? " and Tq <= Tk (causal)" : "") + ", got k" + k.str());
  if (v != k) fail(op, "v" + v.str() + " must have k's shape " + k.str());
  return Shape(std::vector<std::int64_t>(qs.dims().begin(), qs.dims().end() - 1));
}

Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dArgs& args) {
  if (x.rank() != 4 || w.rank() != 4)
    fail("conv2d", "expects x[N, H, W, C] and w[KH, KW, C, F], got x" + x.str() + " and w" + w.str());
  if (x[3] != w[2])
    fail("conv2d", "input channels differ: x" + x.str() + " has C=" + std::to_string(x[3]) +
                       ", w" + w.str() + " has C=" + std::to_string(w[2]));
  if (args.stride_h < 1 || args.stride_w < 1) fail("conv2d", "strides must be >= 1");
  auto oh = window_output(x[1], static_cast<int>(w[0]), args.stride_h, args.pad_top, args.pad_bottom);
  auto ow = window_output(x[2], static_cast<int>(w[1]), args.stride_w, args.pad_left, args.pad_right);
  if (oh < 1 || ow < 1)
    fail("conv2d", "kernel " + std::to_string(w[0]) + "x" + std::to_string(w[1]) + " (w" + w.str() +
                       ") is larger than the padded input x" + x.str() + ", " + padded_size(x, args) + " after padding");
  return Shape{x[0], oh, ow, w[3]};
}

Shape pool2d_output_shape(const Shape& x, const Pool2dArgs& args) {
  std::string op = std::string(name(args.kind)) + "_pool2d";
  if (x.rank() != 4) fail(op, "expects x[N, H, W, C], got x" + x.str());
  if (args.window_h < 1 || args.window_w < 1 || args.stride_h < 1 || args.stride_w < 1)
    fail(op, "window and strides must be >= 1");
  auto oh = window_output(x[1], args.window_h, args.stride_h, args.pad_top, args.pad_bottom);
  auto ow = window_output(x[2], args.window_w, args.stride_w, args.pad_left, args.pad_right);
  if (oh < 1 || ow < 1)
    fail(op, "window " + std::to_string(args.window_h) + "x" + std::to_string(args.window_w) +
                 " is larger than the padded input x" + x.str() + ", " + padded_size(x, args) + " after padding");
  // A window wholly in the padding has nothing to pool (Keras' same padding never makes one).
  if (std::max(args.pad_top, args.pad_bottom) >= args.window_h || std::max(args.pad_left, args.pad_right) >= args.window_w)
    fail(op, "padding " + std::to_string(args.pad_top) + "," + std::to_string(args.pad_bottom) + "," +
                 std::to_string(args.pad_left) + "," + std::to_string(args.pad_right) +
                 " (top, bottom, left, right) must be smaller than the window " + std::to_string(args.window_h) + "x" +
                 std::to_string(args.window_w));
  return Shape{x[0], oh, ow, x[3]};
}

void same_padding(std::int64_t input, int window, int stride, int& pad_before, int& pad_after) {
  std::int64_t out = (input + stride - 1) / stride;
  std::int64_t total = std::max<std::int64_t>(0, (out - 1) * stride + window - input);
  pad_before = static_cast<int>(total / 2);
  pad_after = static_cast<int>(total - total / 2);
}

Shape reduce_output_shape(const Shape& x, const std::vector<int>& axes, std::string_view op) {
  auto dims = x.dims();
  std::vector<bool> seen(dims.size(), false);
  for (int axis : axes) {
    int a = axis < 0 ? axis + x.rank() : axis;
    if (a < 0 || a >= x.rank())
      fail(op, "axis " + std::to_string(axis) + " is out of range for x" + x.str());
    if (seen[a]) fail(op, "axis " + std::to_string(axis) + " is listed twice");
    seen[a] = true;
    dims[a] = 1;
  }
  return Shape(std::move(dims));
}

Shape binary_output_shape(const Shape& a, const Shape& b, std::string_view op) {
  auto out = broadcast_shapes(a, b);
  if (!out) fail(op, "shapes a" + a.str() + " and b" + b.str() + " do not broadcast");
  return *out;
}

Shape embedding_output_shape(const Shape& table, const Shape& ids) {
  if (table.rank() != 2) fail("embedding", "table must be [vocab, dim], got " + table.str());
  auto dims = ids.dims();
  dims.push_back(table[1]);
  return Shape(std::move(dims));
}

Shape transpose_output_shape(const Shape& x, const std::vector<int>& perm) {
  if (static_cast<int>(perm.size()) != x.rank())
    fail("transpose", "permutation of " + std::to_string(perm.size()) + " axes for x" + x.str());
  std::vector<bool> seen(perm.size(), false);
  std::vector<std::int64_t> dims(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) {
    int p = perm[i];
    if (p < 0 || p >= x.rank() || seen[p])
      fail("transpose", "permutation is not a permutation of 0.." + std::to_string(x.rank() - 1));
    seen[p] = true;
    dims[i] = x[p];
  }
  return Shape(std::move(dims));
}

}  // namespace tessera
