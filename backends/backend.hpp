// Backend: the kernels of one device.
//
// One Backend object per device (cpu:0, cpu:1, ..., cuda:0). Every kernel writes
// into output tensors the caller has allocated (the executor carves them out of
// its planned arena), so a backend call never allocates a tensor.
//
// The public methods are the same for every backend and check their operands
// first (device, dtype, shape), raising ShapeError / DTypeError / DeviceError
// that name the op and the operands. They then call the protected `run_*` slot
// of the device kind. A slot a backend does not provide raises UnsupportedError
// naming the op and the backend; `supports()` asks beforehand.
//
//   auto& cpu = backend_for(Device::cpu(0));
//   Tensor y = Tensor::empty({128, 1024}, DType::f32);
//   cpu.matmul(x, w, &b, y, {.activation = Activation::relu});  // y = relu(x @ w + b)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backends/op_args.hpp"
#include "backends/op_kinds.hpp"
#include "backends/op_timer.hpp"
#include "engine/core/allocator.hpp"
#include "engine/core/tensor.hpp"

namespace tessera {

// A matrix op(b) [rows = K, cols = N] in a backend's own packed layout
// (Backend::pack_constant_b): `data` is a 1-D f32 tensor that only that
// backend's matmul_packed reads.
struct PackedMatrix {
  Tensor data;
  std::int64_t rows = 0, cols = 0;
};

class Backend {
 public:
  explicit Backend(Device device) : device_(device) {}
  virtual ~Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  Device device() const { return device_; }
  virtual std::string name() const = 0;  // "onednn", "cuda"
  virtual Allocator& allocator() = 0;
  // Whether a node of op `kind` runs on this backend for tensors of `dtype`
  // (the node's output, or for an update its parameter, for attention its q). Copies and random
  // fills are not ops: every backend has them, for f32 at least.
  virtual bool supports(OpKind kind, DType dtype) const = 0;
  // Waits until every kernel issued so far has finished (a no-op on the CPU).
  virtual void synchronize() {}
  // Times ops for a profile (op_timer.hpp): by the host's clock unless the
  // device queues its work and times it itself.
  virtual std::unique_ptr<OpTimer> make_op_timer() { return make_host_op_timer(); }

  // dst = src. Either side may be on the host when this backend's device is not.
  void copy(const Tensor& src, const Tensor& dst);
  // out[:] = value
  void fill(const Tensor& out, double value);

  // out = act(alpha * op(a) @ op(b) + bias); bias is [N] or null. See MatmulArgs.
  // bf16 operands: out is bf16 or f32, a bias out's dtype or f32, and a bf16
  // out is the f32 result (sums, bias, activation) rounded once, as mixed
  // precision's cast after an f32 product rounds it (fused: fusion.hpp).
  void matmul(const Tensor& a, const Tensor& b, const Tensor* bias, const Tensor& out,
              const MatmulArgs& args = {});
  // The form in which matmul(a, b, ..., args) multiplies fastest a b that
  // stays the same from call to call (inference weights,
  // Executor::fix_variables), made once rather than per call: as it is; a
  // transposed copy (multiplied with args.transpose_b flipped); or packed
  // (pack_constant_b's copy, multiplied by matmul_packed). Shapes are a's and
  // b's; as_is by default.
  virtual ConstantB constant_b_form(const Shape& a, const Shape& b, DType dtype, const MatmulArgs& args) const;
  // The f32 elements of op(b)'s packed copy [rows K, cols N]: packed.data's
  // length for pack_constant_b (0 where the backend packs nothing).
  virtual std::int64_t packed_b_floats(std::int64_t rows, std::int64_t cols) const;
  // op(b) (b transposed where args.transpose_b says) into `packed`, a 1-D
  // f32 tensor of packed_b_floats(K, N) elements, in this backend's packed
  // layout; only matmul_packed reads it.
  void pack_constant_b(const Tensor& b, const MatmulArgs& args, const PackedMatrix& packed);
  // matmul(a, b, bias, out, args) against b's packed copy (args.transpose_b
  // is then the pack's, not read again).
  void matmul_packed(const Tensor& a, const PackedMatrix& b, const Tensor* bias, const Tensor& out,
                     const MatmulArgs& args = {});

  // Channels-last convolution (x[N,H,W,C], w[KH,KW,C,F], y[N,OH,OW,F]) and its two
  // gradients; bias is [F] or null; db (optional) receives the bias gradient.
  void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
                      const Conv2dArgs& args);
  void conv2d_backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx,
                            const Conv2dArgs& args);
  void conv2d_backward_weights(const Tensor& x, const Tensor& dy, const Tensor& dw,
                               const Tensor* db, const Conv2dArgs& args);
  // Whether conv2d_backward_weights sums db at little cost beside dw for
  // these shapes (it reads dy anyway), so that the memory plan drops the
  // separate sum of dy (fusion.hpp). Any backend takes db; this says it pays.
  virtual bool computes_conv_bias_gradient(DType dtype, const Shape& x, const Shape& dy, const Shape& dw) const;
  // The weight gradient (and db, when not null) through the ReLU that the
  // convolution's output went into, whose output y is laid out as dy: dy is
  // the gradient at y, taken through the ReLU as it is read (as
  // unary_backward(relu, y, dy) would give it), so the ReLU's gradient needs
  // no pass of its own (fusion.hpp). Only where
  // takes_conv_weight_gradient_through_relu() says so.
  void conv2d_backward_weights_through_relu(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dw,
                                            const Tensor* db, const Conv2dArgs& args);
  virtual bool takes_conv_weight_gradient_through_relu(DType dtype, const Shape& dw) const;

  // Max/average pooling over channels-last x; the backward pass takes the
  // forward input (max pooling finds its arg-max again rather than keeping a
  // workspace alive between forward and backward). Average pooling divides by
  // the window size without padding (Keras' count_include_pad=False).
  void pool2d_forward(const Tensor& x, const Tensor& y, const Pool2dArgs& args);
  void pool2d_backward(const Tensor& x, const Tensor& dy, const Tensor& dx, const Pool2dArgs& args);

  // y = f(x) elementwise, and dx = dy * f'(x). A bf16 y of an f32 x gets f(x)
  // rounded as a cast rounds it (mixed precision's cast fused into the op).
  void unary(UnaryOp op, const Tensor& x, const Tensor& y);
  void unary_backward(UnaryOp op, const Tensor& x, const Tensor& dy, const Tensor& dx);

  // out = a (op) b with NumPy broadcasting; out has the broadcast shape.
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);

  // out = reduce(x) over the axes where out has extent 1 and x does not (keepdims).
  void reduce(ReduceOp op, const Tensor& x, const Tensor& out);
  // out = x broadcast to out's shape (the adjoint of a sum reduction).
  void broadcast_to(const Tensor& x, const Tensor& out);
  // out = x with axes permuted: out.shape[i] = x.shape[perm[i]].
  void transpose(const Tensor& x, const Tensor& out, const std::vector<int>& perm);

  // Softmax (or log-softmax) over `axis`, and its backward from the output y.
  // causal: x[..., m, n] over its last axis, m queries that are the last m of
  // n positions, query i seeing keys j <= i + n - m: the rest count as -inf
  // (y = 0 there), as a mask of -inf added first would (attention's causal
  // mask with no mask tensor: the CUDA kernels skip the masked elements, the
  // CPU writes them as -inf before oneDNN's softmax). Not with log; the
  // backward needs no flag, y being 0 where masked.
  void softmax(const Tensor& x, const Tensor& y, int axis, bool log, bool causal = false);
  void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, int axis, bool log);

  // Attention of q [B, H, T, K] over a KV cache (keys, values [B, H, C, K]):
  // out[b, h, t] = softmax_j(scale * q[b, h, t] . keys[b, h, j]) values[b, h, j]
  // over j = 0 .. positions[b] + t only (positions i32 [B, 1]), the cache's
  // later rows never read. A position whose queries would pass C is a
  // ShapeError where the backend can read positions first (the CPU); a GPU
  // attends over the rows that exist.
  void cached_attention(const Tensor& q, const Tensor& keys, const Tensor& values, const Tensor& positions,
                        const Tensor& out, float scale);

  // Attention in one pass, the scores never in memory (flash attention):
  // out = softmax(args.scale * q k^T) v over the last axis, q [..., Tq, K], k
  // and v [..., Tk, K] with the same leading axes, out [..., Tq, K], or any of
  // them [B, T, H, K] where args says so (FusedAttentionArgs). causal: query
  // i sees keys 0 .. i + Tk - Tq only (Tq <= Tk), as causal softmax does.
  // Only where supports_fused_attention() says so (the memory plan asks
  // before it fuses a matmul, softmax and matmul into it: fusion.hpp).
  void fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                       const FusedAttentionArgs& args);
  // For q, k, v stored in `stored` and multiplied in `multiply`, out in
  // `out`, heads of `width`; none by default.
  virtual bool supports_fused_attention(DType stored, DType multiply, DType out, std::int64_t width) const;

  // Attention as the graph's attention op and its gradient, q [..., Tq, K],
  // k and v [..., Tk, K] (same leading axes, same dtype), out [..., Tq, K] in
  // q's dtype or f32 (bf16 products kept in f32, as mixed precision's
  // matmuls); or each [B, T, H, K] where args.tokens_first. The forward pass
  // writes out = softmax(scale * q k^T) v and logsumexp [..., Tq] (f32; [B,
  // H, Tq] for tokens first): each row's log of its sum of exp(scale *
  // score), -inf where it sees no key. The backward pass recomputes the
  // weights from it: dq, dk, dv (out's dtype) of dout (q's dtype). causal:
  // query i sees keys 0 .. i + Tk - Tq only (Tq <= Tk).
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& logsumexp,
                 const AttentionArgs& args);
  void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& logsumexp, const Tensor& dout, const Tensor& dq, const Tensor& dk,
                          const Tensor& dv, const AttentionArgs& args);
  // Whether this backend runs those two as kernels of their own, faster than
  // the matmuls, softmax and their gradients they replace (for q, k, v in
  // `operands`, out in `out`, heads of `width`): the graph then builds the op
  // (Graph::set_attention_kernel). A backend without may still run them.
  virtual bool prefers_attention_op(DType operands, DType out, std::int64_t width) const;

  // Layer normalisation over the last axis: y = (x - mean) * rstd * gamma + beta.
  // mean and rstd ([rows]) are saved for the backward pass. Everything is
  // f32, but y may be bf16: y rounded as a cast rounds it.
  void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                  const Tensor& mean, const Tensor& rstd, float epsilon);
  void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                           const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                           const Tensor& dgamma, const Tensor& dbeta);

  // out[..., :] = table[ids[...], :]; ids are i32 or i64, each in [0, V).
  void embedding(const Tensor& table, const Tensor& ids, const Tensor& out);
  // A block of a vocabulary split over devices: `table` holds rows
  // [first_row, first_row + rows) of a `vocab`-row vocabulary; ids outside
  // the block give zero rows (their owner adds them in), ids outside the
  // vocabulary are a ShapeError.
  void embedding_block(const Tensor& table, const Tensor& ids, const Tensor& out, std::int64_t first_row,
                       std::int64_t vocab);
  // dtable[ids[...], :] += dout[..., :] (scatter-add; dtable is not cleared).
  void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable);

  // out = the inputs joined along `axis` (every other extent equal).
  void concat(const std::vector<Tensor>& inputs, const Tensor& out, int axis);
  // out = x[..., start : start + out.shape[axis], ...] along `axis`.
  void slice(const Tensor& x, const Tensor& out, int axis, std::int64_t start);

  // out[..., c] = 1 where c == ids[...], else 0; out is [..., classes], floating.
  // An id outside [0, classes) is a ShapeError naming it (a label out of range).
  void one_hot(const Tensor& ids, const Tensor& out);

  // out = x converted to out's dtype (bf16 rounds to nearest even).
  void cast(const Tensor& x, const Tensor& out);

  // Counter-based random numbers (Philox-4x32-10): element i of a fill with
  // (seed, offset) is a pure function of (seed, offset + i), so a stream is
  // reproducible, independent of thread count, and identical on every backend.
  void random_uniform(const Tensor& out, std::uint64_t seed, std::uint64_t offset, float low,
                      float high);
  void random_normal(const Tensor& out, std::uint64_t seed, std::uint64_t offset, float mean,
                     float stddev);

  // out = x * keep / (1 - rate), keep[i] = philox uniform(seed, offset + i) >= rate.
  // The mask is a pure function of (seed, offset), so the backward pass is the
  // same call on dy: nothing is kept between the two.
  void dropout(const Tensor& x, const Tensor& out, float rate, std::uint64_t seed, std::uint64_t offset);

  // state = momentum * state + (1 - momentum) * value, in place (the moving
  // statistics of batch normalisation).
  void moving_average(const Tensor& state, const Tensor& value, float momentum);

  // cache[b, :, positions[b] + t, :] = rows[b, :, t, :], in place: a KV
  // cache [B, H, C, K] takes rows [B, H, T, K] at each sequence's position
  // (positions i32 [B, 1]). A position whose rows would pass C is a ShapeError
  // where the backend can read positions before it writes (the CPU); a GPU
  // writes the rows that fit.
  void cache_write(const Tensor& cache, const Tensor& rows, const Tensor& positions);

  // Fused optimizer updates, in place on param and its state.
  void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& velocity,
                  const SgdArgs& args);
  void adam_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                   const AdamArgs& args);
  // The same updates of param [M, N] by the gradient a^T b (a [K, M], b [K,
  // N]: a dense layer's input and output gradient), the product computed in
  // the update's own kernel and never written: the gradient's pass to memory
  // and back goes. Only where supports_update_by_product() says so (the memory
  // plan fuses a weight gradient's matmul into its update there).
  void sgd_update_by_product(const Tensor& param, const Tensor& a, const Tensor& b, const Tensor& velocity,
                             const SgdArgs& args);
  void adam_update_by_product(const Tensor& param, const Tensor& a, const Tensor& b, const Tensor& m,
                              const Tensor& v, const AdamArgs& args);
  virtual bool supports_update_by_product(DType dtype, const Shape& a, const Shape& b) const;

 protected:
  // Device-kind slots, called after the operands were checked. The defaults
  // raise UnsupportedError naming the kernel and this backend.
  virtual void run_copy(const Tensor& src, const Tensor& dst);
  virtual void run_fill(const Tensor& out, double value);
  virtual void run_matmul(const Tensor& a, const Tensor& b, const Tensor* bias, const Tensor& out,
                          const MatmulArgs& args);
  virtual void run_conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* bias,
                                  const Tensor& y, const Conv2dArgs& args);
  virtual void run_conv2d_backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx,
                                        const Conv2dArgs& args);
  virtual void run_conv2d_backward_weights(const Tensor& x, const Tensor& dy, const Tensor& dw,
                                           const Tensor* db, const Conv2dArgs& args);
  virtual void run_conv2d_backward_weights_through_relu(const Tensor& x, const Tensor& y, const Tensor& dy,
                                                        const Tensor& dw, const Tensor* db, const Conv2dArgs& args);
  virtual void run_pool2d_forward(const Tensor& x, const Tensor& y, const Pool2dArgs& args);
  virtual void run_pool2d_backward(const Tensor& x, const Tensor& dy, const Tensor& dx,
                                   const Pool2dArgs& args);
  virtual void run_unary(UnaryOp op, const Tensor& x, const Tensor& y);
  virtual void run_unary_backward(UnaryOp op, const Tensor& x, const Tensor& dy, const Tensor& dx);
  virtual void run_binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
  virtual void run_reduce(ReduceOp op, const Tensor& x, const Tensor& out);
  virtual void run_broadcast_to(const Tensor& x, const Tensor& out);
  virtual void run_transpose(const Tensor& x, const Tensor& out, const std::vector<int>& perm);
  virtual void run_pack_constant_b(const Tensor& b, const MatmulArgs& args, const PackedMatrix& packed);
  virtual void run_matmul_packed(const Tensor& a, const PackedMatrix& b, const Tensor* bias, const Tensor& out,
                                 const MatmulArgs& args);
  virtual void run_softmax(const Tensor& x, const Tensor& y, int axis, bool log, bool causal);
  virtual void run_softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, int axis,
                                    bool log);
  virtual void run_cached_attention(const Tensor& q, const Tensor& keys, const Tensor& values,
                                    const Tensor& positions, const Tensor& out, float scale);
  virtual void run_fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                   const FusedAttentionArgs& args);
  virtual void run_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& logsumexp, const AttentionArgs& args);
  virtual void run_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                      const Tensor& logsumexp, const Tensor& dout, const Tensor& dq,
                                      const Tensor& dk, const Tensor& dv, const AttentionArgs& args);
  virtual void run_layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                              const Tensor& y, const Tensor& mean, const Tensor& rstd,
                              float epsilon);
  virtual void run_layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                       const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                                       const Tensor& dgamma, const Tensor& dbeta);
  virtual void run_embedding(const Tensor& table, const Tensor& ids, const Tensor& out);
  virtual void run_embedding_block(const Tensor& table, const Tensor& ids, const Tensor& out, std::int64_t first_row,
                                   std::int64_t vocab);
  virtual void run_embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable);
  virtual void run_concat(const std::vector<Tensor>& inputs, const Tensor& out, int axis);
  virtual void run_slice(const Tensor& x, const Tensor& out, int axis, std::int64_t start);
  virtual void run_one_hot(const Tensor& ids, const Tensor& out);
  virtual void run_cast(const Tensor& x, const Tensor& out);
  virtual void run_random_uniform(const Tensor& out, std::uint64_t seed, std::uint64_t offset,
                                  float low, float high);
  virtual void run_random_normal(const Tensor& out, std::uint64_t seed, std::uint64_t offset,
                                 float mean, float stddev);
  virtual void run_dropout(const Tensor& x, const Tensor& out, float rate, std::uint64_t seed,
                           std::uint64_t offset);
  virtual void run_moving_average(const Tensor& state, const Tensor& value, float momentum);
  virtual void run_cache_write(const Tensor& cache, const Tensor& rows, const Tensor& positions);
  virtual void run_sgd_update(const Tensor& param, const Tensor& grad, const Tensor& velocity,
                              const SgdArgs& args);
  virtual void run_adam_update(const Tensor& param, const Tensor& grad, const Tensor& m,
                               const Tensor& v, const AdamArgs& args);
  virtual void run_sgd_update_by_product(const Tensor& param, const Tensor& a, const Tensor& b,
                                         const Tensor& velocity, const SgdArgs& args);
  virtual void run_adam_update_by_product(const Tensor& param, const Tensor& a, const Tensor& b, const Tensor& m,
                                          const Tensor& v, const AdamArgs& args);

 private:
  [[noreturn]] void unsupported(std::string_view kernel) const;
  Device device_;
};

}  // namespace tessera
