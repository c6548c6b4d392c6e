// The CPU backend: oneDNN primitives, and plain vectorisable loops where oneDNN
// has nothing (broadcasting binary ops, embedding, random fills, optimizers).
//
// Each logical CPU device owns its oneDNN engine and stream and a share of the
// machine's threads (the OpenMP thread count set around every kernel). oneDNN
// primitives are created once per (kernel, shapes, attributes) key and reused;
// their scratchpads come from this device's allocator, grown on first use, so a
// repeated step allocates nothing of its own (oneDNN's sgemm, which some
// products take, allocates its packing buffers inside each call).
#pragma once

#include <algorithm>
#include <array>
#include <initializer_list>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "backends/backend.hpp"
#include "backends/denormals.hpp"

namespace tessera {

// A oneDNN primitive's memory argument: a layout over bytes (`desc` must
// outlive the call it is given to).
struct PrimitiveArg {
  const dnnl::memory::desc* desc = nullptr;
  void* data = nullptr;
};

// A primitive's arguments by oneDNN id (DNNL_ARG_SRC, ...); at most 12, kept
// in place (no allocation per call).
class PrimitiveArgs {
 public:
  PrimitiveArgs(std::initializer_list<std::pair<int, PrimitiveArg>> args);
  void add(int id, PrimitiveArg arg);
  const std::pair<int, PrimitiveArg>* begin() const { return args_.data(); }
  const std::pair<int, PrimitiveArg>* end() const { return args_.data() + size_; }

 private:
  std::array<std::pair<int, PrimitiveArg>, 12> args_{};
  std::size_t size_ = 0;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(Device device, int threads);

  std::string name() const override { return "onednn"; }
  Allocator& allocator() override { return allocator_; }
  bool supports(OpKind kind, DType dtype) const override;
  ConstantB constant_b_form(const Shape& a, const Shape& b, DType dtype, const MatmulArgs& args) const override;
  std::int64_t packed_b_floats(std::int64_t rows, std::int64_t cols) const override;

  int threads() const { return threads_; }
  // oneDNN fixes a primitive's thread count when it is created, so each share
  // has primitives of its own, kept so that switching back (tessera bench
  // alternates one device of every core with meshes of smaller shares) reuses them.
  void set_threads(int threads) { threads_ = threads; }
  // The oneDNN kernel that conv2d_backward_data runs for these operands
  // (impl_info_str), with " (forward, kernel turned)" where it runs as a
  // forward convolution (conv2d.cpp); tests ask.
  std::string conv2d_backward_data_kernel(const Tensor& dy, const Tensor& w, const Tensor& dx, const Conv2dArgs& args);
  // Number of distinct oneDNN primitives created so far for the current
  // thread share (tests check reuse).
  std::size_t primitive_count() const;

  // A cached oneDNN primitive and the memory descriptors it was made for,
  // with the memory objects of its arguments (execute): made on its first
  // run, pointed at each run's bytes after it.
  struct Primitive {
    dnnl::primitive primitive;
    dnnl::primitive_desc_base desc;
    struct Bound {
      int id;
      dnnl::memory::desc desc;
      dnnl::memory memory;
    };
    mutable std::vector<Bound> bound{};
    dnnl::memory::desc scratchpad{};  // filled by primitive()
  };
  // The primitive for `key`, made by `make` on first use.
  const Primitive& primitive(const std::string& key, const std::function<Primitive()>& make);
  // Runs a primitive with the user scratchpad attached; `args` are the
  // memory arguments without the scratchpad. Memory objects over tensors are
  // the primitive's own, made once per argument and layout and repointed per
  // call: a oneDNN memory object per operand per call cost a small product
  // more than its arithmetic (bench/README.md, "Serial loops without a team").
  void execute(const Primitive& p, const PrimitiveArgs& args);
  // A memory argument over a tensor's data, or over bytes of ours.
  PrimitiveArg memory(const dnnl::memory::desc& desc, const Tensor& t) const { return {&desc, t.raw_data()}; }
  PrimitiveArg memory(const dnnl::memory::desc& desc, void* data) const { return {&desc, data}; }
  const dnnl::engine& engine() const { return engine_; }
  // Attributes every primitive of this backend is made with (user scratchpad).
  dnnl::primitive_attr default_attr() const;
  // Copies `from` into `to` (different layouts of one logical tensor) with a
  // cached oneDNN reorder primitive.
  void reorder(const std::string& key, const PrimitiveArg& from, const PrimitiveArg& to);
  // The weights `w` (in `user` layout) as memory in the layout `wanted`:
  // the tensor itself when they agree, else a reordered copy in a cached buffer.
  PrimitiveArg weights_in(const std::string& key, const dnnl::memory::desc& wanted, const dnnl::memory::desc& user,
                       const Tensor& w);
  // A device buffer of at least `bytes` kept under `key` (a primitive cache key)
  // for kernels that need memory of their own between primitives (pooling's
  // workspace, layer norm's variance); made on first use, so a repeated call
  // with the same shapes allocates nothing.
  Buffer& scratch_buffer(const std::string& key, std::size_t bytes) {
    auto& buffer = scratch_buffers_[key];
    if (!buffer || buffer->bytes() < bytes)
      buffer = std::make_shared<Buffer>(allocator_, std::max<std::size_t>(bytes, 1));
    return *buffer;
  }
  // scratch_buffer(key, ...) viewed as a tensor of `shape` and `dtype`.
  Tensor scratch_tensor(const std::string& key, const Shape& shape, DType dtype) {
    scratch_buffer(key, static_cast<std::size_t>(shape.numel()) * dtype_size(dtype));
    return Tensor::view(scratch_buffers_[key], 0, shape, dtype);
  }
  // out = compute's f32 result (written into scratch under `key`) rounded to
  // out's dtype: an op with mixed precision's cast fused into it, the cast's bits.
  template <typename Compute>
  void rounded_from_f32(const std::string& key, const Tensor& out, Compute compute) {
    const Tensor wide = scratch_tensor(key, out.shape(), DType::f32);
    compute(wide);
    run_cast(wide, out);
  }

 protected:
  void run_copy(const Tensor& src, const Tensor& dst) override;
  void run_fill(const Tensor& out, double value) override;
  void run_matmul(const Tensor& a, const Tensor& b, const Tensor* bias, const Tensor& out,
                  const MatmulArgs& args) override;
  void run_pack_constant_b(const Tensor& b, const MatmulArgs& args, const PackedMatrix& packed) override;
  void run_matmul_packed(const Tensor& a, const PackedMatrix& b, const Tensor* bias, const Tensor& out,
                         const MatmulArgs& args) override;
  // oneDNN's matmul primitive on a and b described by a_md and b_md (their
  // part of the primitive's key in operands_key), bias and activation fused.
  void run_onednn_matmul(const std::string& operands_key, const dnnl::memory::desc& a_md, const Tensor& a,
                         const dnnl::memory::desc& b_md, const Tensor& b, const Tensor* bias, const Tensor& out,
                         const MatmulArgs& args);
  // oneDNN's preferred layout of a matmul's b [rows, cols] on this CPU (a
  // blocked one, or plain where its kernels read b as it is), kept per shape.
  const dnnl::memory::desc& packed_b_desc(std::int64_t rows, std::int64_t cols) const;
  // run_matmul where oneDNN has no bf16 kernel for this CPU (before AVX-512):
  // bf16 operands widened to f32 (exactly), multiplied in f32, the result rounded.
  void matmul_widened(const Tensor& a, const Tensor& b, const Tensor* bias, const Tensor& out,
                      const MatmulArgs& args);
  void run_conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
                          const Conv2dArgs& args) override;
  void run_conv2d_backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx,
                                const Conv2dArgs& args) override;
  // The primitive conv2d_backward_data runs, cached under `key` (and `key`
  // " as forward"); *as_forward: it is a forward convolution over the turned kernel.
  const Primitive& conv2d_input_gradient(const std::string& key, const Tensor& dy, const Tensor& w, const Tensor& dx,
                                         const Conv2dArgs& args, bool* as_forward);
  void run_conv2d_backward_weights(const Tensor& x, const Tensor& dy, const Tensor& dw,
                                   const Tensor* db, const Conv2dArgs& args) override;
  void run_conv2d_backward_weights_through_relu(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dw,
                                                const Tensor* db, const Conv2dArgs& args) override;
  void run_pool2d_forward(const Tensor& x, const Tensor& y, const Pool2dArgs& args) override;
  void run_pool2d_backward(const Tensor& x, const Tensor& dy, const Tensor& dx,
                           const Pool2dArgs& args) override;
  void run_softmax(const Tensor& x, const Tensor& y, int axis, bool log, bool causal) override;
  void run_softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, int axis,
                            bool log) override;
  bool prefers_attention_op(DType operands, DType out, std::int64_t width) const override;
  bool supports_fused_attention(DType stored, DType multiply, DType out, std::int64_t width) const override;
  bool supports_update_by_product(DType dtype, const Shape& a, const Shape& b) const override;
  bool computes_conv_bias_gradient(DType dtype, const Shape& x, const Shape& dy, const Shape& dw) const override;
  bool takes_conv_weight_gradient_through_relu(DType dtype, const Shape& dw) const override;
  void run_fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                           const FusedAttentionArgs& args) override;
  void run_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& logsumexp,
                     const AttentionArgs& args) override;
  void run_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& logsumexp, const Tensor& dout, const Tensor& dq, const Tensor& dk,
                              const Tensor& dv, const AttentionArgs& args) override;
  void run_cached_attention(const Tensor& q, const Tensor& keys, const Tensor& values, const Tensor& positions,
                            const Tensor& out, float scale) override;
  void run_layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                      const Tensor& mean, const Tensor& rstd, float epsilon) override;
  void run_layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                               const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                               const Tensor& dgamma, const Tensor& dbeta) override;
  void run_unary(UnaryOp op, const Tensor& x, const Tensor& y) override;
  void run_unary_backward(UnaryOp op, const Tensor& x, const Tensor& dy, const Tensor& dx) override;
  void run_binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void run_reduce(ReduceOp op, const Tensor& x, const Tensor& out) override;
  void run_broadcast_to(const Tensor& x, const Tensor& out) override;
  void run_transpose(const Tensor& x, const Tensor& out, const std::vector<int>& perm) override;
  void run_embedding(const Tensor& table, const Tensor& ids, const Tensor& out) override;
  void run_embedding_block(const Tensor& table, const Tensor& ids, const Tensor& out, std::int64_t first_row,
                           std::int64_t vocab) override;
  void run_embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable) override;
  void run_concat(const std::vector<Tensor>& inputs, const Tensor& out, int axis) override;
  void run_slice(const Tensor& x, const Tensor& out, int axis, std::int64_t start) override;
  void run_one_hot(const Tensor& ids, const Tensor& out) override;
  void run_cast(const Tensor& x, const Tensor& out) override;
  void run_random_uniform(const Tensor& out, std::uint64_t seed, std::uint64_t offset, float low,
                          float high) override;
  void run_random_normal(const Tensor& out, std::uint64_t seed, std::uint64_t offset, float mean,
                         float stddev) override;
  void run_dropout(const Tensor& x, const Tensor& out, float rate, std::uint64_t seed,
                   std::uint64_t offset) override;
  void run_moving_average(const Tensor& state, const Tensor& value, float momentum) override;
  void run_cache_write(const Tensor& cache, const Tensor& rows, const Tensor& positions) override;
  void run_sgd_update(const Tensor& param, const Tensor& grad, const Tensor& velocity,
                      const SgdArgs& args) override;
  void run_adam_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                       const AdamArgs& args) override;
  void run_sgd_update_by_product(const Tensor& param, const Tensor& a, const Tensor& b, const Tensor& velocity,
                                 const SgdArgs& args) override;
  void run_adam_update_by_product(const Tensor& param, const Tensor& a, const Tensor& b, const Tensor& m,
                                  const Tensor& v, const AdamArgs& args) override;

 private:
  CpuAllocator allocator_;
  int threads_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::unordered_map<int, std::unordered_map<std::string, Primitive>> primitives_;  // by thread share, then key
  std::shared_ptr<Buffer> scratchpad_;
  std::unordered_map<std::string, std::shared_ptr<Buffer>> scratch_buffers_;
  mutable std::mutex packed_b_descs_mutex_;
  mutable std::map<std::pair<std::int64_t, std::int64_t>, dnnl::memory::desc> packed_b_descs_;  // by [rows, cols]
};

// oneDNN data type of a tensor dtype.
dnnl::memory::data_type dnnl_type(DType dtype);
// Dense row-major oneDNN dims of a shape (a scalar becomes {1}).
dnnl::memory::dims dnnl_dims(const Shape& shape);
// Dense row-major descriptor of a tensor of `shape` and `dtype`.
dnnl::memory::desc plain_desc(const Shape& shape, DType dtype);
// Whether oneDNN runs its AVX2 kernels here (a CPU without AVX-512), where
// some of them are slower than another way to the same result.
bool onednn_runs_avx2();
// Whether oneDNN runs its AVX-512 kernels here (avx512_core or later: not
// where DNNL_MAX_CPU_ISA caps it lower) and the CPU runs AVX-512, where some
// products go to its sgemm rather than its matmul primitive (matmul.cpp).
bool onednn_runs_avx512();
// Whether a matmul's GELU (erf form) runs as the product, then
// backends/cpu/gelu.hpp's kernel over it, rather than as oneDNN's post-op:
// where oneDNN runs AVX2. On AVX-512 its post-op is as fast as that pass
// (gelu.hpp). The GELU op and its gradient run on gelu.hpp's kernels on any
// CPU with AVX2.
bool matmul_gelu_in_house();
// Key fragment "f32[2, 3]" for primitive caches.
std::string cache_key(const Tensor& t);

// What every CPU kernel runs under, for the object's lifetime: OpenMP limited
// to the device's `threads` on this thread, and denormals flushed to zero on
// this thread and its OpenMP threads unless switched off (backends/denormals.hpp).
class KernelScope {
 public:
  explicit KernelScope(int threads);
  ~KernelScope();
  KernelScope(const KernelScope&) = delete;
  KernelScope& operator=(const KernelScope&) = delete;

 private:
  KernelScope(int threads, bool flush);

  int previous_threads_;
  DenormalMode denormals_;
};

}  // namespace tessera
