#include "backends/backend.hpp"

#include <array>
#include <initializer_list>

namespace tessera {
namespace {

// Operand checks shared by every backend. `op` names the kernel in messages.
class Check {
 public:
  // The op's name comes in parts ("unary", "relu", " backward") joined only
  // when a message is built: the checks run on every kernel call.
  Check(const Backend& backend, std::string_view op, std::string_view variant = {},
        std::string_view suffix = {})
      : backend_(backend), op_(op), variant_(variant), suffix_(suffix) {}

  // Each operand is defined and lives on the backend's device.
  const Check& on_device(std::initializer_list<std::pair<const char*, const Tensor*>> operands) const {
    for (auto [label, t] : operands) {
      if (t == nullptr) continue;
      if (!t->defined()) throw Error(prefix() + label + " is an undefined tensor");
      if (!shares_memory(t->device(), backend_.device()))
        throw DeviceError(prefix() + label + " is " + t->describe() + " but the kernel runs on " +
                          backend_.device().str() + " (" + list(operands) + ")");
    }
    return *this;
  }

  // Each operand has `dtype`.
  const Check& dtype(DType dtype, std::initializer_list<std::pair<const char*, const Tensor*>> operands) const {
    for (auto [label, t] : operands)
      if (t != nullptr && t->dtype() != dtype)
        throw DTypeError(prefix() + label + " is " + t->describe() + ", expected " +
                         std::string(dtype_name(dtype)) + " (" + list(operands) + ")");
    return *this;
  }

  // Every operand has the dtype of the first.
  const Check& same_dtype(std::initializer_list<std::pair<const char*, const Tensor*>> operands) const {
    return dtype(operands.begin()->second->dtype(), operands);
  }

  // `t` has exactly `expected`.
  const Check& shape(const char* label, const Tensor& t, const Shape& expected) const {
    if (t.shape() != expected)
      throw ShapeError(prefix() + label + " has shape " + t.shape().str() + ", expected " +
                       expected.str());
    return *this;
  }

  std::string label() const {
    std::string s(op_);
    if (!variant_.empty()) s += " " + std::string(variant_);
    return s + std::string(suffix_);
  }

  const Check& floating(const char* label, const Tensor& t) const {
    if (!is_floating(t.dtype()))
      throw DTypeError(prefix() + label + " is " + t.describe() + ", expected a floating dtype");
    return *this;
  }

 private:
  std::string prefix() const { return label() + ": "; }
  static std::string list(std::initializer_list<std::pair<const char*, const Tensor*>> operands) {
    std::string s;
    for (auto [label, t] : operands) {
      if (t == nullptr) continue;
      if (!s.empty()) s += ", ";
      s += std::string(label) + " " + (t->defined() ? t->describe() : "undefined");
    }
    return s;
  }

  const Backend& backend_;
  std::string_view op_, variant_, suffix_;
};


}  // namespace

void Backend::copy(const Tensor& src, const Tensor& dst) {
  // Host <-> device copies are allowed: only one side must be on this device.
  Check c(*this, "copy");
  if (!src.defined() || !dst.defined()) throw Error("copy: undefined tensor");
  if (src.device() != device_ && dst.device() != device_)
    throw DeviceError("copy: neither src " + src.describe() + " nor dst " + dst.describe() +
                      " is on " + device_.str());
  c.same_dtype({{"src", &src}, {"dst", &dst}}).shape("dst", dst, src.shape());
  run_copy(src, dst);
}

void Backend::fill(const Tensor& out, double value) {
  Check(*this, "fill").on_device({{"out", &out}});
  run_fill(out, value);
}

void Backend::matmul(const Tensor& a, const Tensor& b, const Tensor* bias, const Tensor& out,
                     const MatmulArgs& args) {
  Check c(*this, "matmul");
  c.on_device({{"a", &a}, {"b", &b}, {"bias", bias}, {"out", &out}});
  c.same_dtype({{"a", &a}, {"b", &b}}).floating("a", a);
  // out is a's dtype, or f32 accumulating bf16 operands; a bias is in out's
  // dtype, or f32 for bf16 operands (then added to the f32 product).
  if (out.dtype() != a.dtype() && !(a.dtype() == DType::bf16 && out.dtype() == DType::f32))
    throw DTypeError("matmul: out is " + out.describe() + " for operands " + a.describe() + " (it takes " +
                     std::string(dtype_name(a.dtype())) + (a.dtype() == DType::bf16 ? " or f32)" : ")"));
  if (bias != nullptr && !(a.dtype() == DType::bf16 && bias->dtype() == DType::f32))
    c.same_dtype({{"bias", bias}, {"out", &out}});
  c.shape("out", out, matmul_output_shape(a.shape(), b.shape(), args));
  if (bias != nullptr) c.shape("bias", *bias, Shape{out.shape()[out.rank() - 1]});
  run_matmul(a, b, bias, out, args);
}

ConstantB Backend::constant_b_form(const Shape&, const Shape&, DType, const MatmulArgs&) const {
  return ConstantB::as_is;
}

std::int64_t Backend::packed_b_floats(std::int64_t, std::int64_t) const { return 0; }

void Backend::pack_constant_b(const Tensor& b, const MatmulArgs& args, const PackedMatrix& packed) {
  Check c(*this, "pack_constant_b");
  c.on_device({{"b", &b}, {"packed", &packed.data}}).dtype(DType::f32, {{"b", &b}, {"packed", &packed.data}});
  if (b.rank() != 2) throw ShapeError("pack_constant_b: b must be a matrix, got " + b.describe());
  const std::int64_t rows = b.shape()[args.transpose_b ? 1 : 0], cols = b.shape()[args.transpose_b ? 0 : 1];
  if (packed.rows != rows || packed.cols != cols)
    throw ShapeError("pack_constant_b: the pack is [" + std::to_string(packed.rows) + ", " +
                     std::to_string(packed.cols) + "] for op(b) [" + std::to_string(rows) + ", " +
                     std::to_string(cols) + "] of b " + b.describe());
  if (packed_b_floats(rows, cols) == 0) unsupported("pack_constant_b");
  c.shape("packed", packed.data, Shape{packed_b_floats(rows, cols)});
  run_pack_constant_b(b, args, packed);
}

void Backend::matmul_packed(const Tensor& a, const PackedMatrix& b, const Tensor* bias, const Tensor& out,
                            const MatmulArgs& args) {
  Check c(*this, "matmul_packed");
  c.on_device({{"a", &a}, {"b", &b.data}, {"bias", bias}, {"out", &out}});
  c.dtype(DType::f32, {{"a", &a}, {"b", &b.data}, {"bias", bias}, {"out", &out}});
  if (args.transpose_a) throw UnsupportedError("matmul_packed: a transposed a (" + a.describe() + ")");
  MatmulArgs plain = args;
  plain.transpose_b = false;
  c.shape("out", out, matmul_output_shape(a.shape(), Shape{b.rows, b.cols}, plain));
  if (bias != nullptr) c.shape("bias", *bias, Shape{b.cols});
  if (packed_b_floats(b.rows, b.cols) == 0) unsupported("matmul_packed");
  c.shape("b", b.data, Shape{packed_b_floats(b.rows, b.cols)});
  run_matmul_packed(a, b, bias, out, plain);
}

void Backend::conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
                             const Conv2dArgs& args) {
  Check c(*this, "conv2d_forward");
  c.on_device({{"x", &x}, {"w", &w}, {"bias", bias}, {"y", &y}});
  c.same_dtype({{"x", &x}, {"w", &w}, {"bias", bias}, {"y", &y}}).floating("x", x);
  c.shape("y", y, conv2d_output_shape(x.shape(), w.shape(), args));
  if (bias != nullptr) c.shape("bias", *bias, Shape{w.shape()[3]});
  run_conv2d_forward(x, w, bias, y, args);
}

void Backend::conv2d_backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx,
                                   const Conv2dArgs& args) {
  Check c(*this, "conv2d_backward_data");
  c.on_device({{"dy", &dy}, {"w", &w}, {"dx", &dx}});
  c.same_dtype({{"dy", &dy}, {"w", &w}, {"dx", &dx}}).floating("dy", dy);
  c.shape("dy", dy, conv2d_output_shape(dx.shape(), w.shape(), args));
  run_conv2d_backward_data(dy, w, dx, args);
}

void Backend::conv2d_backward_weights(const Tensor& x, const Tensor& dy, const Tensor& dw,
                                      const Tensor* db, const Conv2dArgs& args) {
  Check c(*this, "conv2d_backward_weights");
  c.on_device({{"x", &x}, {"dy", &dy}, {"dw", &dw}, {"db", db}});
  c.same_dtype({{"x", &x}, {"dy", &dy}, {"dw", &dw}, {"db", db}}).floating("x", x);
  c.shape("dy", dy, conv2d_output_shape(x.shape(), dw.shape(), args));
  if (db != nullptr) c.shape("db", *db, Shape{dw.shape()[3]});
  run_conv2d_backward_weights(x, dy, dw, db, args);
}

void Backend::conv2d_backward_weights_through_relu(const Tensor& x, const Tensor& y, const Tensor& dy,
                                                   const Tensor& dw, const Tensor* db, const Conv2dArgs& args) {
  Check c(*this, "conv2d_backward_weights", {}, " through relu");
  c.on_device({{"x", &x}, {"y", &y}, {"dy", &dy}, {"dw", &dw}, {"db", db}});
  c.same_dtype({{"x", &x}, {"y", &y}, {"dy", &dy}, {"dw", &dw}, {"db", db}}).floating("x", x);
  c.shape("dy", dy, conv2d_output_shape(x.shape(), dw.shape(), args)).shape("y", y, dy.shape());
  if (db != nullptr) c.shape("db", *db, Shape{dw.shape()[3]});
  if (!takes_conv_weight_gradient_through_relu(x.dtype(), dw.shape()))
    throw UnsupportedError("conv2d_backward_weights through relu: the " + name() + " backend on " + device().str() +
                           " does not take " + dw.describe() + " through a ReLU");
  run_conv2d_backward_weights_through_relu(x, y, dy, dw, db, args);
}

void Backend::pool2d_forward(const Tensor& x, const Tensor& y, const Pool2dArgs& args) {
  Check c(*this, "pool2d_forward");
  c.on_device({{"x", &x}, {"y", &y}}).same_dtype({{"x", &x}, {"y", &y}}).floating("x", x);
  c.shape("y", y, pool2d_output_shape(x.shape(), args));
  run_pool2d_forward(x, y, args);
}

void Backend::pool2d_backward(const Tensor& x, const Tensor& dy, const Tensor& dx,
                              const Pool2dArgs& args) {
  Check c(*this, "pool2d_backward");
  c.on_device({{"x", &x}, {"dy", &dy}, {"dx", &dx}});
  c.same_dtype({{"x", &x}, {"dy", &dy}, {"dx", &dx}}).floating("x", x);
  c.shape("dy", dy, pool2d_output_shape(x.shape(), args)).shape("dx", dx, x.shape());
  if (args.relu_before && (args.kind != PoolKind::max || x.dtype() != DType::f32))
    throw UnsupportedError("pool2d_backward: relu_before needs f32 max pooling, got " +
                           std::string(tessera::name(args.kind)) + " pooling of " + x.describe());
  run_pool2d_backward(x, dy, dx, args);
}

void Backend::unary(UnaryOp op, const Tensor& x, const Tensor& y) {
  Check c(*this, "unary", tessera::name(op));
  c.on_device({{"x", &x}, {"y", &y}}).floating("x", x);
  if (!(x.dtype() == DType::f32 && y.dtype() == DType::bf16)) c.same_dtype({{"x", &x}, {"y", &y}});
  c.shape("y", y, x.shape());
  run_unary(op, x, y);
}

void Backend::unary_backward(UnaryOp op, const Tensor& x, const Tensor& dy, const Tensor& dx) {
  Check c(*this, "unary", tessera::name(op), " backward");
  c.on_device({{"x", &x}, {"dy", &dy}, {"dx", &dx}});
  c.same_dtype({{"x", &x}, {"dy", &dy}, {"dx", &dx}}).floating("x", x);
  c.shape("dy", dy, x.shape()).shape("dx", dx, x.shape());
  run_unary_backward(op, x, dy, dx);
}

void Backend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  Check c(*this, "binary", tessera::name(op));
  c.on_device({{"a", &a}, {"b", &b}, {"out", &out}}).same_dtype({{"a", &a}, {"b", &b}, {"out", &out}});
  c.shape("out", out, binary_output_shape(a.shape(), b.shape(), tessera::name(op)));
  run_binary(op, a, b, out);
}

void Backend::reduce(ReduceOp op, const Tensor& x, const Tensor& out) {
  Check c(*this, "reduce", tessera::name(op));
  c.on_device({{"x", &x}, {"out", &out}}).same_dtype({{"x", &x}, {"out", &out}}).floating("x", x);
  if (out.rank() != x.rank() || !broadcast_shapes(out.shape(), x.shape()) ||
      *broadcast_shapes(out.shape(), x.shape()) != x.shape())
    throw ShapeError(c.label() + ": out" + out.shape().str() + " is not x" + x.shape().str() +
                     " with some axes reduced to 1");
  run_reduce(op, x, out);
}

void Backend::broadcast_to(const Tensor& x, const Tensor& out) {
  Check c(*this, "broadcast_to");
  c.on_device({{"x", &x}, {"out", &out}}).same_dtype({{"x", &x}, {"out", &out}});
  auto shape = broadcast_shapes(x.shape(), out.shape());
  if (!shape || *shape != out.shape())
    throw ShapeError("broadcast_to: x" + x.shape().str() + " does not broadcast to " +
                     out.shape().str());
  run_broadcast_to(x, out);
}

void Backend::transpose(const Tensor& x, const Tensor& out, const std::vector<int>& perm) {
  Check c(*this, "transpose");
  c.on_device({{"x", &x}, {"out", &out}}).same_dtype({{"x", &x}, {"out", &out}});
  c.shape("out", out, transpose_output_shape(x.shape(), perm));
  run_transpose(x, out, perm);
}

void Backend::softmax(const Tensor& x, const Tensor& y, int axis, bool log, bool causal) {
  Check c(*this, log ? "log_softmax" : causal ? "causal softmax" : "softmax");
  c.on_device({{"x", &x}, {"y", &y}}).same_dtype({{"x", &x}, {"y", &y}}).floating("x", x);
  c.shape("y", y, x.shape());
  const int normalized = x.shape().normalize_axis(axis);
  if (causal) {
    const Shape& s = x.shape();
    if (log || s.rank() < 2 || normalized != s.rank() - 1 || s[s.rank() - 2] > s[s.rank() - 1])
      throw ShapeError(std::string("causal softmax: x ") + x.describe() +
                       " must be [..., queries, keys] with queries <= keys, over the last axis (got axis " +
                       std::to_string(axis) + (log ? ", log" : "") + ")");
  }
  run_softmax(x, y, normalized, log, causal);
}

void Backend::softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, int axis,
                               bool log) {
  Check c(*this, log ? "log_softmax_backward" : "softmax_backward");
  c.on_device({{"y", &y}, {"dy", &dy}, {"dx", &dx}});
  c.same_dtype({{"y", &y}, {"dy", &dy}, {"dx", &dx}}).floating("y", y);
  c.shape("dy", dy, y.shape()).shape("dx", dx, y.shape());
  run_softmax_backward(y, dy, dx, y.shape().normalize_axis(axis), log);
}

void Backend::cached_attention(const Tensor& q, const Tensor& keys, const Tensor& values, const Tensor& positions,
                               const Tensor& out, float scale) {
  Check c(*this, "cached_attention");
  c.on_device({{"q", &q}, {"keys", &keys}, {"values", &values}, {"positions", &positions}, {"out", &out}});
  c.same_dtype({{"q", &q}, {"keys", &keys}, {"values", &values}, {"out", &out}}).floating("q", q);
  c.dtype(DType::i32, {{"positions", &positions}});
  const Shape& s = q.shape();
  const Shape& k = keys.shape();
  if (s.rank() != 4 || k.rank() != 4 || s[0] != k[0] || s[1] != k[1] || s[3] != k[3] || s[2] > k[2])
    throw ShapeError("cached_attention: q " + q.describe() + " must be [B, H, T, K] with T at most C of keys " +
                     keys.describe());
  c.shape("values", values, k).shape("positions", positions, Shape{s[0], 1}).shape("out", out, s);
  run_cached_attention(q, keys, values, positions, out, scale);
}

void Backend::fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const FusedAttentionArgs& args) {
  Check c(*this, "fused_attention");
  c.on_device({{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}});
  c.same_dtype({{"q", &q}, {"k", &k}, {"v", &v}}).floating("q", q).floating("out", out);
  if (q.dtype() != args.multiply && q.dtype() != DType::f32)
    throw DTypeError("fused_attention: q, k and v are " + q.describe() + ", to be multiplied in " +
                     std::string(dtype_name(args.multiply)) + " (f32 values can be rounded, nothing else)");
  // Each operand's shape as [..., T, K] (the heads first).
  auto heads_first = [](const char* label, const Tensor& t, bool tokens_first) {
    Shape s = t.shape();
    if (!tokens_first) return s;
    if (s.rank() != 4)
      throw ShapeError(std::string("fused_attention: ") + label + " " + t.describe() +
                       " is said to be [B, T, H, K] but is not of rank 4");
    return Shape{s[0], s[2], s[1], s[3]};
  };
  const Shape qs = heads_first("q", q, args.q_tokens_first), ks = heads_first("k", k, args.k_tokens_first);
  const Shape vs = heads_first("v", v, args.v_tokens_first), os = heads_first("out", out, args.out_tokens_first);
  const int rank = qs.rank();
  bool leading_equal = rank >= 2 && ks.rank() == rank;
  for (int i = 0; leading_equal && i < rank - 2; ++i) leading_equal = qs[i] == ks[i];
  if (!leading_equal || qs[rank - 1] != ks[rank - 1] || (args.causal && qs[rank - 2] > ks[rank - 2]))
    throw ShapeError("fused_attention: q " + q.describe() + " must be [..., Tq, K] and k " + k.describe() +
                     " [..., Tk, K] with the same leading axes" + (args.causal ? " and Tq <= Tk (causal)" : "") +
                     " (as the heads-first shapes " + qs.str() + " and " + ks.str() + ")");
  if (vs != ks || os != qs)
    throw ShapeError("fused_attention: v " + v.describe() + " must have k's shape " + ks.str() + " and out " +
                     out.describe() + " q's " + qs.str() + " (as heads-first shapes)");
  if (!supports_fused_attention(q.dtype(), args.multiply, out.dtype(), qs[rank - 1]))
    throw UnsupportedError("fused_attention: the " + name() + " backend on " + device().str() + " has no kernel for " +
                           q.describe() + " multiplied in " + std::string(dtype_name(args.multiply)) + " into " +
                           out.describe());
  if (out.numel() == 0) return;
  run_fused_attention(q, k, v, out, args);
}

bool Backend::supports_fused_attention(DType, DType, DType, std::int64_t) const { return false; }

namespace {

// attention_rows_shape (op_args.hpp), and heads of width 0 refused.
Shape check_attention_shapes(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                             const AttentionArgs& args) {
  const Shape rows = attention_rows_shape(op, q.shape(), k.shape(), v.shape(), args);
  if (q.shape()[q.rank() - 1] == 0) throw ShapeError(std::string(op) + ": q " + q.describe() + " has heads of width 0");
  return rows;
}

}  // namespace

void Backend::attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& logsumexp, const AttentionArgs& args) {
  Check c(*this, "attention");
  c.on_device({{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}, {"logsumexp", &logsumexp}});
  c.same_dtype({{"q", &q}, {"k", &k}, {"v", &v}}).floating("q", q).dtype(DType::f32, {{"logsumexp", &logsumexp}});
  if (out.dtype() != q.dtype() && out.dtype() != DType::f32)
    throw DTypeError("attention: out is " + out.describe() + ", expected q's dtype or f32 (q is " + q.describe() + ")");
  c.shape("logsumexp", logsumexp, check_attention_shapes("attention", q, k, v, args)).shape("out", out, q.shape());
  if (out.numel() == 0) return;
  run_attention(q, k, v, out, logsumexp, args);
}

void Backend::attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                 const Tensor& logsumexp, const Tensor& dout, const Tensor& dq, const Tensor& dk,
                                 const Tensor& dv, const AttentionArgs& args) {
  Check c(*this, "attention", {}, " backward");
  c.on_device({{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}, {"logsumexp", &logsumexp}, {"dout", &dout},
               {"dq", &dq}, {"dk", &dk}, {"dv", &dv}});
  c.same_dtype({{"q", &q}, {"k", &k}, {"v", &v}, {"dout", &dout}}).floating("q", q);
  c.dtype(DType::f32, {{"logsumexp", &logsumexp}}).same_dtype({{"out", &out}, {"dq", &dq}, {"dk", &dk}, {"dv", &dv}});
  if (out.dtype() != q.dtype() && out.dtype() != DType::f32)
    throw DTypeError("attention backward: out is " + out.describe() + ", expected q's dtype or f32 (q is " +
                     q.describe() + ")");
  c.shape("logsumexp", logsumexp, check_attention_shapes("attention backward", q, k, v, args));
  c.shape("out", out, q.shape()).shape("dout", dout, q.shape()).shape("dq", dq, q.shape());
  c.shape("dk", dk, k.shape()).shape("dv", dv, k.shape());
  if (dk.numel() == 0 && dq.numel() == 0) return;
  if (dq.numel() == 0) {  // no queries: the keys and values had no effect
    fill(dk, 0.0);
    fill(dv, 0.0);
    return;
  }
  run_attention_backward(q, k, v, out, logsumexp, dout, dq, dk, dv, args);
}

bool Backend::prefers_attention_op(DType, DType, std::int64_t) const { return false; }

void Backend::layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                         const Tensor& mean, const Tensor& rstd, float epsilon) {
  Check c(*this, "layer_norm");
  c.on_device({{"x", &x}, {"gamma", &gamma}, {"beta", &beta}, {"y", &y}, {"mean", &mean}, {"rstd", &rstd}});
  c.dtype(DType::f32, {{"x", &x}, {"gamma", &gamma}, {"beta", &beta}, {"mean", &mean}, {"rstd", &rstd}});
  if (y.dtype() != DType::bf16) c.dtype(DType::f32, {{"y", &y}});  // bf16: the f32 result rounded (a fused cast)
  if (x.rank() < 1) throw ShapeError("layer_norm: x must have rank >= 1, got " + x.shape().str());
  Shape features{x.shape()[x.rank() - 1]};
  Shape rows{x.shape().rows()};
  c.shape("gamma", gamma, features).shape("beta", beta, features).shape("y", y, x.shape());
  c.shape("mean", mean, rows).shape("rstd", rstd, rows);
  run_layer_norm(x, gamma, beta, y, mean, rstd, epsilon);
}

void Backend::layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                  const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                                  const Tensor& dgamma, const Tensor& dbeta) {
  Check c(*this, "layer_norm_backward");
  c.on_device({{"x", &x}, {"gamma", &gamma}, {"mean", &mean}, {"rstd", &rstd}, {"dy", &dy},
               {"dx", &dx}, {"dgamma", &dgamma}, {"dbeta", &dbeta}});
  c.dtype(DType::f32, {{"x", &x}, {"gamma", &gamma}, {"mean", &mean}, {"rstd", &rstd}, {"dy", &dy},
                       {"dx", &dx}, {"dgamma", &dgamma}, {"dbeta", &dbeta}});
  if (x.rank() < 1) throw ShapeError("layer_norm_backward: x must have rank >= 1");
  Shape features{x.shape()[x.rank() - 1]};
  Shape rows{x.shape().rows()};
  c.shape("gamma", gamma, features).shape("dgamma", dgamma, features).shape("dbeta", dbeta, features);
  c.shape("mean", mean, rows).shape("rstd", rstd, rows);
  c.shape("dy", dy, x.shape()).shape("dx", dx, x.shape());
  run_layer_norm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
}

void Backend::embedding(const Tensor& table, const Tensor& ids, const Tensor& out) {
  Check c(*this, "embedding");
  c.on_device({{"table", &table}, {"ids", &ids}, {"out", &out}}).same_dtype({{"table", &table}, {"out", &out}});
  if (ids.dtype() != DType::i32 && ids.dtype() != DType::i64)
    throw DTypeError("embedding: ids is " + ids.describe() + ", expected i32 or i64");
  c.shape("out", out, embedding_output_shape(table.shape(), ids.shape()));
  run_embedding(table, ids, out);
}

void Backend::embedding_block(const Tensor& table, const Tensor& ids, const Tensor& out, std::int64_t first_row,
                              std::int64_t vocab) {
  Check c(*this, "embedding_block");
  c.on_device({{"table", &table}, {"ids", &ids}, {"out", &out}}).same_dtype({{"table", &table}, {"out", &out}});
  if (ids.dtype() != DType::i32 && ids.dtype() != DType::i64)
    throw DTypeError("embedding_block: ids is " + ids.describe() + ", expected i32 or i64");
  c.shape("out", out, embedding_output_shape(table.shape(), ids.shape()));
  if (first_row < 0 || first_row + table.shape()[0] > vocab)
    throw ShapeError("embedding_block: rows [" + std::to_string(first_row) + ", " +
                     std::to_string(first_row + table.shape()[0]) + ") of " + table.describe() +
                     " do not lie in a vocabulary of " + std::to_string(vocab));
  run_embedding_block(table, ids, out, first_row, vocab);
}

void Backend::embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable) {
  Check c(*this, "embedding_backward");
  c.on_device({{"ids", &ids}, {"dout", &dout}, {"dtable", &dtable}});
  c.same_dtype({{"dout", &dout}, {"dtable", &dtable}});
  if (ids.dtype() != DType::i32 && ids.dtype() != DType::i64)
    throw DTypeError("embedding_backward: ids is " + ids.describe() + ", expected i32 or i64");
  c.shape("dout", dout, embedding_output_shape(dtable.shape(), ids.shape()));
  run_embedding_backward(ids, dout, dtable);
}

void Backend::concat(const std::vector<Tensor>& inputs, const Tensor& out, int axis) {
  Check c(*this, "concat");
  if (inputs.empty()) throw ShapeError("concat: no inputs");
  int a = out.shape().normalize_axis(axis);
  std::int64_t total = 0;
  for (const Tensor& in : inputs) {
    c.on_device({{"input", &in}}).same_dtype({{"input", &in}, {"out", &out}});
    if (in.rank() != out.rank()) throw ShapeError("concat: input " + in.describe() + " and out " + out.describe() + " differ in rank");
    for (int i = 0; i < out.rank(); ++i)
      if (i != a && in.shape()[i] != out.shape()[i])
        throw ShapeError("concat: input " + in.describe() + " differs from out " + out.describe() +
                         " in axis " + std::to_string(i) + " (only axis " + std::to_string(a) + " may differ)");
    total += in.shape()[a];
  }
  c.on_device({{"out", &out}});
  if (total != out.shape()[a])
    throw ShapeError("concat: inputs add up to " + std::to_string(total) + " along axis " + std::to_string(a) +
                     ", out " + out.describe() + " has " + std::to_string(out.shape()[a]));
  run_concat(inputs, out, a);
}

void Backend::slice(const Tensor& x, const Tensor& out, int axis, std::int64_t start) {
  Check c(*this, "slice");
  c.on_device({{"x", &x}, {"out", &out}}).same_dtype({{"x", &x}, {"out", &out}});
  int a = x.shape().normalize_axis(axis);
  bool ok = out.rank() == x.rank() && start >= 0 && start + out.shape()[a] <= x.shape()[a];
  for (int i = 0; ok && i < x.rank(); ++i) ok = i == a || x.shape()[i] == out.shape()[i];
  if (!ok)
    throw ShapeError("slice: out " + out.describe() + " is not a slice of x " + x.describe() + " at " +
                     std::to_string(start) + " along axis " + std::to_string(a));
  run_slice(x, out, a, start);
}

void Backend::one_hot(const Tensor& ids, const Tensor& out) {
  Check c(*this, "one_hot");
  c.on_device({{"ids", &ids}, {"out", &out}}).floating("out", out);
  if (ids.dtype() != DType::i32 && ids.dtype() != DType::i64)
    throw DTypeError("one_hot: ids is " + ids.describe() + ", expected i32 or i64");
  if (out.rank() != ids.rank() + 1)
    throw ShapeError("one_hot: out " + out.describe() + " must be ids " + ids.shape().str() +
                     " with a class axis appended");
  auto dims = ids.shape().dims();
  dims.push_back(out.shape()[out.rank() - 1]);
  c.shape("out", out, Shape(dims));
  run_one_hot(ids, out);
}

void Backend::cast(const Tensor& x, const Tensor& out) {
  Check c(*this, "cast");
  c.on_device({{"x", &x}, {"out", &out}}).shape("out", out, x.shape());
  run_cast(x, out);
}

void Backend::random_uniform(const Tensor& out, std::uint64_t seed, std::uint64_t offset,
                             float low, float high) {
  Check(*this, "random_uniform").on_device({{"out", &out}}).floating("out", out);
  run_random_uniform(out, seed, offset, low, high);
}

void Backend::random_normal(const Tensor& out, std::uint64_t seed, std::uint64_t offset,
                            float mean, float stddev) {
  Check(*this, "random_normal").on_device({{"out", &out}}).floating("out", out);
  run_random_normal(out, seed, offset, mean, stddev);
}

void Backend::dropout(const Tensor& x, const Tensor& out, float rate, std::uint64_t seed,
                      std::uint64_t offset) {
  Check c(*this, "dropout");
  c.on_device({{"x", &x}, {"out", &out}}).same_dtype({{"x", &x}, {"out", &out}}).floating("x", x);
  c.shape("out", out, x.shape());
  if (!(rate >= 0.0f && rate < 1.0f)) throw Error("dropout: rate must lie in [0, 1), got " + std::to_string(rate));
  run_dropout(x, out, rate, seed, offset);
}

void Backend::moving_average(const Tensor& state, const Tensor& value, float momentum) {
  Check c(*this, "moving_average");
  c.on_device({{"state", &state}, {"value", &value}}).dtype(DType::f32, {{"state", &state}, {"value", &value}});
  c.shape("value", value, state.shape());
  run_moving_average(state, value, momentum);
}

void Backend::cache_write(const Tensor& cache, const Tensor& rows, const Tensor& positions) {
  Check c(*this, "cache_write");
  c.on_device({{"cache", &cache}, {"rows", &rows}, {"positions", &positions}});
  c.same_dtype({{"cache", &cache}, {"rows", &rows}}).dtype(DType::i32, {{"positions", &positions}});
  const Shape& s = cache.shape();
  const Shape& r = rows.shape();
  if (s.rank() != 4 || r.rank() != 4 || r[2] > s[2])
    throw ShapeError("cache_write: rows " + rows.describe() + " must be [B, H, T, K] with T at most C of the cache " +
                     cache.describe());
  c.shape("rows", rows, Shape{s[0], s[1], r[2], s[3]}).shape("positions", positions, Shape{s[0], 1});
  run_cache_write(cache, rows, positions);
}

void Backend::sgd_update(const Tensor& param, const Tensor& grad, const Tensor& velocity,
                         const SgdArgs& args) {
  Check c(*this, "sgd_update");
  c.on_device({{"param", &param}, {"grad", &grad}, {"velocity", &velocity}});
  c.dtype(DType::f32, {{"param", &param}, {"grad", &grad}, {"velocity", &velocity}});
  c.shape("grad", grad, param.shape()).shape("velocity", velocity, param.shape());
  run_sgd_update(param, grad, velocity, args);
}

void Backend::adam_update(const Tensor& param, const Tensor& grad, const Tensor& m,
                          const Tensor& v, const AdamArgs& args) {
  Check c(*this, "adam_update");
  c.on_device({{"param", &param}, {"grad", &grad}, {"m", &m}, {"v", &v}});
  c.dtype(DType::f32, {{"param", &param}, {"grad", &grad}, {"m", &m}, {"v", &v}});
  c.shape("grad", grad, param.shape()).shape("m", m, param.shape()).shape("v", v, param.shape());
  if (args.step < 1) throw Error("adam_update: step must be >= 1 (it is 1-based)");
  run_adam_update(param, grad, m, v, args);
}

namespace {

// The operands of an update by a^T b: a [K, M], b [K, N] and param [M, N],
// in f32 as the updates' state is; and where the backend takes them.
void check_update_by_product(const Backend& backend, const Check& c, const Tensor& param, const Tensor& a,
                             const Tensor& b) {
  if (a.rank() != 2 || b.rank() != 2 || a.shape()[0] != b.shape()[0])
    throw ShapeError(c.label() + ": a " + a.describe() + " and b " + b.describe() +
                     " must be [K, M] and [K, N] (the gradient a^T b)");
  c.shape("param", param, Shape{a.shape()[1], b.shape()[1]});
  if (!backend.supports_update_by_product(a.dtype(), a.shape(), b.shape()))
    throw UnsupportedError(c.label() + ": the " + backend.name() + " backend on " + backend.device().str() +
                           " does not update by the product of a " + a.describe() + " and b " + b.describe());
}

}  // namespace

void Backend::sgd_update_by_product(const Tensor& param, const Tensor& a, const Tensor& b, const Tensor& velocity,
                                    const SgdArgs& args) {
  Check c(*this, "sgd_update", "by product");
  c.on_device({{"param", &param}, {"a", &a}, {"b", &b}, {"velocity", &velocity}});
  c.dtype(DType::f32, {{"param", &param}, {"a", &a}, {"b", &b}, {"velocity", &velocity}});
  c.shape("velocity", velocity, param.shape());
  check_update_by_product(*this, c, param, a, b);
  run_sgd_update_by_product(param, a, b, velocity, args);
}

void Backend::adam_update_by_product(const Tensor& param, const Tensor& a, const Tensor& b, const Tensor& m,
                                     const Tensor& v, const AdamArgs& args) {
  Check c(*this, "adam_update", "by product");
  c.on_device({{"param", &param}, {"a", &a}, {"b", &b}, {"m", &m}, {"v", &v}});
  c.dtype(DType::f32, {{"param", &param}, {"a", &a}, {"b", &b}, {"m", &m}, {"v", &v}});
  c.shape("m", m, param.shape()).shape("v", v, param.shape());
  if (args.step < 1) throw Error("adam_update: step must be >= 1 (it is 1-based)");
  check_update_by_product(*this, c, param, a, b);
  run_adam_update_by_product(param, a, b, m, v, args);
}

bool Backend::supports_update_by_product(DType, const Shape&, const Shape&) const { return false; }

bool Backend::computes_conv_bias_gradient(DType, const Shape&, const Shape&, const Shape&) const { return false; }

bool Backend::takes_conv_weight_gradient_through_relu(DType, const Shape&) const { return false; }

void Backend::unsupported(std::string_view kernel) const {
  throw UnsupportedError("kernel '" + std::string(kernel) +
                         "' is not implemented by the " + name() + " backend on " +
                         device_.str());
}

// Default slots: not implemented on this backend.
void Backend::run_fused_attention(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                  const FusedAttentionArgs&) {
  unsupported("fused_attention");
}
void Backend::run_attention(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                            const AttentionArgs&) {
  unsupported("attention");
}
void Backend::run_attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                     const Tensor&, const Tensor&, const Tensor&, const Tensor&, const AttentionArgs&) {
  unsupported("attention backward");
}
void Backend::run_copy(const Tensor&, const Tensor&) { unsupported("copy"); }
void Backend::run_fill(const Tensor&, double) { unsupported(tessera::name(OpKind::fill)); }
void Backend::run_matmul(const Tensor&, const Tensor&, const Tensor*, const Tensor&, const MatmulArgs&) { unsupported(tessera::name(OpKind::matmul)); }
void Backend::run_conv2d_forward(const Tensor&, const Tensor&, const Tensor*, const Tensor&, const Conv2dArgs&) { unsupported(tessera::name(OpKind::conv2d)); }
void Backend::run_conv2d_backward_data(const Tensor&, const Tensor&, const Tensor&, const Conv2dArgs&) { unsupported(tessera::name(OpKind::conv2d_grad_input)); }
void Backend::run_conv2d_backward_weights(const Tensor&, const Tensor&, const Tensor&, const Tensor*, const Conv2dArgs&) { unsupported(tessera::name(OpKind::conv2d_grad_weight)); }
void Backend::run_conv2d_backward_weights_through_relu(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor*, const Conv2dArgs&) { unsupported("conv2d_backward_weights through relu"); }
void Backend::run_pool2d_forward(const Tensor&, const Tensor&, const Pool2dArgs&) { unsupported(tessera::name(OpKind::pool2d)); }
void Backend::run_pool2d_backward(const Tensor&, const Tensor&, const Tensor&, const Pool2dArgs&) { unsupported(tessera::name(OpKind::pool2d_grad)); }
void Backend::run_unary(UnaryOp, const Tensor&, const Tensor&) { unsupported(tessera::name(OpKind::unary)); }
void Backend::run_unary_backward(UnaryOp, const Tensor&, const Tensor&, const Tensor&) { unsupported(tessera::name(OpKind::unary_grad)); }
void Backend::run_binary(BinaryOp, const Tensor&, const Tensor&, const Tensor&) { unsupported(tessera::name(OpKind::binary)); }
void Backend::run_reduce(ReduceOp, const Tensor&, const Tensor&) { unsupported(tessera::name(OpKind::reduce)); }
void Backend::run_broadcast_to(const Tensor&, const Tensor&) { unsupported(tessera::name(OpKind::broadcast_to)); }
void Backend::run_transpose(const Tensor&, const Tensor&, const std::vector<int>&) { unsupported(tessera::name(OpKind::transpose)); }
void Backend::run_pack_constant_b(const Tensor&, const MatmulArgs&, const PackedMatrix&) { unsupported("pack_constant_b"); }
void Backend::run_matmul_packed(const Tensor&, const PackedMatrix&, const Tensor*, const Tensor&, const MatmulArgs&) { unsupported("matmul_packed"); }
void Backend::run_softmax(const Tensor&, const Tensor&, int, bool, bool) { unsupported(tessera::name(OpKind::softmax)); }
void Backend::run_softmax_backward(const Tensor&, const Tensor&, const Tensor&, int, bool) { unsupported(tessera::name(OpKind::softmax_grad)); }
void Backend::run_cached_attention(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, float) { unsupported(tessera::name(OpKind::cached_attention)); }
void Backend::run_layer_norm(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, float) { unsupported(tessera::name(OpKind::layer_norm)); }
void Backend::run_layer_norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) { unsupported(tessera::name(OpKind::layer_norm_grad)); }
void Backend::run_embedding(const Tensor&, const Tensor&, const Tensor&) { unsupported(tessera::name(OpKind::embedding)); }
void Backend::run_embedding_block(const Tensor&, const Tensor&, const Tensor&, std::int64_t, std::int64_t) {
  unsupported("embedding_block");
}
void Backend::run_embedding_backward(const Tensor&, const Tensor&, const Tensor&) { unsupported(tessera::name(OpKind::embedding_grad)); }
void Backend::run_one_hot(const Tensor&, const Tensor&) { unsupported(tessera::name(OpKind::one_hot)); }
void Backend::run_concat(const std::vector<Tensor>&, const Tensor&, int) { unsupported(tessera::name(OpKind::concat)); }
void Backend::run_slice(const Tensor&, const Tensor&, int, std::int64_t) { unsupported(tessera::name(OpKind::slice)); }
void Backend::run_cast(const Tensor&, const Tensor&) { unsupported(tessera::name(OpKind::cast)); }
void Backend::run_random_uniform(const Tensor&, std::uint64_t, std::uint64_t, float, float) { unsupported("random_uniform"); }
void Backend::run_random_normal(const Tensor&, std::uint64_t, std::uint64_t, float, float) { unsupported("random_normal"); }
void Backend::run_dropout(const Tensor&, const Tensor&, float, std::uint64_t, std::uint64_t) { unsupported(tessera::name(OpKind::dropout)); }
void Backend::run_moving_average(const Tensor&, const Tensor&, float) { unsupported(tessera::name(OpKind::moving_average)); }
void Backend::run_cache_write(const Tensor&, const Tensor&, const Tensor&) { unsupported(tessera::name(OpKind::cache_write)); }
void Backend::run_sgd_update(const Tensor&, const Tensor&, const Tensor&, const SgdArgs&) { unsupported(tessera::name(OpKind::sgd_update)); }
void Backend::run_adam_update(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const AdamArgs&) { unsupported(tessera::name(OpKind::adam_update)); }
void Backend::run_sgd_update_by_product(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const SgdArgs&) {
  unsupported("sgd_update by product");
}
void Backend::run_adam_update_by_product(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                         const AdamArgs&) {
  unsupported("adam_update by product");
}

}  // namespace tessera
