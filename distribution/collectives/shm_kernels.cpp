#include "distribution/collectives/shm_kernels.hpp"

#include "engine/core/dtype.hpp"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#define TESSERA_SHM_X86 1
#endif

namespace tessera {
namespace {

// Portable path: a reduction adds every source's chunk into 64 KiB of f32
// accumulators, which stay in L2 while the sources stream from memory.
constexpr std::int64_t kChunkElems = 16384;
constexpr std::size_t kChunkBytes = 65536;
// Runs shorter than this use ordinary stores even when streaming.
constexpr std::size_t kMinStreamBytes = 4096;
constexpr std::size_t kLine = 64;

std::size_t line_offset(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % kLine; }

// Whether every destination starts at the same offset within a cache line, so
// that one scalar head aligns them all for whole-line streaming stores.
bool same_line_offset(std::span<void* const> dsts) {
  return std::all_of(dsts.begin(), dsts.end(), [&](void* d) { return line_offset(d) == line_offset(dsts[0]); });
}

// ---------------------------------------------------------------------------
// Scalar element access, shared by the heads and tails of every path
// ---------------------------------------------------------------------------

inline float load1(const float* p) { return *p; }
inline float load1(const std::uint16_t* p) { return to_f32(bf16{*p}); }
inline void store1(float* p, float v) { *p = v; }
inline void store1(std::uint16_t* p, float v) { *p = to_bf16(v).bits; }

// The reduction of elements [begin, end), one at a time; the same operations
// in the same order as the vector kernels, so results do not depend on where
// a vector boundary falls.
template <typename T>
void reduce_scalar(std::span<const void* const> srcs, std::span<void* const> dsts, std::int64_t begin,
                   std::int64_t end, bool max, float divisor) {
  for (std::int64_t i = begin; i < end; ++i) {
    float acc = load1(static_cast<const T*>(srcs[0]) + i);
    for (std::size_t k = 1; k < srcs.size(); ++k) {
      const float x = load1(static_cast<const T*>(srcs[k]) + i);
      acc = max ? (x > acc ? x : acc) : acc + x;
    }
    if (divisor != 1.0f) acc /= divisor;
    for (void* d : dsts) store1(static_cast<T*>(d) + i, acc);
  }
}

// ---------------------------------------------------------------------------
// AVX-512: every source and destination advances a few lines at a time
// ---------------------------------------------------------------------------

#ifdef TESSERA_SHM_X86
#define TESSERA_AVX512 __attribute__((target("avx512f")))
// The all-lanes masked forms of the intrinsics: GCC 12's unmasked ones start
// from _mm512_undefined_*, which -Wmaybe-uninitialized flags (GCC bug 105593).
constexpr __mmask16 kAll = 0xffff;

TESSERA_AVX512 inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
TESSERA_AVX512 inline __m512 load16(const std::uint16_t* p) {
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, _mm512_maskz_cvtepu16_epi32(kAll, bits), 16));
}

template <bool Stream>
TESSERA_AVX512 inline void store16(float* p, __m512 v) {
  if constexpr (Stream) _mm512_stream_ps(p, v);
  else _mm512_storeu_ps(p, v);
}
// Round to nearest even, NaN stays a quiet NaN: to_bf16 of engine/core/dtype.hpp.
template <bool Stream>
TESSERA_AVX512 inline void store16(std::uint16_t* p, __m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i high = _mm512_maskz_srli_epi32(kAll, u, 16);
  const __m512i lsb = _mm512_and_si512(high, _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_maskz_srli_epi32(kAll, _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __m512i nan = _mm512_or_si512(high, _mm512_set1_epi32(0x40));
  const __m512i result = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), rounded, nan);
  const __m256i h = _mm512_maskz_cvtepi32_epi16(kAll, result);
  if constexpr (Stream) _mm256_stream_si256(reinterpret_cast<__m256i*>(p), h);
  else _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), h);
}

template <bool Max>
TESSERA_AVX512 inline __m512 combine(__m512 acc, __m512 x) {
  if constexpr (Max) return _mm512_mask_max_ps(acc, kAll, x, acc);  // x > acc ? x : acc, as reduce_scalar
  else return _mm512_add_ps(acc, x);
}

// Elements [begin, end); with Stream, every destination + begin is 64-byte aligned.
template <typename T, bool Max, bool Stream>
TESSERA_AVX512 void reduce_avx512(std::span<const void* const> srcs, std::span<void* const> dsts, std::int64_t begin,
                                  std::int64_t end, float divisor) {
  constexpr std::int64_t W = 16, U = 4;  // 4 vectors: a whole line of every destination, even for bf16
  const __m512 div = _mm512_set1_ps(divisor);
  const bool divide = divisor != 1.0f;
  std::int64_t i = begin;
  for (; i + U * W <= end; i += U * W) {
    __m512 v[U];
    const T* s0 = static_cast<const T*>(srcs[0]) + i;
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) v[u] = load16(s0 + u * W);
    for (std::size_t k = 1; k < srcs.size(); ++k) {
      const T* s = static_cast<const T*>(srcs[k]) + i;
#pragma GCC unroll 4
      for (int u = 0; u < U; ++u) v[u] = combine<Max>(v[u], load16(s + u * W));
    }
    if (divide)
#pragma GCC unroll 4
      for (int u = 0; u < U; ++u) v[u] = _mm512_mask_div_ps(v[u], kAll, v[u], div);
    for (void* dst : dsts) {
      T* d = static_cast<T*>(dst) + i;
#pragma GCC unroll 4
      for (int u = 0; u < U; ++u) store16<Stream>(d + u * W, v[u]);
    }
  }
  for (; i + W <= end; i += W) {
    __m512 v = load16(static_cast<const T*>(srcs[0]) + i);
    for (std::size_t k = 1; k < srcs.size(); ++k) v = combine<Max>(v, load16(static_cast<const T*>(srcs[k]) + i));
    if (divide) v = _mm512_mask_div_ps(v, kAll, v, div);
    for (void* dst : dsts) store16<Stream>(static_cast<T*>(dst) + i, v);
  }
  reduce_scalar<T>(srcs, dsts, i, end, Max, divisor);
}

template <typename T, bool Stream>
void reduce_avx512_op(std::span<const void* const> srcs, std::span<void* const> dsts, std::int64_t begin,
                      std::int64_t end, bool max, float divisor) {
  if (max) reduce_avx512<T, true, Stream>(srcs, dsts, begin, end, divisor);
  else reduce_avx512<T, false, Stream>(srcs, dsts, begin, end, divisor);
}

template <typename T>
void reduce_avx512_aligned(std::span<const void* const> srcs, std::span<void* const> dsts, std::int64_t count,
                           bool max, float divisor, bool stream) {
  const std::size_t offset = line_offset(dsts[0]);
  stream = stream && static_cast<std::size_t>(count) * sizeof(T) >= kMinStreamBytes && offset % sizeof(T) == 0 &&
           same_line_offset(dsts);
  if (!stream) return reduce_avx512_op<T, false>(srcs, dsts, 0, count, max, divisor);
  const auto head = std::min(count, static_cast<std::int64_t>((kLine - offset) % kLine / sizeof(T)));
  reduce_scalar<T>(srcs, dsts, 0, head, max, divisor);
  reduce_avx512_op<T, true>(srcs, dsts, head, count, max, divisor);
}

// Bytes [begin, end) of src into every destination; with Stream, every
// destination + begin is 64-byte aligned.
template <bool Stream>
TESSERA_AVX512 void copy_avx512(const std::byte* src, std::span<void* const> dsts, std::size_t begin,
                                std::size_t end) {
  constexpr std::size_t U = 4;
  std::size_t i = begin;
  for (; i + U * kLine <= end; i += U * kLine) {
    __m512i v[U];
#pragma GCC unroll 4
    for (std::size_t u = 0; u < U; ++u) v[u] = _mm512_loadu_si512(src + i + u * kLine);
    for (void* dst : dsts) {
      std::byte* d = static_cast<std::byte*>(dst) + i;
#pragma GCC unroll 4
      for (std::size_t u = 0; u < U; ++u) {
        if constexpr (Stream) _mm512_stream_si512(reinterpret_cast<__m512i*>(d + u * kLine), v[u]);
        else _mm512_storeu_si512(d + u * kLine, v[u]);
      }
    }
  }
  for (; i + kLine <= end; i += kLine) {
    const __m512i v = _mm512_loadu_si512(src + i);
    for (void* dst : dsts) {
      std::byte* d = static_cast<std::byte*>(dst) + i;
      if constexpr (Stream) _mm512_stream_si512(reinterpret_cast<__m512i*>(d), v);
      else _mm512_storeu_si512(d, v);
    }
  }
  for (void* dst : dsts) std::memcpy(static_cast<std::byte*>(dst) + i, src + i, end - i);
}

#undef TESSERA_AVX512
#endif  // TESSERA_SHM_X86

// ---------------------------------------------------------------------------
// Portable path: chunks of cloned loops, SSE2 streaming copies
// ---------------------------------------------------------------------------

// One destination; with `stream`, bypasses the cache (SSE2 is baseline x86-64).
void copy_bytes(std::byte* dst, const std::byte* src, std::size_t n, bool stream) {
#ifdef TESSERA_SHM_X86
  if (stream && n >= kMinStreamBytes) {
    const std::size_t head = (kLine - line_offset(dst)) % kLine;
    std::memcpy(dst, src, head);
    dst += head, src += head, n -= head;
    // Four 16-byte streaming stores fill one write-combining line.
    for (; n >= kLine; n -= kLine, dst += kLine, src += kLine) {
      const auto* s = reinterpret_cast<const __m128i*>(src);
      auto* d = reinterpret_cast<__m128i*>(dst);
      const __m128i a = _mm_loadu_si128(s), b = _mm_loadu_si128(s + 1), c = _mm_loadu_si128(s + 2),
                    e = _mm_loadu_si128(s + 3);
      _mm_stream_si128(d, a);
      _mm_stream_si128(d + 1, b);
      _mm_stream_si128(d + 2, c);
      _mm_stream_si128(d + 3, e);
    }
  }
#endif
  std::memcpy(dst, src, n);
}

// The element loops, compiled for AVX-512, AVX2 and the baseline (the library
// is built without -march); the loader picks the widest the machine has.
#ifdef TESSERA_SHM_X86
#define TESSERA_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TESSERA_SIMD_CLONES
#endif

TESSERA_SIMD_CLONES void add_f32(float* __restrict acc, const float* __restrict x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) acc[i] += x[i];
}
TESSERA_SIMD_CLONES void max_f32(float* __restrict acc, const float* __restrict x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) acc[i] = x[i] > acc[i] ? x[i] : acc[i];
}
TESSERA_SIMD_CLONES void divide_f32(float* __restrict acc, float d, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) acc[i] /= d;
}
TESSERA_SIMD_CLONES void load_bf16(float* __restrict acc, const std::uint16_t* __restrict x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) acc[i] = load1(x + i);
}
TESSERA_SIMD_CLONES void add_bf16(float* __restrict acc, const std::uint16_t* __restrict x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) acc[i] += load1(x + i);
}
TESSERA_SIMD_CLONES void max_bf16(float* __restrict acc, const std::uint16_t* __restrict x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = load1(x + i);
    acc[i] = v > acc[i] ? v : acc[i];
  }
}
// to_bf16, which has no branch: the loop vectorises.
TESSERA_SIMD_CLONES void store_bf16(std::uint16_t* __restrict y, const float* __restrict acc, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = to_bf16(acc[i]).bits;
}
TESSERA_SIMD_CLONES void add_i32(std::int32_t* __restrict acc, const std::int32_t* __restrict x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) acc[i] += x[i];
}
TESSERA_SIMD_CLONES void max_i32(std::int32_t* __restrict acc, const std::int32_t* __restrict x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) acc[i] = std::max(acc[i], x[i]);
}
TESSERA_SIMD_CLONES void add_i64(std::int64_t* __restrict acc, const std::int64_t* __restrict x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) acc[i] += x[i];
}
TESSERA_SIMD_CLONES void max_i64(std::int64_t* __restrict acc, const std::int64_t* __restrict x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) acc[i] = std::max(acc[i], x[i]);
}

#undef TESSERA_SIMD_CLONES

template <typename T>
const T* at(const void* p, std::size_t off) {
  return reinterpret_cast<const T*>(static_cast<const std::byte*>(p) + off);
}

// Integers: the first source copied into the accumulators, the others added or maxed in.
template <typename T>
const void* accumulate_ints(std::span<const void* const> srcs, std::size_t off, std::int64_t m, bool max, T* acc,
                            void (*add)(T*, const T*, std::int64_t), void (*take_max)(T*, const T*, std::int64_t)) {
  std::memcpy(acc, at<T>(srcs[0], off), static_cast<std::size_t>(m) * sizeof(T));
  for (std::size_t k = 1; k < srcs.size(); ++k) (max ? take_max : add)(acc, at<T>(srcs[k], off), m);
  return acc;
}

// m elements at byte offset `off` of every source, reduced in order; returns
// the result, in the tensor's dtype, inside the scratch.
struct Accumulators {
  float* f32;
  std::int32_t* i32;
  std::int64_t* i64;
  std::uint16_t* bf16;
};

const void* reduce_chunk(std::span<const void* const> srcs, std::size_t off, std::int64_t m, DType dtype, bool max,
                         float divisor, const Accumulators& scratch) {
  switch (dtype) {
    case DType::f32: {
      float* acc = scratch.f32;
      std::memcpy(acc, at<float>(srcs[0], off), static_cast<std::size_t>(m) * sizeof(float));
      for (std::size_t k = 1; k < srcs.size(); ++k) (max ? max_f32 : add_f32)(acc, at<float>(srcs[k], off), m);
      if (divisor != 1.0f) divide_f32(acc, divisor, m);
      return acc;
    }
    case DType::bf16: {
      float* acc = scratch.f32;
      load_bf16(acc, at<std::uint16_t>(srcs[0], off), m);
      for (std::size_t k = 1; k < srcs.size(); ++k)
        (max ? max_bf16 : add_bf16)(acc, at<std::uint16_t>(srcs[k], off), m);
      if (divisor != 1.0f) divide_f32(acc, divisor, m);
      store_bf16(scratch.bf16, acc, m);
      return scratch.bf16;
    }
    case DType::i32: return accumulate_ints<std::int32_t>(srcs, off, m, max, scratch.i32, add_i32, max_i32);
    case DType::i64: return accumulate_ints<std::int64_t>(srcs, off, m, max, scratch.i64, add_i64, max_i64);
  }
  return nullptr;
}

}  // namespace

bool ShmKernels::avx512_available() {
#ifdef TESSERA_SHM_X86
  __builtin_cpu_init();  // in case this runs before the library's own constructors
  return __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

ShmKernels::ShmKernels(bool avx512)
    : avx512_(avx512 && avx512_available()), f32_(kChunkElems), i32_(kChunkElems), i64_(kChunkElems),
      bf16_(kChunkElems) {}

void ShmKernels::reduce(std::span<const void* const> srcs, std::span<void* const> dsts, std::int64_t count,
                        DType dtype, ReduceOp op, bool stream) {
  if (count <= 0 || srcs.empty() || dsts.empty()) return;
  const bool max = op == ReduceOp::max;
  const float divisor = op == ReduceOp::mean ? static_cast<float>(srcs.size()) : 1.0f;
#ifdef TESSERA_SHM_X86
  if (avx512_ && dtype == DType::f32) return reduce_avx512_aligned<float>(srcs, dsts, count, max, divisor, stream);
  if (avx512_ && dtype == DType::bf16)
    return reduce_avx512_aligned<std::uint16_t>(srcs, dsts, count, max, divisor, stream);
#endif
  // Each chunk is read in full from every source before any destination is written (in place).
  const Accumulators scratch{f32_.data(), i32_.data(), i64_.data(), bf16_.data()};
  const std::size_t es = dtype_size(dtype);
  for (std::int64_t done = 0; done < count; done += kChunkElems) {
    const std::int64_t m = std::min(kChunkElems, count - done);
    const std::size_t off = static_cast<std::size_t>(done) * es;
    const auto* result = static_cast<const std::byte*>(reduce_chunk(srcs, off, m, dtype, max, divisor, scratch));
    for (void* d : dsts) copy_bytes(static_cast<std::byte*>(d) + off, result, static_cast<std::size_t>(m) * es, stream);
  }
}

void ShmKernels::copy(const void* src, std::span<void* const> dsts, std::size_t bytes, bool stream) {
  if (bytes == 0 || dsts.empty()) return;
  const auto* s = static_cast<const std::byte*>(src);
#ifdef TESSERA_SHM_X86
  if (avx512_) {
    if (!(stream && bytes >= kMinStreamBytes && same_line_offset(dsts))) return copy_avx512<false>(s, dsts, 0, bytes);
    const std::size_t head = std::min(bytes, (kLine - line_offset(dsts[0])) % kLine);
    for (void* d : dsts) std::memcpy(d, s, head);
    return copy_avx512<true>(s, dsts, head, bytes);
  }
#endif
  // A chunk at a time, so that the source stays in cache across the destinations.
  for (std::size_t done = 0; done < bytes; done += kChunkBytes)
    for (void* d : dsts)
      copy_bytes(static_cast<std::byte*>(d) + done, s + done, std::min(kChunkBytes, bytes - done), stream);
}

void ShmKernels::store_fence() {
#ifdef TESSERA_SHM_X86
  _mm_sfence();
#endif
}

}  // namespace tessera
