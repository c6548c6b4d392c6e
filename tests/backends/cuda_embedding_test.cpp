// The CUDA backend's cast and embedding kernel bodies (backends/cuda/cast.hpp
// and embedding.hpp), checked on the host: CastElements over every element
// gives the CPU backend's cast bit for bit between f32, bf16, i32 and i64
// (bf16 ties and NaNs, integers past 2^24 included), and the gather, one_hot,
// scatter-add and id check give the CPU backend's embedding, embedding_block,
// one_hot and embedding_backward. The cases at the end (test suite "gpu",
// CUDA builds only) run the kernels.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cast.hpp"
#include "backends/cuda/embedding.hpp"
#include "backends/registry.hpp"
#include "tests/gpu_test_util.hpp"
#include "tests/test_util.hpp"
#include "tessera_features.hpp"

using namespace tessera;
using namespace tessera::test;

namespace {

Backend& cpu() { return backend_for(Device::cpu(0)); }

const DType kCastDTypes[] = {DType::f32, DType::bf16, DType::i32, DType::i64};

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

float bits_to_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// f32 values every conversion reads: bf16 ties (even and odd), values just off
// a tie, subnormals, signed zeros, and the largest finite values.
std::vector<float> in_range_floats() {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -2.75f, 1e-40f, -1e-45f, 3.14159f,
                          65504.0f, 1e9f, -2147483520.0f, 9.2e18f, -9.2e18f, 123456.789f,
                          bits_to_float(0x3f808000u), bits_to_float(0x3f818000u),
                          bits_to_float(0x3f808001u), bits_to_float(0xbf80ffffu),
                          bits_to_float(0x00008000u), bits_to_float(0x007fffffu)};
  std::mt19937 gen(17);
  std::uniform_real_distribution<float> dist(-3e9f, 3e9f);
  for (int i = 0; i < 4096; ++i) v.push_back(dist(gen) / static_cast<float>(1 << (i % 31)));
  return v;
}

// Also NaNs (quiet, signalling, negative, with payloads), infinities, the
// largest finite f32 (rounds to bf16 inf) and random bit patterns: only
// for casts into floats (into integers they are undefined on the CPU).
std::vector<float> special_floats() {
  std::vector<float> v = in_range_floats();
  for (std::uint32_t u : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fbfffffu,
                          0x7f808000u, 0x7f800000u, 0xff800000u, 0x7f7fffffu, 0xff7fffffu,
                          0x7f7f8000u, 0x7f7f7fffu})
    v.push_back(bits_to_float(u));
  std::mt19937 gen(23);
  for (int i = 0; i < 65536; ++i) v.push_back(bits_to_float(static_cast<std::uint32_t>(gen())));
  return v;
}

std::vector<std::int64_t> integers() {
  const std::int64_t lo = std::numeric_limits<std::int64_t>::min(),
                     hi = std::numeric_limits<std::int64_t>::max();
  std::vector<std::int64_t> v = {0, 1, -1, 255, -256, (1 << 24) + 1, (1 << 24) + (1 << 16) + 1,
                                 -((1 << 24) + 3), std::int64_t{1} << 31,
                                 (std::int64_t{1} << 60) + (std::int64_t{1} << 36) + 1,
                                 (std::int64_t{1} << 60) + (std::int64_t{1} << 37), lo, hi, lo + 1,
                                 2147483647, -2147483648LL, 4294967297LL};
  std::mt19937_64 gen(29);
  for (int i = 0; i < 4096; ++i) v.push_back(static_cast<std::int64_t>(gen() >> (i % 63)) * (i % 2 ? 1 : -1));
  return v;
}

// A host tensor of `dtype` holding `values` (read as f32 or i64), converted by
// the CPU backend's own cast.
Tensor from_floats(const std::vector<float>& values, DType dtype) {
  const Tensor f = Tensor::from_vector(values, Shape{static_cast<std::int64_t>(values.size())});
  if (dtype == DType::f32) return f;
  Tensor t = Tensor::empty(f.shape(), dtype);
  cpu().cast(f, t);
  return t;
}

Tensor from_integers(const std::vector<std::int64_t>& values, DType dtype) {
  const Tensor i = Tensor::from_vector(values, Shape{static_cast<std::int64_t>(values.size())});
  if (dtype == DType::i64) return i;
  Tensor t = Tensor::empty(i.shape(), dtype);
  cpu().cast(i, t);
  return t;
}

// The sources of a cast from `from` into `to`: every dtype's values where
// defined.
// Floats include NaN, infinities and values past every integer's range:
// both backends saturate those (float_to_integer.hpp).
std::vector<Tensor> cast_sources(DType from, DType) {
  if (from == DType::f32 || from == DType::bf16) return {from_floats(special_floats(), from)};
  return {from_integers(integers(), from)};
}

void host_cast(const Tensor& x, const Tensor& out) {
  const CastElements cast{x.dtype(), out.dtype()};
  for (std::int64_t i = 0; i < x.numel(); ++i) cast(x.raw_data(), out.raw_data(), i);
}

// A host tensor whose bytes all differ from element to element.
Tensor patterned(const Shape& shape, DType dtype, unsigned seed) {
  Tensor t = Tensor::empty(shape, dtype);
  auto* bytes = static_cast<unsigned char*>(t.raw_data());
  for (std::size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<unsigned char>(i * 31 + seed);
  return t;
}

Tensor ids_tensor(const std::vector<std::int64_t>& ids, const Shape& shape, DType dtype) {
  return from_integers(ids, dtype).reshape(shape);
}

template <typename Word>
void host_gather_words(const EmbeddingGather& g, const Tensor& table, const Tensor& ids, const Tensor& out) {
  auto run = [&](const auto* id) {
    for (std::int64_t i = 0; i < g.count; ++i)
      g(static_cast<const Word*>(table.raw_data()), id, static_cast<Word*>(out.raw_data()), i);
  };
  if (ids.dtype() == DType::i32) run(static_cast<const std::int32_t*>(ids.raw_data()));
  else run(static_cast<const std::int64_t*>(ids.raw_data()));
}

void host_gather(const EmbeddingGather& g, const Tensor& table, const Tensor& ids, const Tensor& out) {
  switch (dtype_size(table.dtype())) {
    case 2: return host_gather_words<std::uint16_t>(g, table, ids, out);
    case 4: return host_gather_words<std::uint32_t>(g, table, ids, out);
    default: return host_gather_words<std::uint64_t>(g, table, ids, out);
  }
}

void host_one_hot(const OneHot& o, const Tensor& ids, const Tensor& out) {
  auto run = [&](const auto* id) {
    for (std::int64_t i = 0; i < o.count; ++i) {
      if (out.dtype() == DType::f32)
        o(id, static_cast<std::uint32_t*>(out.raw_data()), std::uint32_t{0x3f800000u}, i);
      else
        o(id, static_cast<std::uint16_t*>(out.raw_data()), std::uint16_t{0x3f80u}, i);
    }
  };
  if (ids.dtype() == DType::i32) run(static_cast<const std::int32_t*>(ids.raw_data()));
  else run(static_cast<const std::int64_t*>(ids.raw_data()));
}

void host_scatter_add(const EmbeddingScatterAdd& s, const Tensor& ids, const Tensor& dout, const Tensor& dtable) {
  auto run = [&](const auto* id) {
    for (std::int64_t i = 0; i < s.count; ++i) s(id, dout.data<float>(), dtable.data<float>(), i);
  };
  if (ids.dtype() == DType::i32) run(static_cast<const std::int32_t*>(ids.raw_data()));
  else run(static_cast<const std::int64_t*>(ids.raw_data()));
}

unsigned long long host_first_bad(const Tensor& ids, std::int64_t vocab) {
  unsigned long long first = kNoBadId;
  const IdCheck check{vocab};
  for (std::int64_t i = 0; i < ids.numel(); ++i) {
    if (ids.dtype() == DType::i32) check(static_cast<const std::int32_t*>(ids.raw_data()), &first, i);
    else check(static_cast<const std::int64_t*>(ids.raw_data()), &first, i);
  }
  return first;
}

// ids with repeats, over a vocabulary of 7.
const std::vector<std::int64_t> kIds = {3, 0, 6, 3, 1, 3, 5, 2, 6, 0, 4, 3};
const Shape kIdsShape{3, 4};

std::string shape_error_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const ShapeError& e) {
    return e.what();
  }
  return "(no ShapeError)";
}

}  // namespace

TEST_CASE("cuda cast matches the CPU backend bit for bit between f32, bf16, i32 and i64") {
  for (DType from : kCastDTypes)
    for (DType to : kCastDTypes) {
      if (from == to) continue;  // a copy
      CAPTURE(dtype_name(from));
      CAPTURE(dtype_name(to));
      for (const Tensor& x : cast_sources(from, to)) {
        Tensor want = Tensor::empty(x.shape(), to), got = Tensor::empty(x.shape(), to);
        cpu().cast(x, want);
        host_cast(x, got);
        CHECK(same_bytes(got, want));
      }
    }
  // bf16 rounding, spelled out: a tie goes to even, NaN stays a quiet NaN.
  CHECK(cast_f32_to_bf16(bits_to_float(0x3f808000u)) == 0x3f80u);
  CHECK(cast_f32_to_bf16(bits_to_float(0x3f818000u)) == 0x3f82u);
  CHECK(cast_f32_to_bf16(bits_to_float(0x7f800001u)) == 0x7fc0u);
  // Just above the midpoint of 2^24 and 2^24 + 2^17: up, though a float would hold the midpoint.
  CHECK(to_f32(bf16{cast_integer_to_bf16((1 << 24) + (1 << 16) + 1)}) == 16908288.0f);
}

TEST_CASE("cuda embedding gather matches the CPU backend's embedding and embedding_block") {
  for (DType dtype : {DType::f32, DType::bf16, DType::i64})
    for (DType id_dtype : {DType::i32, DType::i64}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(dtype_name(id_dtype));
      const Tensor ids = ids_tensor(kIds, kIdsShape, id_dtype);
      const Tensor table = patterned(Shape{7, 5}, dtype, 3);
      const Shape out_shape{3, 4, 5};
      Tensor want = Tensor::empty(out_shape, dtype), got = Tensor::empty(out_shape, dtype);
      cpu().embedding(table, ids, want);
      host_gather(EmbeddingGather{5, 0, 7, 60}, table, ids, got);
      CHECK(same_bytes(got, want));
      // Rows [2, 5) of the vocabulary of 7: the other ids give zero rows.
      const Tensor block = patterned(Shape{3, 5}, dtype, 9);
      Tensor bwant = Tensor::empty(out_shape, dtype), bgot = patterned(out_shape, dtype, 1);
      cpu().embedding_block(block, ids, bwant, 2, 7);
      host_gather(EmbeddingGather{5, 2, 3, 60}, block, ids, bgot);
      CHECK(same_bytes(bgot, bwant));
    }
}

TEST_CASE("cuda one_hot matches the CPU backend for f32 and bf16") {
  for (DType dtype : {DType::f32, DType::bf16})
    for (DType id_dtype : {DType::i32, DType::i64}) {
      const Tensor ids = ids_tensor(kIds, kIdsShape, id_dtype);
      const Shape out_shape{3, 4, 7};
      Tensor want = Tensor::empty(out_shape, dtype), got = patterned(out_shape, dtype, 5);
      cpu().one_hot(ids, want);
      host_one_hot(OneHot{7, 84}, ids, got);
      CHECK(same_bytes(got, want));
    }
}

TEST_CASE("cuda embedding scatter-add matches the CPU backend's embedding_backward") {
  for (DType id_dtype : {DType::i32, DType::i64}) {
    const Tensor ids = ids_tensor(kIds, kIdsShape, id_dtype);
    const Tensor dout = random_tensor(Shape{3, 4, 5}, 11);
    Tensor want = random_tensor(Shape{7, 5}, 13), got = random_tensor(Shape{7, 5}, 13);
    cpu().embedding_backward(ids, dout, want);
    host_scatter_add(EmbeddingScatterAdd{5, 60}, ids, dout, got);
    check_close(got, want.to_vector<float>(), 1e-6, 1e-6);
  }
}

TEST_CASE("cuda id check finds the first id outside the vocabulary, as the CPU reports it") {
  for (DType id_dtype : {DType::i32, DType::i64}) {
    std::vector<std::int64_t> bad = kIds;
    bad[9] = -1;
    bad[5] = 7;
    const Tensor ids = ids_tensor(bad, kIdsShape, id_dtype);
    CHECK(host_first_bad(ids, 7) == 5);
    CHECK(host_first_bad(ids, 8) == 9);
    CHECK(host_first_bad(ids_tensor(kIds, kIdsShape, id_dtype), 7) == kNoBadId);
    Tensor out = Tensor::empty(Shape{3, 4, 5}, DType::f32);
    const std::string text = shape_error_text([&] { cpu().embedding(random_tensor(Shape{7, 5}, 1), ids, out); });
    CHECK(text.find("id 7 at position 5") != std::string::npos);
  }
}

// --- the kernels on a GPU ----------------------------------------------------------

#if TESSERA_HAVE_CUDA

TEST_CASE("cuda backend supports cast, embedding (a whole or a split vocabulary), one_hot and embedding_grad" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  for (DType dtype : kCastDTypes) {
    CHECK(gpu().supports(OpKind::cast, dtype));
    CHECK(gpu().supports(OpKind::embedding, dtype));
  }
  CHECK(gpu().supports(OpKind::one_hot, DType::f32));
  CHECK(gpu().supports(OpKind::one_hot, DType::bf16));
  CHECK(gpu().supports(OpKind::embedding_grad, DType::f32));
  CHECK_FALSE(gpu().supports(OpKind::embedding_grad, DType::bf16));
}

TEST_CASE("cuda cast kernel matches the CPU backend bit for bit" * doctest::test_suite("gpu") *
          skip_without_gpu()) {
  for (DType from : kCastDTypes)
    for (DType to : kCastDTypes) {
      CAPTURE(dtype_name(from));
      CAPTURE(dtype_name(to));
      for (const Tensor& source : cast_sources(from, to)) {
        // A multiple of 4 elements (f32 <-> bf16 take 4 a thread) and one less.
        const std::int64_t quads = source.numel() / 4 * 4;
        for (std::int64_t n : {quads, quads - 1}) {
          CAPTURE(n);
          Tensor x = Tensor::empty(Shape{n}, from);
          std::memcpy(x.raw_data(), source.raw_data(), static_cast<std::size_t>(n) * dtype_size(from));
          Tensor want = Tensor::empty(x.shape(), to), got = Tensor::empty(x.shape(), to, Device::cuda(0));
          cpu().cast(x, want);
          gpu().cast(to_gpu(x), got);
          CHECK(same_bytes(to_host(got), want));
        }
      }
    }
}

TEST_CASE("cuda embedding kernels match the CPU backend" * doctest::test_suite("gpu") *
          skip_without_gpu()) {
  const Device cuda = Device::cuda(0);
  for (DType id_dtype : {DType::i32, DType::i64}) {
    CAPTURE(dtype_name(id_dtype));
    const Tensor ids = ids_tensor(kIds, kIdsShape, id_dtype);
    const Tensor gids = to_gpu(ids);
    for (DType dtype : {DType::f32, DType::bf16, DType::i64}) {
      CAPTURE(dtype_name(dtype));
      const Tensor table = patterned(Shape{7, 5}, dtype, 3), block = patterned(Shape{3, 5}, dtype, 9);
      Tensor want = Tensor::empty(Shape{3, 4, 5}, dtype), got = Tensor::empty(Shape{3, 4, 5}, dtype, cuda);
      cpu().embedding(table, ids, want);
      gpu().embedding(to_gpu(table), gids, got);
      CHECK(same_bytes(to_host(got), want));
      cpu().embedding_block(block, ids, want, 2, 7);
      gpu().embedding_block(to_gpu(block), gids, got, 2, 7);
      CHECK(same_bytes(to_host(got), want));
    }
    for (DType dtype : {DType::f32, DType::bf16}) {
      Tensor want = Tensor::empty(Shape{3, 4, 7}, dtype), got = Tensor::empty(Shape{3, 4, 7}, dtype, cuda);
      cpu().one_hot(ids, want);
      gpu().one_hot(gids, got);
      CHECK(same_bytes(to_host(got), want));
    }
    // Many repeats of few rows: atomicAdd's order differs from the CPU's.
    std::vector<std::int64_t> many(4096);
    for (std::size_t i = 0; i < many.size(); ++i) many[i] = static_cast<std::int64_t>(i * 7 % 5);
    const Tensor mids = ids_tensor(many, Shape{64, 64}, id_dtype);
    const Tensor dout = random_tensor(Shape{64, 64, 33}, 11);
    Tensor want = random_tensor(Shape{5, 33}, 13);
    Tensor got = to_gpu(want);
    cpu().embedding_backward(mids, dout, want);
    gpu().embedding_backward(to_gpu(mids), to_gpu(dout), got);
    check_close(to_host(got), want.to_vector<float>(), 1e-4, 1e-4);
  }
}

TEST_CASE("cuda embedding kernels reject ids outside the vocabulary with the CPU's error" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  const Device cuda = Device::cuda(0);
  for (DType id_dtype : {DType::i32, DType::i64}) {
    std::vector<std::int64_t> bad = kIds;
    bad[9] = -1;
    bad[5] = 7;
    const Tensor ids = ids_tensor(bad, kIdsShape, id_dtype), gids = to_gpu(ids);
    const Tensor table = random_tensor(Shape{7, 5}, 1), gtable = to_gpu(table);
    Tensor out = Tensor::empty(Shape{3, 4, 5}, DType::f32);
    Tensor gout = to_gpu(zeros(Shape{3, 4, 5}));
    CHECK(shape_error_text([&] { gpu().embedding(gtable, gids, gout); }) ==
          shape_error_text([&] { cpu().embedding(table, ids, out); }));
    CHECK(shape_error_text([&] { gpu().embedding_block(to_gpu(random_tensor(Shape{3, 5}, 2)), gids, gout, 2, 7); }) ==
          shape_error_text([&] { cpu().embedding_block(random_tensor(Shape{3, 5}, 2), ids, out, 2, 7); }));
    Tensor hot = Tensor::empty(Shape{3, 4, 7}, DType::f32), ghot = Tensor::empty(Shape{3, 4, 7}, DType::f32, cuda);
    CHECK(shape_error_text([&] { gpu().one_hot(gids, ghot); }) == shape_error_text([&] { cpu().one_hot(ids, hot); }));
    Tensor dtable = zeros(Shape{7, 5}), gdtable = to_gpu(dtable);
    const Tensor dout = random_tensor(Shape{3, 4, 5}, 3);
    CHECK(shape_error_text([&] { gpu().embedding_backward(gids, to_gpu(dout), gdtable); }) ==
          shape_error_text([&] { cpu().embedding_backward(ids, dout, dtable); }));
    // Nothing was written.
    CHECK(same_bytes(to_host(gout), zeros(Shape{3, 4, 5})));
    CHECK(same_bytes(to_host(gdtable), zeros(Shape{7, 5})));
  }
}

#endif  // TESSERA_HAVE_CUDA
