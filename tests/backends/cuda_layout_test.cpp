// The CUDA backend's data-movement kernel body (backends/cuda/strided_index.hpp
// and layout.hpp), checked on the host: the StridedCopy of broadcast_to,
// transpose, slice and concat, run over every element, gives the CPU
// backend's bytes for odd sizes, ranks 1-6 and every element size; so does
// the CacheWrite of a KV cache, against the element formula too. The cases
// at the end (test suite "gpu", CUDA builds only) run the kernel.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "backends/cuda/layout.hpp"
#include "backends/registry.hpp"
#include "tests/gpu_test_util.hpp"
#include "tests/test_util.hpp"
#include "tessera_features.hpp"

using namespace tessera;
using namespace tessera::test;

namespace {

Backend& cpu() { return backend_for(Device::cpu(0)); }

const DType kDTypes[] = {DType::f32, DType::bf16, DType::i64};

// A host tensor whose bytes all differ from element to element (so a
// misplaced element shows), of any dtype.
Tensor patterned(const Shape& shape, DType dtype, unsigned seed) {
  Tensor t = Tensor::empty(shape, dtype);
  auto* bytes = static_cast<unsigned char*>(t.raw_data());
  for (std::size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<unsigned char>(i * 31 + seed);
  return t;
}

// In 32-bit index arithmetic where the kernel takes it (every case here).
template <typename Word>
void run_words(const StridedCopy& copy, const Tensor& src, const Tensor& dst) {
  const auto* from = static_cast<const Word*>(src.raw_data());
  auto* to = static_cast<Word*>(dst.raw_data());
  const bool narrow = copy.narrow();
  for (std::int64_t i = 0; i < copy.count; ++i) {
    if (narrow)
      copy.operator()<Word, std::uint32_t>(from, to, i);
    else
      copy(from, to, i);
  }
}

// What the kernel does, on the host: 16-byte words where the copy widens.
void host_copy(const StridedCopy& copy, const Tensor& src, const Tensor& dst) {
  const auto size = static_cast<std::int64_t>(dtype_size(src.dtype()));
  StridedCopy wide;
  if (widen_copy(copy, static_cast<std::int64_t>(sizeof(Words16)) / size, wide)) return run_words<Words16>(wide, src, dst);
  switch (size) {
    case 2: return run_words<std::uint16_t>(copy, src, dst);
    case 4: return run_words<std::uint32_t>(copy, src, dst);
    default: return run_words<std::uint64_t>(copy, src, dst);
  }
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

struct BroadcastCase {
  Shape x, out;
};
const std::vector<BroadcastCase> kBroadcasts = {
    {Shape{}, Shape{7}},           {Shape{1}, Shape{65537}},         {Shape{7}, Shape{3, 7}},
    {Shape{3, 1}, Shape{3, 65537}}, {Shape{2, 1, 3, 1}, Shape{2, 4, 3, 5}},
    {Shape{7, 1}, Shape{2, 7, 3}}, {Shape{1, 1, 1}, Shape{1, 1, 1}}};

const std::vector<Shape> kShapes = {Shape{1},    Shape{7},       Shape{65537},    Shape{3, 7},
                                    Shape{2, 65537}, Shape{7, 1, 5}, Shape{2, 3, 4, 5}};

// Every permutation of rank <= 4, and some of rank 5 and 6.
std::vector<std::vector<int>> permutations(int rank) {
  std::vector<int> perm(static_cast<std::size_t>(rank));
  std::iota(perm.begin(), perm.end(), 0);
  std::vector<std::vector<int>> all;
  do all.push_back(perm);
  while (std::next_permutation(perm.begin(), perm.end()));
  if (rank > 4) {  // every 37th: 3 of 120, 19 of 720
    std::vector<std::vector<int>> some;
    for (std::size_t i = 0; i < all.size(); i += 37) some.push_back(all[i]);
    return some;
  }
  return all;
}

}  // namespace

TEST_CASE("cuda strided index maps flat indices like row-major coordinates") {
  // [2, 3, 4] read transposed (strides of the [4, 3, 2] original's axes 2, 1, 0).
  const StridedIndex index = make_strided_index({2, 3, 4}, {1, 2, 6}, "test");
  for (std::int64_t i = 0; i < 24; ++i) CHECK(index(i) == (i / 12) * 1 + (i / 4 % 3) * 2 + (i % 4) * 6);
  // Contiguous axes merge to one; extent-1 axes drop.
  const StridedIndex plain = make_strided_index({1, 5, 1, 7}, {35, 7, 7, 1}, "test");
  CHECK(plain.rank == 1);
  CHECK(plain(34) == 34);
  CHECK(make_strided_index({1, 1}, {1, 1}, "test").rank == 0);
  // 32-bit arithmetic gives the same offsets while they fit, and is refused past them.
  CHECK(index.narrow(24));
  for (std::int64_t i = 0; i < 24; ++i) CHECK(index.at(static_cast<std::uint32_t>(i)) == index(i));
  const StridedIndex huge = make_strided_index({2, 1 << 20, 1 << 10}, {1, 2 << 10, 2}, "test");  // 2^31 elements
  CHECK(huge.narrow(std::int64_t{1} << 31));
  CHECK_FALSE(huge.narrow((std::int64_t{1} << 32) + 1));  // more flat indices than 32 bits hold
  // Exactly 2^32 elements merge into one axis of extent 2^32: a 32-bit divisor of 0.
  CHECK_FALSE(make_strided_index({std::int64_t{1} << 32}, {1}, "test").narrow(std::int64_t{1} << 32));
  CHECK_FALSE(make_strided_index({2, 3}, {std::int64_t{1} << 32, 1}, "test").narrow(6));  // an offset past 2^32
  // Seven unmergeable axes are more than a kernel takes.
  CHECK_THROWS_AS(make_strided_index({2, 2, 2, 2, 2, 2, 2}, {1, 2, 4, 8, 16, 32, 64}, "test"),
                  UnsupportedError);
}

TEST_CASE("cuda copies widen to 16-byte words only where runs stay contiguous") {
  StridedCopy wide;
  // Attention's head split, [B, T, H, K] -> [B, H, T, K]: runs of K.
  const StridedCopy heads = make_transpose_copy({2, 16, 4, 64}, {0, 2, 1, 3});
  REQUIRE(widen_copy(heads, 4, wide));
  CHECK(wide.count == heads.count / 4);
  CHECK(widen_copy(heads, 8, wide));  // bf16
  CHECK_FALSE(widen_copy(make_transpose_copy({2, 16, 4, 64}, {0, 1, 3, 2}), 4, wide));  // the last axis moves
  CHECK_FALSE(widen_copy(make_transpose_copy({2, 16, 4, 6}, {0, 2, 1, 3}), 4, wide));   // runs of 6
  CHECK_FALSE(widen_copy(make_slice_copy({8, 12}, {8, 6}, 1, 2), 4, wide));              // starts at 2
  CHECK(widen_copy(make_slice_copy({8, 12}, {8, 8}, 1, 4), 4, wide));
  CHECK_FALSE(widen_copy(make_broadcast_copy({12}, {3, 12}), 8, wide));  // 12 is no multiple of 8
  CHECK(widen_copy(make_broadcast_copy({12}, {3, 12}), 4, wide));
}

TEST_CASE("cuda broadcast copy matches the CPU backend's broadcast_to for every element size") {
  for (const BroadcastCase& c : kBroadcasts)
    for (DType dtype : kDTypes) {
      CAPTURE(c.x.str());
      CAPTURE(c.out.str());
      const Tensor x = patterned(c.x, dtype, 3);
      Tensor want = Tensor::empty(c.out, dtype), got = Tensor::empty(c.out, dtype);
      cpu().broadcast_to(x, want);
      host_copy(make_broadcast_copy(c.x.dims(), c.out.dims()), x, got);
      CHECK(same_bytes(got, want));
    }
}

TEST_CASE("cuda transpose copy matches the CPU backend for every permutation up to rank 6") {
  std::vector<Shape> shapes = kShapes;
  shapes.push_back(Shape{2, 3, 1, 5, 4});
  shapes.push_back(Shape{2, 3, 2, 5, 3, 2});
  shapes.push_back(Shape{2, 3, 4, 8});  // widens where the last axis stays: 16-byte words
  for (const Shape& shape : shapes)
    for (const std::vector<int>& perm : permutations(shape.rank()))
      for (DType dtype : kDTypes) {
        CAPTURE(shape.str());
        CAPTURE(perm.size());
        const Tensor x = patterned(shape, dtype, 5);
        const Shape out_shape = transpose_output_shape(shape, perm);
        Tensor want = Tensor::empty(out_shape, dtype), got = Tensor::empty(out_shape, dtype);
        cpu().transpose(x, want, perm);
        host_copy(make_transpose_copy(shape.dims(), perm), x, got);
        CHECK(same_bytes(got, want));
      }
}

TEST_CASE("cuda slice copy matches the CPU backend along every axis") {
  for (const Shape& shape : kShapes)
    for (int axis = 0; axis < shape.rank(); ++axis)
      for (DType dtype : kDTypes) {
        const std::int64_t extent = shape[axis];
        const std::int64_t start = extent / 3, length = std::max<std::int64_t>(1, extent / 2);
        std::vector<std::int64_t> dims = shape.dims();
        dims[static_cast<std::size_t>(axis)] = std::min(length, extent - start);
        const Shape out_shape(dims);
        CAPTURE(shape.str());
        CAPTURE(out_shape.str());
        CAPTURE(axis);
        const Tensor x = patterned(shape, dtype, 7);
        Tensor want = Tensor::empty(out_shape, dtype), got = Tensor::empty(out_shape, dtype);
        cpu().slice(x, want, axis, start);
        host_copy(make_slice_copy(shape.dims(), out_shape.dims(), axis, start), x, got);
        CHECK(same_bytes(got, want));
      }
}

TEST_CASE("cuda concat copies match the CPU backend along every axis") {
  for (const Shape& shape : kShapes)
    for (int axis = 0; axis < shape.rank(); ++axis)
      for (DType dtype : kDTypes) {
        // Three inputs of extents 1, the shape's own, and 2 along the axis.
        std::vector<Tensor> inputs;
        std::int64_t total = 0;
        for (std::int64_t extent : {std::int64_t{1}, shape[axis], std::int64_t{2}}) {
          std::vector<std::int64_t> dims = shape.dims();
          dims[static_cast<std::size_t>(axis)] = extent;
          inputs.push_back(patterned(Shape(dims), dtype, static_cast<unsigned>(11 + total)));
          total += extent;
        }
        std::vector<std::int64_t> out_dims = shape.dims();
        out_dims[static_cast<std::size_t>(axis)] = total;
        const Shape out_shape(out_dims);
        CAPTURE(out_shape.str());
        CAPTURE(axis);
        Tensor want = Tensor::empty(out_shape, dtype), got = Tensor::empty(out_shape, dtype);
        cpu().concat(inputs, want, axis);
        std::int64_t offset = 0;
        for (const Tensor& in : inputs) {
          host_copy(make_concat_copy(in.shape().dims(), out_dims, axis, offset), in, got);
          offset += in.shape()[axis];
        }
        CHECK(same_bytes(got, want));
      }
}

// A KV cache [2, 3, 6, 4] taking T rows at positions {1, 6 - T}: by the
// element formula, the CPU backend and the CUDA body on the host.
TEST_CASE("cache_write puts each sequence's rows at its position, on the CPU and in the cuda body") {
  for (DType dtype : kDTypes)
    for (std::int64_t length : {1, 2, 5}) {
      CAPTURE(length);
      const Shape cache_shape{2, 3, 6, 4};
      const Tensor before = patterned(cache_shape, dtype, 3), rows = patterned({2, 3, length, 4}, dtype, 9);
      const Tensor positions = Tensor::from_vector(std::vector<std::int32_t>{1, static_cast<std::int32_t>(6 - length)}, {2, 1});
      Tensor want = Tensor::empty(cache_shape, dtype), cpu_cache = Tensor::empty(cache_shape, dtype),
             body = Tensor::empty(cache_shape, dtype);
      for (Tensor* t : {&want, &cpu_cache, &body}) std::memcpy(t->raw_data(), before.raw_data(), before.nbytes());
      const std::size_t element = dtype_size(dtype);
      for (std::int64_t b = 0; b < 2; ++b)
        for (std::int64_t h = 0; h < 3; ++h)
          for (std::int64_t t = 0; t < length; ++t)
            for (std::int64_t k = 0; k < 4; ++k) {
              const std::int64_t at = positions.data<std::int32_t>()[b] + t;
              std::memcpy(static_cast<char*>(want.raw_data()) + static_cast<std::size_t>(((b * 3 + h) * 6 + at) * 4 + k) * element,
                          static_cast<const char*>(rows.raw_data()) + static_cast<std::size_t>(((b * 3 + h) * length + t) * 4 + k) * element,
                          element);
            }
      cpu().cache_write(cpu_cache, rows, positions);
      CHECK(same_bytes(cpu_cache, want));
      const CacheWrite write{.heads = 3, .length = length, .capacity = 6, .width = 4, .count = rows.numel()};
      for (std::int64_t i = 0; i < write.count; ++i) {
        if (element == 2) write(static_cast<const std::uint16_t*>(rows.raw_data()), positions.data<std::int32_t>(), static_cast<std::uint16_t*>(body.raw_data()), i);
        else if (element == 4) write(static_cast<const std::uint32_t*>(rows.raw_data()), positions.data<std::int32_t>(), static_cast<std::uint32_t*>(body.raw_data()), i);
        else write(static_cast<const std::uint64_t*>(rows.raw_data()), positions.data<std::int32_t>(), static_cast<std::uint64_t*>(body.raw_data()), i);
      }
      CHECK(same_bytes(body, want));
    }
}

TEST_CASE("cache_write refuses rows past the cache on the CPU and writes nothing") {
  const Tensor rows = patterned({2, 1, 3, 2}, DType::f32, 1);
  Tensor cache = patterned({2, 1, 4, 2}, DType::f32, 2);
  const Tensor before = patterned({2, 1, 4, 2}, DType::f32, 2);
  CHECK_THROWS_WITH_AS(cpu().cache_write(cache, rows, Tensor::from_vector(std::vector<std::int32_t>{0, 2}, {2, 1})),
                       "cache_write: sequence 1 writes 3 rows at position 2 of a cache of 4", ShapeError);
  CHECK(same_bytes(cache, before));
  CHECK_THROWS_AS(cpu().cache_write(cache, patterned({2, 2, 3, 2}, DType::f32, 1), Tensor::from_vector(std::vector<std::int32_t>{0, 0}, {2, 1})),
                  ShapeError);
}

// --- the kernel on a GPU ---------------------------------------------------------

#if TESSERA_HAVE_CUDA

TEST_CASE("cuda backend supports the data-movement ops for every dtype" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  for (OpKind k : {OpKind::broadcast_to, OpKind::transpose, OpKind::slice, OpKind::concat, OpKind::cache_write})
    for (DType dtype : {DType::f32, DType::bf16, DType::i32, DType::i64}) CHECK(gpu().supports(k, dtype));
}

TEST_CASE("cuda layout kernels match the CPU backend: broadcast_to, transpose, slice, concat" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  const Device cuda = Device::cuda(0);
  for (DType dtype : kDTypes) {
    for (const BroadcastCase& c : kBroadcasts) {
      CAPTURE(c.out.str());
      const Tensor x = patterned(c.x, dtype, 3);
      Tensor want = Tensor::empty(c.out, dtype), got = Tensor::empty(c.out, dtype, cuda);
      cpu().broadcast_to(x, want);
      gpu().broadcast_to(to_gpu(x), got);
      CHECK(same_bytes(to_host(got), want));
    }
    for (const Shape& shape : {Shape{65537}, Shape{7, 1, 5}, Shape{2, 3, 4, 5}, Shape{2, 3, 2, 5, 3, 2}})
      for (const std::vector<int>& perm : permutations(shape.rank())) {
        CAPTURE(shape.str());
        const Tensor x = patterned(shape, dtype, 5);
        const Shape out_shape = transpose_output_shape(shape, perm);
        Tensor want = Tensor::empty(out_shape, dtype), got = Tensor::empty(out_shape, dtype, cuda);
        cpu().transpose(x, want, perm);
        gpu().transpose(to_gpu(x), got, perm);
        CHECK(same_bytes(to_host(got), want));
      }
    for (const Shape& shape : kShapes)
      for (int axis = 0; axis < shape.rank(); ++axis) {
        CAPTURE(shape.str());
        CAPTURE(axis);
        const Tensor x = patterned(shape, dtype, 7);
        const Tensor gx = to_gpu(x);
        std::vector<std::int64_t> dims = shape.dims();
        dims[static_cast<std::size_t>(axis)] = 1;
        Tensor want = Tensor::empty(Shape(dims), dtype), got = Tensor::empty(Shape(dims), dtype, cuda);
        cpu().slice(x, want, axis, shape[axis] - 1);
        gpu().slice(gx, got, axis, shape[axis] - 1);
        CHECK(same_bytes(to_host(got), want));
        dims[static_cast<std::size_t>(axis)] = 2 * shape[axis];
        Tensor cwant = Tensor::empty(Shape(dims), dtype), cgot = Tensor::empty(Shape(dims), dtype, cuda);
        cpu().concat({x, x}, cwant, axis);
        gpu().concat({gx, gx}, cgot, axis);
        CHECK(same_bytes(to_host(cgot), cwant));
      }
  }
}

TEST_CASE("cuda cache_write matches the CPU backend" * doctest::test_suite("gpu") * skip_without_gpu()) {
  for (DType dtype : kDTypes) {
    const Tensor cache = patterned({3, 2, 9, 5}, dtype, 4), rows = patterned({3, 2, 2, 5}, dtype, 8);
    const Tensor positions = Tensor::from_vector(std::vector<std::int32_t>{0, 7, 3}, {3, 1});
    const Tensor on_gpu = to_gpu(cache);
    cpu().cache_write(cache, rows, positions);
    gpu().cache_write(on_gpu, to_gpu(rows), to_gpu(positions));
    CHECK(same_bytes(to_host(on_gpu), cache));
  }
}

#endif  // TESSERA_HAVE_CUDA
