// Matmul on oneDNN: transposes are expressed as strides of the memory
// descriptors (no copy), the bias and activation as a fused bias and eltwise
// post-op, alpha as the output scale. One shape family on AVX2 runs against a
// transposed copy of b (transpose_b_first below), GELU (erf) on AVX2 runs
// after the product rather than as its post-op, weight gradients of few
// rows on AVX-512 run through oneDNN's sgemm (weight_gradient_by_sgemm), as
// do plain products against a large b (product_by_sgemm), and
// on AVX2 weight gradients and few rows against N-major weights through a
// GEMM of our own (in_house_product).
#include <immintrin.h>
#include <omp.h>

#include <bit>
#include <string>

#include <oneapi/dnnl/dnnl.h>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/eltwise_algorithm.hpp"
#include "backends/cpu/gelu.hpp"
#include "backends/cpu/parallel_for.hpp"
#include "backends/cpu/sgemm_avx2.hpp"
#include "backends/cpu/transpose_8x8.hpp"
#include "backends/cpu/vector_math.hpp"

namespace tessera {
namespace {

using dnnl::memory;

// Descriptor of an operand of rank `rank` (leading 1s added for broadcasting),
// optionally viewed transposed in its last two axes.
memory::desc operand_desc(const Tensor& t, int rank, bool transposed) {
  memory::dims stored(static_cast<std::size_t>(rank - t.rank()), 1);
  for (auto d : t.shape().dims()) stored.push_back(d);
  memory::dims strides(stored.size());
  memory::dim stride = 1;
  for (std::size_t i = stored.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= stored[i];
  }
  memory::dims logical = stored;
  if (transposed) {
    std::swap(logical[rank - 2], logical[rank - 1]);
    std::swap(strides[rank - 2], strides[rank - 1]);
  }
  return memory::desc(logical, dnnl_type(t.dtype()), strides);
}

// Whether oneDNN has a bf16 matmul for this CPU (2.6: AVX-512 and later).
bool bf16_matmul_native(const dnnl::engine& engine) {
  static const bool native = [&] {
    try {
      memory::desc md({2, 2}, memory::data_type::bf16, memory::format_tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md, md, md), engine);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return native;
}

bool any_bf16(const Tensor& a, const Tensor& b, const Tensor* bias, const Tensor& out) {
  auto is = [](const Tensor& t) { return t.dtype() == DType::bf16; };
  return is(a) || is(b) || is(out) || (bias != nullptr && is(*bias));
}

// Whether a[M, K] @ b[K, N] runs faster as a @ bt^T, bt[N, K] a transposed
// copy of b (the layout of PyTorch's Linear weights); `kept`: the copy is
// made once (weights that do not change, Executor::fix_variables), else on
// every call. oneDNN 2.6's AVX2 sgemm takes few rows (1/M + 1/N >= 0.0038)
// to its no-copy kernel, which is slow on b's rows 4 KiB apart (N a multiple
// of 1024), where its AVX-512 sgemm copies such operands first. On a Zen 1,
// one thread: 128x784x1024 7.84 ms against 5.52 through the transposed view,
// 128x1024x1024 9.46 against 7.63, 64x256x1024 2.31 against 0.90
// (bench/README.md, "Few rows against N-major weights"); from 512 rows both
// forms run alike. A copy per call pays from 64 rows. A kept one pays from
// 32 rows, and from 8 unless a's rows lie 4 KiB apart as well; below 8 rows
// NN is as fast or faster. 1 thread, NN against NT: 8 rows, K = 256: 0.196
// ms and 0.173, K = 784: 0.579 and 0.535, K = 1024: 0.783 and 0.936; 4 rows,
// K = 784: 0.269 and 0.304. A shared weight's rows are a's leading axes.
bool faster_against_bt(const Shape& a, const Shape& b, DType dtype, const MatmulArgs& args, bool kept) {
  if (args.transpose_a || args.transpose_b || a.rank() < 2 || b.rank() != 2 || dtype != DType::f32 ||
      !onednn_runs_avx2())
    return false;
  const std::int64_t m = a.rows(), k = b[0], n = b[1];
  if (n % 1024 != 0 || m >= 512) return false;
  if (!kept) return m >= 64;
  return m >= 32 || (m >= 8 && k % 1024 != 0);
}

// faster_against_bt for a 2-D a, whose b is transposed on every call.
bool transpose_b_first(const Tensor& a, const Tensor& b, const MatmulArgs& args) {
  return a.rank() == 2 && b.dtype() == a.dtype() && faster_against_bt(a.shape(), b.shape(), a.dtype(), args, false);
}

// Rows [r, r + 8) of out[c, r] = in[r, c], in 8x8 blocks of AVX2 registers;
// cols is a multiple of 8 (transpose_b_first takes N a multiple of 1024).
[[gnu::target("avx2")]] void transpose_eight_rows_avx2(const float* in, float* out, std::int64_t rows,
                                                        std::int64_t cols, std::int64_t r) {
  const float* from[8];
  for (int i = 0; i < 8; ++i) from[i] = in + (r + i) * cols;
  for (std::int64_t c = 0; c < cols; c += 8) transpose_8x8(from, c, out + c * rows + r, rows);
}

// out[c, r] = in[r, c] for in[rows, cols], cols a multiple of 8; threads
// split the blocks of 8 rows, the last rows are copied one by one.
// Only called where oneDNN runs its AVX2 sgemm, so the CPU has AVX2. The
// parallel loop calls the AVX2 function rather than being one: Clang does not
// give a target attribute to the function it outlines a parallel region into.
void transpose_f32(const float* in, float* out, std::int64_t rows, std::int64_t cols) {
  const std::int64_t whole_rows = rows / 8 * 8;
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < whole_rows; r += 8) transpose_eight_rows_avx2(in, out, rows, cols, r);
  for (std::int64_t r = whole_rows; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
}

// Whether out = alpha a^T b, a [K, M] and b [K, N] in f32 with nothing
// fused (a dense weight's gradient: the layer's input and its output's
// gradient), runs through oneDNN's sgemm rather than its matmul primitive:
// where oneDNN runs AVX-512 and M <= 512. On a Zen 5 its sgemm ran these
// products 7-72% faster (most at few rows), and from M = 1024 the primitive
// won; on a Zen 4 the two ran alike in the GPT's step (bench/README.md,
// "Weight gradients through sgemm").
bool weight_gradient_by_sgemm(const Tensor& a, const Tensor& b, const Tensor* bias, const Tensor& out,
                              const MatmulArgs& args) {
  static const bool avx512 = onednn_runs_avx512();
  auto f32 = [](const Tensor& t) { return t.dtype() == DType::f32; };
  return avx512 && args.transpose_a && !args.transpose_b && bias == nullptr && args.activation == Activation::none &&
         a.rank() == 2 && b.rank() == 2 && f32(a) && f32(b) && f32(out) && a.shape()[1] <= 512 &&
         a.shape()[0] > 0 && out.numel() > 0;
}

// Whether out = alpha a b (+ bias, then ReLU), a [M, K] and b [K, N] as
// stored, f32, runs through oneDNN's sgemm and one pass for the bias and ReLU
// rather than its matmul primitive with them as post-ops: where oneDNN runs
// AVX-512, b is at least kSgemmLeastB floats and has at least
// kSgemmLeastColumns. The primitive copies b into blocks of its own on every
// call; sgemm reads it in place. On a 2-vCPU Zen 5 (2026-12-07,
// bench_matmul) 1024^3 ran at 86.5% of the peak on two threads against
// 78.3%, 128 x 1024 x 1024 at 83-84% against 74-76%. The primitive stays
// ahead on a b in L2 (1024 x 256 x 256 3% faster), on narrow ones (64 x
// 9216 x 128 10% faster on two threads, 128 x 4096 x 64 25%), on transposed
// operands (sgemm ran 128 x 1024 x 1024^T at half its speed) and with other
// activations (bench/README.md, "Products through sgemm").
constexpr std::int64_t kSgemmLeastB = 256 * 1024;  // 1 MiB of f32, a Zen 5 core's L2
constexpr std::int64_t kSgemmLeastColumns = 256;

bool product_by_sgemm(const Tensor& a, const Tensor& b, const Tensor* bias, const Tensor& out,
                      const MatmulArgs& args) {
  static const bool avx512 = onednn_runs_avx512();
  auto f32 = [](const Tensor& t) { return t.dtype() == DType::f32; };
  return avx512 && !args.transpose_a && !args.transpose_b && a.rank() == 2 && b.rank() == 2 && f32(a) && f32(b) &&
         f32(out) && (bias == nullptr || (f32(*bias) && bias->numel() == b.shape()[1])) &&
         (args.activation == Activation::none || args.activation == Activation::relu) && a.shape()[1] > 0 &&
         out.numel() > 0 && b.numel() >= kSgemmLeastB && b.shape()[1] >= kSgemmLeastColumns;
}

// A row of n floats plus the bias (where given), then ReLU (where asked).
[[gnu::target("avx512f")]] void add_bias_relu_row(float* y, std::int64_t n, const float* bias, bool relu) {
  for (std::int64_t j = 0; j < n; j += 16) {
    const auto lanes = static_cast<__mmask16>(n - j >= 16 ? 0xFFFF : (1u << (n - j)) - 1);
    __m512 x = _mm512_maskz_loadu_ps(lanes, y + j);
    if (bias != nullptr) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(lanes, bias + j));
    // 0 for a NaN (max gives its second operand), as oneDNN's post-op does; the mask form, as
    // GCC 12 warns of the plain one's _mm512_undefined_ps.
    if (relu) x = _mm512_maskz_max_ps(lanes, x, _mm512_setzero_ps());
    _mm512_mask_storeu_ps(y + j, lanes, x);
  }
}

// out[m, n] += bias[n] (where given), then ReLU (where asked).
void add_bias_relu(float* out, std::int64_t m, std::int64_t n, const float* bias, bool relu, int threads) {
  parallel_for(m, threads > 1 && m * n >= 16384,
               [&](std::int64_t row) { add_bias_relu_row(out + row * n, n, bias, relu); });
}

// out = alpha op(a) b through oneDNN's sgemm (row-major), all 2-D f32, op(a)
// a^T where args.transpose_a: the product that weight_gradient_by_sgemm and
// product_by_sgemm take. A failure names the operands.
void sgemm_into(const Tensor& a, const Tensor& b, const Tensor& out, const MatmulArgs& args) {
  const std::int64_t m = out.shape()[0], n = out.shape()[1], k = b.shape()[0];
  const dnnl_status_t status = dnnl_sgemm(args.transpose_a ? 'T' : 'N', 'N', m, n, k, args.alpha, a.data<float>(),
                                          a.shape()[1], b.data<float>(), n, 0.0f, out.data<float>(), n);
  if (status != dnnl_success)
    throw Error("matmul: oneDNN's sgemm failed (status " + std::to_string(status) + ") for a " + a.describe() +
                (args.transpose_a ? "^T" : "") + " x b " + b.describe() + " into " + out.describe());
}

// Whether a 2-D f32 product runs through sgemm_avx2.hpp's GEMM rather than
// oneDNN, where oneDNN runs AVX2: a dense weight's gradient out = alpha a^T
// b (a [K, M], b [K, N], nothing fused), which oneDNN's sgemm reads in place
// (2x faster for the GPT's [1024, 1024]^T x [1024, 256] on a Zen 3,
// bench/README.md "A GEMM of our own on AVX2"); and the products that
// transpose_b_first would run against a transposed copy of b, with a bias and
// ReLU at most, which the GEMM's panels read with no copy.
bool in_house_product(const Tensor& a, const Tensor& b, const Tensor* bias, const Tensor& out, const MatmulArgs& args) {
  static const bool avx2 = onednn_runs_avx2() && vector_isa_runs(VectorIsa::avx2);
  auto f32 = [](const Tensor& t) { return t.dtype() == DType::f32; };
  if (!avx2 || a.rank() != 2 || b.rank() != 2 || !f32(a) || !f32(b) || !f32(out) || out.numel() == 0) return false;
  if (args.transpose_a && !args.transpose_b)
    return bias == nullptr && args.activation == Activation::none;
  const bool epilogue = (bias == nullptr || (f32(*bias) && bias->numel() == b.shape()[1])) &&
                        (args.activation == Activation::none || args.activation == Activation::relu);
  return epilogue && transpose_b_first(a, b, args);
}

}  // namespace

// A constant b is kept transposed where oneDNN's AVX2 sgemm reads it faster
// so (faster_against_bt), and packed where oneDNN's matmul prefers a blocked
// layout of its own (AVX-512: brgemm's 16 x 64 blocks) and runs brgemm on it:
// the primitive then skips its copy of b into that layout on every call. On a
// Zen 5, operands in cache, one / two threads: K = N = 1024 at 1 row 0.145 ->
// 0.056 / 0.128 -> 0.033 ms, 8 rows 0.172 -> 0.086 / 0.167 -> 0.063, 128 rows
// 1.37 -> 1.29 / 0.83 -> 0.69, 1024 rows 11.6 -> 10.8 / 6.45 -> 5.70
// (bench/README.md, "Packed constant weights").
ConstantB CpuBackend::constant_b_form(const Shape& a, const Shape& b, DType dtype, const MatmulArgs& args) const {
  if (faster_against_bt(a, b, dtype, args, /*kept=*/true)) return ConstantB::transposed;
  if (dtype != DType::f32 || args.transpose_a || a.rank() < 2 || b.rank() != 2 || a.rows() == 0 || b.numel() == 0)
    return ConstantB::as_is;
  const std::int64_t k = b[args.transpose_b ? 1 : 0], n = b[args.transpose_b ? 0 : 1];
  if (packed_b_floats(k, n) == 0) return ConstantB::as_is;
  try {  // brgemm for these rows against the pack, not a reference kernel
    const memory::desc a_md({a.rows(), k}, memory::data_type::f32, memory::format_tag::ab);
    const memory::desc out_md({a.rows(), n}, memory::data_type::f32, memory::format_tag::ab);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, packed_b_desc(k, n), out_md), engine_);
    return std::string_view(pd.impl_info_str()).starts_with("brg") ? ConstantB::packed : ConstantB::as_is;
  } catch (const dnnl::error&) {
    return ConstantB::as_is;
  }
}

const memory::desc& CpuBackend::packed_b_desc(std::int64_t rows, std::int64_t cols) const {
  std::lock_guard lock(packed_b_descs_mutex_);
  auto [it, made] = packed_b_descs_.try_emplace({rows, cols});
  if (made) {
    const std::int64_t m = 128;  // the layout does not depend on a's rows (oneDNN 2.6, f32)
    const memory::desc a_md({m, rows}, memory::data_type::f32, memory::format_tag::ab);
    const memory::desc b_md({rows, cols}, memory::data_type::f32, memory::format_tag::any);
    const memory::desc out_md({m, cols}, memory::data_type::f32, memory::format_tag::ab);
    it->second = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, out_md), engine_).weights_desc();
  }
  return it->second;
}

std::int64_t CpuBackend::packed_b_floats(std::int64_t rows, std::int64_t cols) const {
  if (rows <= 0 || cols <= 0) return 0;
  const memory::desc& d = packed_b_desc(rows, cols);
  const bool blocked = d.data.format_kind == dnnl_blocked && d.data.format_desc.blocking.inner_nblks > 0;
  return blocked ? static_cast<std::int64_t>(d.get_size() / sizeof(float)) : 0;
}

void CpuBackend::run_pack_constant_b(const Tensor& b, const MatmulArgs& args, const PackedMatrix& packed) {
  const memory::desc& to = packed_b_desc(packed.rows, packed.cols);
  reorder("matmul pack " + cache_key(b) + (args.transpose_b ? "T" : ""),
          memory(operand_desc(b, 2, args.transpose_b), b), memory(to, packed.data));
}

void CpuBackend::run_matmul_packed(const Tensor& a, const PackedMatrix& b, const Tensor* bias, const Tensor& out,
                                   const MatmulArgs& args) {
  const std::int64_t rows = a.shape().rows();  // a's batch axes: one 2-D product against the shared b
  const Tensor a2 = a.rank() == 2 ? a : a.reshape({rows, b.rows});
  const Tensor out2 = out.rank() == 2 ? out : out.reshape({rows, b.cols});
  const std::string key = "matmul packed " + cache_key(a2) + std::to_string(b.rows) + "x" + std::to_string(b.cols);
  run_onednn_matmul(key, operand_desc(a2, 2, false), a2, packed_b_desc(b.rows, b.cols), b.data, bias, out2, args);
}

void CpuBackend::matmul_widened(const Tensor& a, const Tensor& b, const Tensor* bias, const Tensor& out,
                                const MatmulArgs& args) {
  auto widened = [&](const Tensor& t, const char* role) {
    if (t.dtype() == DType::f32) return t;
    Tensor wide = scratch_tensor(std::string("matmul f32 ") + role, t.shape(), DType::f32);
    run_cast(t, wide);
    return wide;
  };
  const Tensor wide_bias = bias != nullptr ? widened(*bias, "bias") : Tensor();
  const auto product = [&](const Tensor& into) {
    run_matmul(widened(a, "a"), widened(b, "b"), bias != nullptr ? &wide_bias : nullptr, into, args);
  };
  if (out.dtype() == DType::f32) return product(out);
  rounded_from_f32("matmul f32 out", out, product);
}

void CpuBackend::run_matmul(const Tensor& a, const Tensor& b, const Tensor* bias, const Tensor& out,
                            const MatmulArgs& args) {
  // A weight shared over a's batch axes is one 2-D product over all rows
  // (oneDNN's batched kernel with a broadcast weight is slower).
  if (b.rank() == 2 && a.rank() > 2 && !args.transpose_a) {
    std::int64_t k = a.shape()[a.rank() - 1], n = out.shape()[out.rank() - 1], rows = a.shape().rows();
    return run_matmul(a.reshape({rows, k}), b, bias, out.reshape({rows, n}), args);
  }
  // A bf16 out after a bias or activation: the f32 result rounded once, as a
  // cast after an f32 product rounds it (fusion.hpp), the cast's bits.
  if (out.dtype() == DType::bf16 && a.dtype() == DType::bf16 && (bias != nullptr || args.activation != Activation::none))
    return rounded_from_f32("matmul f32 product", out,
                            [&](const Tensor& product) { run_matmul(a, b, bias, product, args); });
  if (any_bf16(a, b, bias, out) && !bf16_matmul_native(engine())) return matmul_widened(a, b, bias, out, args);
  if (args.activation == Activation::gelu_erf && out.dtype() == DType::f32 && matmul_gelu_in_house()) {
    // The product, then GELU in place: faster than oneDNN's post-op on AVX2 (gelu.hpp).
    MatmulArgs product = args;
    product.activation = Activation::none;
    run_matmul(a, b, bias, out, product);
    KernelScope scope(threads());
    return gelu_erf(out.data<float>(), out.data<float>(), out.numel());
  }
  if (in_house_product(a, b, bias, out, args)) {
    const std::int64_t k = a.shape()[args.transpose_a ? 0 : 1], m = a.shape()[args.transpose_a ? 1 : 0];
    const std::int64_t n = b.shape()[1];
    float* scratch = static_cast<float*>(
        scratch_buffer("matmul: sgemm_avx2 panels", sgemm_avx2_scratch_floats(threads()) * sizeof(float)).data());
    KernelScope scope(threads());
    return sgemm_avx2(m, n, k, args.alpha, {a.data<float>(), a.shape()[1], args.transpose_a},
                      {b.data<float>(), n, false}, out.data<float>(), n, scratch, threads(),
                      {.bias = bias != nullptr ? bias->data<float>() : nullptr,
                       .relu = args.activation == Activation::relu});
  }
  if (transpose_b_first(a, b, args)) {
    const std::int64_t k = b.shape()[0], n = b.shape()[1];
    Tensor bt = scratch_tensor("matmul b transposed", {n, k}, DType::f32);
    {
      KernelScope scope(threads());
      transpose_f32(b.data<float>(), bt.data<float>(), k, n);
    }
    MatmulArgs through_bt = args;
    through_bt.transpose_b = true;
    return run_matmul(a, bt, bias, out, through_bt);
  }
  if (product_by_sgemm(a, b, bias, out, args)) {
    KernelScope scope(threads());
    sgemm_into(a, b, out, args);
    if (bias != nullptr || args.activation == Activation::relu)
      add_bias_relu(out.data<float>(), out.shape()[0], out.shape()[1], bias != nullptr ? bias->data<float>() : nullptr,
                    args.activation == Activation::relu, threads());
    return;
  }
  if (weight_gradient_by_sgemm(a, b, bias, out, args)) {
    KernelScope scope(threads());
    return sgemm_into(a, b, out, args);
  }
  const int rank = out.rank();
  const std::string key = "matmul " + cache_key(a) + (args.transpose_a ? "T" : "") + cache_key(b) +
                          (args.transpose_b ? "T" : "");
  run_onednn_matmul(key, operand_desc(a, rank, args.transpose_a), a, operand_desc(b, rank, args.transpose_b), b,
                    bias, out, args);
}

void CpuBackend::run_onednn_matmul(const std::string& operands_key, const memory::desc& a_md, const Tensor& a,
                                   const memory::desc& b_md, const Tensor& b, const Tensor* bias, const Tensor& out,
                                   const MatmulArgs& args) {
  const int rank = out.rank();
  const std::string key = operands_key + (bias ? cache_key(*bias) : "-") + cache_key(out) +
                          std::string(tessera::name(args.activation)) + " " +
                          std::to_string(std::bit_cast<std::uint32_t>(args.alpha));  // exact, unlike %f
  auto out_md = plain_desc(out.shape(), out.dtype());
  memory::dims bias_dims(static_cast<std::size_t>(rank), 1);
  bias_dims.back() = out.shape()[rank - 1];
  auto bias_md = bias ? plain_desc(Shape(bias_dims), bias->dtype()) : memory::desc();
  // oneDNN's output scale would also scale the bias, so with alpha != 1 the
  // bias is added by a binary post-op after the scaling instead.
  bool bias_post_op = bias != nullptr && args.alpha != 1.0f;
  const Primitive& p = primitive(key, [&] {
    auto attr = default_attr();
    dnnl::post_ops ops;
    if (args.alpha != 1.0f) attr.set_output_scales(0, {args.alpha});
    if (bias_post_op) ops.append_binary(dnnl::algorithm::binary_add, bias_md);
    if (args.activation != Activation::none) {
      auto alg = eltwise_algorithm(activation_unary(args.activation));
      ops.append_eltwise(1.0f, alg->algorithm, alg->alpha, alg->beta);
    }
    attr.set_post_ops(ops);
    dnnl::matmul::desc desc = bias && !bias_post_op ? dnnl::matmul::desc(a_md, b_md, bias_md, out_md)
                                                    : dnnl::matmul::desc(a_md, b_md, out_md);
    dnnl::matmul::primitive_desc pd(desc, attr, engine());
    return Primitive{dnnl::matmul(pd), pd};
  });
  PrimitiveArgs margs{{DNNL_ARG_SRC, memory(a_md, a)}, {DNNL_ARG_WEIGHTS, memory(b_md, b)}, {DNNL_ARG_DST, memory(out_md, out)}};
  if (bias_post_op)
    margs.add(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, memory(bias_md, *bias));
  else if (bias)
    margs.add(DNNL_ARG_BIAS, memory(bias_md, *bias));
  execute(p, margs);
}

}  // namespace tessera
