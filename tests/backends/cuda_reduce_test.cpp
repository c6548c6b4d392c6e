// The CUDA backend's reduction kernel bodies (backends/cuda/reduce.hpp),
// checked on the host: the index helper visits every input element once;
// reduce_element run over every output element matches the CPU backend for
// odd sizes (1, 7, 65537 elements), ranks 1-4 and every set of reduced axes;
// the views' plans, walked lane by lane as the kernels split them, match it
// too. The cases at the end (test suite "gpu", CUDA builds only) run the kernels.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backends/cuda/reduce.hpp"
#include "backends/registry.hpp"
#include "tests/gpu_test_util.hpp"
#include "tests/test_util.hpp"
#include "tessera_features.hpp"

using namespace tessera;
using namespace tessera::test;

namespace {

Backend& cpu() { return backend_for(Device::cpu(0)); }

const ReduceOp kReduceOps[] = {ReduceOp::sum, ReduceOp::mean, ReduceOp::max};

// x's shapes: odd sizes, ranks 1-4, extent-1 axes among them.
const std::vector<Shape> kShapes = {Shape{1},       Shape{7},       Shape{65537},
                                    Shape{3, 7},    Shape{7, 1, 5}, Shape{2, 65537},
                                    Shape{3, 5, 7}, Shape{2, 3, 4, 5}, Shape{1, 7, 1, 3}};

// x's shape with the axes in bit set `mask` reduced to 1.
Shape reduced_shape(const Shape& x, unsigned mask) {
  std::vector<std::int64_t> dims = x.dims();
  for (std::size_t i = 0; i < dims.size(); ++i)
    if (mask & (1u << i)) dims[i] = 1;
  return Shape(dims);
}

std::vector<float> host_reduce(ReduceOp op, const Tensor& x, const Shape& out) {
  const ReduceIndex index = make_reduce_index(x.shape().dims(), out.dims());
  std::vector<float> result(static_cast<std::size_t>(out.numel()));
  for (std::int64_t o = 0; o < out.numel(); ++o)
    result[static_cast<std::size_t>(o)] = reduce_element(op, x.data<float>(), index, o);
  return result;
}

// The reduction of a view as plan_reduce splits it: each output's lanes (a
// warp, a chunk's block, a column's row lanes) over their elements, the
// partials then combined in order (the kernels use a fixed tree; any order
// agrees within rounding).
std::vector<float> host_planned_reduce(ReduceOp op, const Tensor& x, const ReduceView& view) {
  const ReducePlan plan = plan_reduce(view);
  std::int64_t chunk = view.count, lanes = 1;
  if (plan.kernel == ReducePlan::warp_per_output) lanes = 32;
  if (plan.kernel == ReducePlan::chunks_then_totals) chunk = plan.chunk, lanes = kReduceChunkThreads;
  if (plan.kernel == ReducePlan::column_tiles) lanes = kReduceColumnRowLanes;
  if (plan.kernel == ReducePlan::column_chunks) chunk = plan.chunk, lanes = kReduceColumnRowLanes;
  std::vector<float> result(static_cast<std::size_t>(view.outer * view.inner));
  for (std::int64_t o = 0; o < view.outer * view.inner; ++o) {
    float total = reduce_identity(op);
    for (std::int64_t begin = 0; begin < view.count; begin += chunk)
      for (std::int64_t lane = 0; lane < lanes; ++lane)
        total = reduce_combine(op, total,
                               reduce_view_partial(op, x.data<float>(), view, o, begin,
                                                   std::min(begin + chunk, view.count), lane, lanes));
    result[static_cast<std::size_t>(o)] = reduce_finish(op, total, view.count);
  }
  return result;
}

}  // namespace

TEST_CASE("cuda reduce index visits every input element exactly once") {
  for (const Shape& x : kShapes) {
    for (unsigned mask = 0; mask < (1u << x.rank()); ++mask) {
      const Shape out = reduced_shape(x, mask);
      CAPTURE(x.str());
      CAPTURE(out.str());
      const ReduceIndex index = make_reduce_index(x.dims(), out.dims());
      REQUIRE(index.count * out.numel() == x.numel());
      std::vector<int> visits(static_cast<std::size_t>(x.numel()), 0);
      for (std::int64_t o = 0; o < out.numel(); ++o)
        for (std::int64_t r = 0; r < index.count; ++r) {
          const std::int64_t at = index.offset(o, r);
          REQUIRE(at >= 0);
          REQUIRE(at < x.numel());
          ++visits[static_cast<std::size_t>(at)];
        }
      bool once = true;
      for (int v : visits) once = once && v == 1;
      CHECK(once);
    }
  }
}

TEST_CASE("cuda reduce_element matches the CPU backend for every op and set of reduced axes") {
  for (const Shape& shape : kShapes) {
    const Tensor x = random_tensor(shape, 41, -2.0f, 2.0f);
    for (unsigned mask = 0; mask < (1u << shape.rank()); ++mask) {
      const Shape out_shape = reduced_shape(shape, mask);
      for (ReduceOp op : kReduceOps) {
        CAPTURE(shape.str());
        CAPTURE(out_shape.str());
        CAPTURE(name(op));
        Tensor out = Tensor::empty(out_shape, DType::f32);
        cpu().reduce(op, x, out);
        // Exact where the CPU runs its own loops (same order); oneDNN, which
        // takes the other patterns, may add in another order.
        const double per_element = 1e-6 * static_cast<double>(shape.numel() / out_shape.numel());
        check_close(host_reduce(op, x, out_shape), out.to_vector<float>(), 1e-5, per_element);
      }
    }
  }
}

TEST_CASE("cuda reduce_element of the CPU loops' patterns is bit-exact") {
  // outer × reduced × inner: rows (last axis), columns (first axis), middle.
  const Tensor x = random_tensor(Shape{5, 7, 65537 / 7 + 1}, 43);
  for (unsigned mask : {1u, 2u, 4u, 6u, 3u})
    for (ReduceOp op : kReduceOps) {
      const Shape out_shape = reduced_shape(x.shape(), mask);
      CAPTURE(out_shape.str());
      CAPTURE(name(op));
      Tensor out = Tensor::empty(out_shape, DType::f32);
      cpu().reduce(op, x, out);
      CHECK(host_reduce(op, x, out_shape) == out.to_vector<float>());
    }
}

TEST_CASE("cuda reduce_partial split among 32 or 256 lanes matches the CPU backend") {
  // The warp and block kernels' arithmetic: each lane's partial, then the
  // partials combined (the kernels combine them in a tree; any order works here).
  for (const Shape& shape : kShapes)
    for (unsigned mask = 0; mask < (1u << shape.rank()); ++mask) {
      const Tensor x = random_tensor(shape, 44, -2.0f, 2.0f);
      const Shape out_shape = reduced_shape(shape, mask);
      const ReduceIndex index = make_reduce_index(shape.dims(), out_shape.dims());
      for (ReduceOp op : kReduceOps)
        for (std::int64_t lanes : {32, 256}) {
          CAPTURE(shape.str());
          CAPTURE(out_shape.str());
          CAPTURE(name(op));
          CAPTURE(lanes);
          std::vector<float> split(static_cast<std::size_t>(out_shape.numel()));
          for (std::int64_t o = 0; o < out_shape.numel(); ++o) {
            float total = reduce_identity(op);
            for (std::int64_t lane = 0; lane < lanes; ++lane)
              total = reduce_combine(op, total, reduce_partial(op, x.data<float>(), index, o, lane, lanes));
            split[static_cast<std::size_t>(o)] = reduce_finish(op, total, index.count);
          }
          Tensor out = Tensor::empty(out_shape, DType::f32);
          cpu().reduce(op, x, out);
          if (op == ReduceOp::max) {
            CHECK(split == out.to_vector<float>());
          } else {
            const double per_element = 1e-6 * static_cast<double>(shape.numel() / out_shape.numel());
            check_close(split, out.to_vector<float>(), 1e-5, per_element);
          }
        }
    }
}

TEST_CASE("cuda reduce view: one run of reduced axes, one lane adds as the CPU loops") {
  // Where the reduced axes are one run, the view covers x and its
  // thread-per-output sum is reduce_element's, bit for bit.
  for (const Shape& shape : kShapes)
    for (unsigned mask = 0; mask < (1u << shape.rank()); ++mask) {
      const Shape out_shape = reduced_shape(shape, mask);
      CAPTURE(shape.str());
      CAPTURE(out_shape.str());
      const auto view = make_reduce_view(shape.dims(), out_shape.dims());
      if (!view) continue;
      const ReduceIndex index = make_reduce_index(shape.dims(), out_shape.dims());
      REQUIRE(view->outer * view->count * view->inner == shape.numel());
      REQUIRE(view->count == index.count);
      const Tensor x = random_tensor(shape, 45, -2.0f, 2.0f);
      for (ReduceOp op : kReduceOps)
        for (std::int64_t o = 0; o < out_shape.numel(); ++o)
          REQUIRE(reduce_finish(op, reduce_view_partial(op, x.data<float>(), *view, o, 0, view->count, 0, 1),
                                view->count) == reduce_element(op, x.data<float>(), index, o));
    }
  CHECK_FALSE(make_reduce_view({2, 3, 4}, {1, 3, 1}));  // kept axis between reduced ones
  CHECK_FALSE(make_reduce_view({2, 3, 4, 5}, {1, 3, 1, 5}));
  const auto bias = make_reduce_view({8, 1, 16, 12}, {1, 1, 1, 12});  // extent-1 axes aside
  REQUIRE(bias);
  CHECK(bias->outer == 1);
  CHECK(bias->count == 128);
  CHECK(bias->inner == 12);
}

TEST_CASE("cuda reduce plans, walked lane by lane, match the CPU backend") {
  struct Case {
    Shape x, out;
    ReducePlan::Kernel kernel;
  };
  const std::vector<Case> cases = {
      {{1000, 10}, {1000, 1}, ReducePlan::thread_per_output},     // few elements each
      {{50, 100}, {50, 1}, ReducePlan::warp_per_output},          // rows
      {{3000, 4096}, {3000, 1}, ReducePlan::warp_per_output},     // many rows
      {{2, 70001}, {2, 1}, ReducePlan::chunks_then_totals},       // a norm of each of two
      {{300, 1000}, {1, 1}, ReducePlan::chunks_then_totals},      // a loss
      {{100, 40}, {1, 40}, ReducePlan::column_tiles},             // a bias gradient
      {{6, 300, 33}, {6, 1, 33}, ReducePlan::column_tiles},       // a middle axis
      {{8, 1024, 768}, {1, 1, 768}, ReducePlan::column_chunks},   // gpt_125m's bias gradient: 24 tiles
      {{4100, 40}, {1, 40}, ReducePlan::column_chunks},           // 2 tiles, a short last chunk
      {{6, 1500, 33}, {6, 1, 33}, ReducePlan::column_chunks},     // a middle axis, long
      {{40, 70000}, {1, 70000}, ReducePlan::thread_per_output}};  // columns filling the GPU
  for (const Case& c : cases) {
    const auto view = make_reduce_view(c.x.dims(), c.out.dims());
    REQUIRE(view);
    const ReducePlan plan = plan_reduce(*view);
    CAPTURE(c.x.str());
    CAPTURE(c.out.str());
    CHECK(plan.kernel == c.kernel);
    if (plan.kernel == ReducePlan::chunks_then_totals || plan.kernel == ReducePlan::column_chunks) {
      CHECK(plan.chunks > 1);
      CHECK(plan.chunk * plan.chunks >= view->count);
      CHECK(plan.chunk * (plan.chunks - 1) < view->count);  // no empty chunk
      CHECK(plan.chunks * view->outer * view->inner <= kReduceScratchFloats);
    }
    if (plan.kernel == ReducePlan::column_chunks) {
      CHECK(plan.chunk >= kReduceMinColumnChunk);
      const std::int64_t blocks = plan.chunks * view->outer * ((view->inner + 31) / 32);
      CHECK(blocks <= 2 * kReduceColumnTargetBlocks);
    }
    const Tensor x = random_tensor(c.x, 46, -2.0f, 2.0f);
    for (ReduceOp op : kReduceOps) {
      CAPTURE(name(op));
      Tensor out = Tensor::empty(c.out, DType::f32);
      cpu().reduce(op, x, out);
      const double per_element = 1e-6 * static_cast<double>(view->count);
      check_close(host_planned_reduce(op, x, *view), out.to_vector<float>(), 1e-5, per_element);
    }
  }
}

TEST_CASE("cuda reduce index with more than 6 unmergeable kept axes is an UnsupportedError") {
  std::vector<std::int64_t> x(14, 2), out(14, 2);
  for (std::size_t i = 1; i < out.size(); i += 2) out[i] = 1;  // kept axes never adjacent
  CHECK_THROWS_AS(make_reduce_index(x, out), UnsupportedError);
}

// --- the kernel on a GPU ---------------------------------------------------------

#if TESSERA_HAVE_CUDA

TEST_CASE("cuda backend supports f32 reductions, not bf16 yet" * doctest::test_suite("gpu") *
          skip_without_gpu()) {
  CHECK(gpu().supports(OpKind::reduce, DType::f32));
  CHECK_FALSE(gpu().supports(OpKind::reduce, DType::bf16));
  Tensor x = Tensor::empty({4}, DType::bf16, Device::cuda(0));
  Tensor out = Tensor::empty({1}, DType::bf16, Device::cuda(0));
  CHECK_THROWS_AS(gpu().reduce(ReduceOp::sum, x, out), UnsupportedError);
}

TEST_CASE("cuda reduce kernel matches the CPU backend for every op and set of reduced axes" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  for (const Shape& shape : kShapes) {
    const Tensor x = random_tensor(shape, 42, -2.0f, 2.0f);
    const Tensor gx = to_gpu(x);
    for (unsigned mask = 0; mask < (1u << shape.rank()); ++mask) {
      const Shape out_shape = reduced_shape(shape, mask);
      for (ReduceOp op : kReduceOps) {
        CAPTURE(shape.str());
        CAPTURE(out_shape.str());
        CAPTURE(name(op));
        Tensor out = Tensor::empty(out_shape, DType::f32);
        Tensor gout = Tensor::empty(out_shape, DType::f32, Device::cuda(0));
        cpu().reduce(op, x, out);
        gpu().reduce(op, gx, gout);
        const double per_element = 1e-6 * static_cast<double>(shape.numel() / out_shape.numel());
        check_close(to_host(gout).to_vector<float>(), out.to_vector<float>(), 1e-5, per_element);
      }
    }
  }
}

TEST_CASE("cuda reduce gives the same bits on every run, on the warp and block paths too" *
          doctest::test_suite("gpu") * skip_without_gpu()) {
  // Each plan of a view (reduce.hpp's plan_reduce): many outputs of 4096 (a
  // warp each); columns (a bias gradient's [batch, time, features] over the
  // first two axes; a middle axis); chunks of one output of 2^20 elements and
  // of four of 300000; and an index without a view (a kept middle axis), a
  // block per output.
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3000, 4096}, {3000, 1}}, {{4096, 40}, {1, 40}},     {{8, 1024, 768}, {1, 1, 768}},
      {{6, 5000, 33}, {6, 1, 33}}, {{1024, 1024}, {1, 1}}, {{4, 300000}, {4, 1}},
      {{64, 100, 64}, {1, 100, 1}}};
  for (const auto& c : cases) {
    const Tensor x = random_tensor(c.first, 44, -2.0f, 2.0f);
    const Tensor gx = to_gpu(x);
    for (ReduceOp op : kReduceOps) {
      CAPTURE(c.first.str());
      CAPTURE(name(op));
      Tensor once = Tensor::empty(c.second, DType::f32, Device::cuda(0));
      Tensor twice = Tensor::empty(c.second, DType::f32, Device::cuda(0));
      gpu().reduce(op, gx, once);
      gpu().reduce(op, gx, twice);
      CHECK(to_host(once).to_vector<float>() == to_host(twice).to_vector<float>());
      Tensor out = Tensor::empty(c.second, DType::f32);
      cpu().reduce(op, x, out);
      const double per_element = 1e-6 * static_cast<double>(c.first.numel() / c.second.numel());
      check_close(to_host(once).to_vector<float>(), out.to_vector<float>(), 1e-5, per_element);
    }
  }
}

#endif  // TESSERA_HAVE_CUDA
