// ShmCommunicator: every collective against a reduction or copy computed on
// one thread, over worlds of 2, 4 and 8 threads and over the sub-groups of a
// 2x4 mesh; then timeouts, abort, mismatched calls and accounting.
//
// Values are small integers, so every sum, max and mean (over a power-of-two
// group) is exact in f32 and bf16 and results are compared exactly.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <typeinfo>
#include <vector>

#include <doctest/doctest.h>

#include "distribution/collectives/shm_communicator.hpp"
#include "engine/core/error.hpp"
#include "tests/on_ranks.hpp"

using namespace tessera;
using tessera::test::on_ranks;
using namespace std::chrono_literals;

namespace {

float value(int rank, std::int64_t i) { return static_cast<float>((rank * 7 + i * 3) % 17 - 8); }

void set(const Tensor& t, std::int64_t i, float v) {
  if (t.dtype() == DType::bf16) t.data<bf16>()[i] = to_bf16(v);
  else t.data<float>()[i] = v;
}

float get(const Tensor& t, std::int64_t i) {
  return t.dtype() == DType::bf16 ? to_f32(t.data<bf16>()[i]) : t.data<float>()[i];
}

// `t` filled with rank `rank`'s values.
const Tensor& fill(const Tensor& t, int rank) {
  for (std::int64_t i = 0; i < t.numel(); ++i) set(t, i, value(rank, i));
  return t;
}

Tensor filled(const Shape& shape, DType dtype, int rank) { return fill(Tensor::empty(shape, dtype), rank); }

// "" when t holds `expected`, else the first difference.
template <typename F>
std::string mismatch(const Tensor& t, F expected) {
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    float want = expected(i), got = get(t, i);
    if (got != want)
      return "element " + std::to_string(i) + " of " + t.describe() + ": got " + std::to_string(got) + ", expected " +
             std::to_string(want);
  }
  return "";
}

void check_no_errors(const std::vector<std::string>& errors) {
  for (std::size_t r = 0; r < errors.size(); ++r) CHECK_MESSAGE(errors[r].empty(), "rank " << r << ": " << errors[r]);
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

CommGroup world(int n) {
  CommGroup g;
  for (int r = 0; r < n; ++r) g.ranks.push_back(r);
  g.axes = "batch";
  return g;
}

float reduce(ReduceOp op, int n, std::int64_t i) {
  float acc = value(0, i);
  for (int r = 1; r < n; ++r) acc = op == ReduceOp::max ? std::max(acc, value(r, i)) : acc + value(r, i);
  return op == ReduceOp::mean ? acc / static_cast<float>(n) : acc;
}

std::vector<std::int64_t> unravel(std::int64_t flat, const Shape& shape) {
  std::vector<std::int64_t> index(static_cast<std::size_t>(shape.rank()));
  for (int d = shape.rank() - 1; d >= 0; --d) {
    index[static_cast<std::size_t>(d)] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

std::int64_t ravel(const std::vector<std::int64_t>& index, const Shape& shape) {
  std::int64_t flat = 0;
  for (int d = 0; d < shape.rank(); ++d) flat = flat * shape[d] + index[static_cast<std::size_t>(d)];
  return flat;
}

Shape scaled(Shape shape, int dim, std::int64_t factor) {
  shape[shape.normalize_axis(dim)] *= factor;
  return shape;
}

const std::vector<int> kWorlds = {2, 4, 8};
const std::vector<DType> kFloatTypes = {DType::f32, DType::bf16};
const std::vector<Shape> kFlat = {Shape{1}, Shape{7}, Shape{65537}};

}  // namespace

TEST_CASE("shm communicator: all_reduce sum, mean and max, in place and out of place") {
  for (int n : kWorlds)
    for (DType dtype : kFloatTypes)
      for (const Shape& shape : kFlat)
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max})
          for (bool in_place : {false, true}) {
            CAPTURE(n);
            CAPTURE(dtype_name(dtype));
            CAPTURE(shape.str());
            CAPTURE(name(op));
            CAPTURE(in_place);
            ShmCommunicator comm(n);
            const CommGroup group = world(n);
            std::vector<Tensor> in, out;
            for (int r = 0; r < n; ++r) {
              in.push_back(filled(shape, dtype, r));
              out.push_back(in_place ? in.back() : Tensor::empty(shape, dtype));
            }
            check_no_errors(on_ranks(n, [&](int r) { comm.all_reduce(group, r, in[r], out[r], op); }));
            for (int r = 0; r < n; ++r) {
              std::string m = mismatch(out[r], [&](std::int64_t i) { return reduce(op, n, i); });
              CHECK_MESSAGE(m.empty(), "rank " << r << ": " << m);
            }
          }
}

TEST_CASE("shm communicator: all_gather along dims 0, 1 and last") {
  struct Case {
    Shape in;
    int dim;
    bool in_place;  // `in` is this rank's block of `out` (dim 0 only)
  };
  std::vector<Case> cases;
  for (const Shape& s : kFlat) cases.push_back({s, 0, false}), cases.push_back({s, 0, true});
  for (int dim : {0, 1, -1}) cases.push_back({Shape{3, 5, 7}, dim, false});
  cases.push_back({Shape{3, 5, 7}, 0, true});
  for (int n : kWorlds)
    for (DType dtype : kFloatTypes)
      for (const Case& c : cases) {
        CAPTURE(n);
        CAPTURE(dtype_name(dtype));
        CAPTURE(c.in.str());
        CAPTURE(c.dim);
        CAPTURE(c.in_place);
        ShmCommunicator comm(n);
        const CommGroup group = world(n);
        const Shape out_shape = scaled(c.in, c.dim, n);
        std::vector<Tensor> in, out;
        for (int r = 0; r < n; ++r) {
          out.push_back(Tensor::empty(out_shape, dtype));
          in.push_back(c.in_place ? out.back().rows(r * c.in[0], c.in[0]) : Tensor::empty(c.in, dtype));
          fill(in.back(), r);
        }
        check_no_errors(on_ranks(n, [&](int r) { comm.all_gather(group, r, in[r], out[r], c.dim); }));
        const int d = c.in.normalize_axis(c.dim);
        for (int r = 0; r < n; ++r) {
          std::string m = mismatch(out[r], [&](std::int64_t flat) {
            auto index = unravel(flat, out_shape);
            const auto src = static_cast<int>(index[static_cast<std::size_t>(d)] / c.in[d]);
            index[static_cast<std::size_t>(d)] %= c.in[d];
            return value(src, ravel(index, c.in));
          });
          CHECK_MESSAGE(m.empty(), "rank " << r << ": " << m);
        }
      }
}

TEST_CASE("shm communicator: reduce_scatter along dims 0, 1 and last") {
  struct Case {
    Shape out;  // the input is `out` with dim `dim` n times larger
    int dim;
    bool in_place;  // `out` is this rank's block of `in` (dim 0 only)
  };
  std::vector<Case> cases;
  for (const Shape& s : kFlat) cases.push_back({s, 0, false}), cases.push_back({s, 0, true});
  for (int dim : {0, 1, -1}) cases.push_back({Shape{3, 5, 7}, dim, false});
  for (int n : kWorlds)
    for (DType dtype : kFloatTypes)
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max})
        for (const Case& c : cases) {
          CAPTURE(n);
          CAPTURE(dtype_name(dtype));
          CAPTURE(name(op));
          CAPTURE(c.out.str());
          CAPTURE(c.dim);
          CAPTURE(c.in_place);
          ShmCommunicator comm(n);
          const CommGroup group = world(n);
          const Shape in_shape = scaled(c.out, c.dim, n);
          std::vector<Tensor> in, out;
          for (int r = 0; r < n; ++r) {
            in.push_back(filled(in_shape, dtype, r));
            out.push_back(c.in_place ? in.back().rows(r * c.out[0], c.out[0]) : Tensor::empty(c.out, dtype));
          }
          check_no_errors(on_ranks(n, [&](int r) { comm.reduce_scatter(group, r, in[r], out[r], c.dim, op); }));
          const int d = c.out.normalize_axis(c.dim);
          for (int r = 0; r < n; ++r) {
            std::string m = mismatch(out[r], [&](std::int64_t flat) {
              auto index = unravel(flat, c.out);
              index[static_cast<std::size_t>(d)] += r * c.out[d];
              return reduce(op, n, ravel(index, in_shape));
            });
            CHECK_MESSAGE(m.empty(), "rank " << r << ": " << m);
          }
        }
}

TEST_CASE("shm communicator: broadcast from every root") {
  for (int n : kWorlds)
    for (DType dtype : kFloatTypes)
      for (const Shape& shape : {Shape{1}, Shape{7}, Shape{65537}, Shape{3, 5}})
        for (int root = 0; root < n; ++root) {
          CAPTURE(n);
          CAPTURE(dtype_name(dtype));
          CAPTURE(shape.str());
          CAPTURE(root);
          ShmCommunicator comm(n);
          const CommGroup group = world(n);
          std::vector<Tensor> x;
          for (int r = 0; r < n; ++r) x.push_back(filled(shape, dtype, r));
          check_no_errors(on_ranks(n, [&](int r) { comm.broadcast(group, r, x[r], root); }));
          for (int r = 0; r < n; ++r) {
            std::string m = mismatch(x[r], [&](std::int64_t i) { return value(root, i); });
            CHECK_MESSAGE(m.empty(), "rank " << r << ": " << m);
          }
        }
}

TEST_CASE("shm communicator: all_to_all over every pair of split and concat dims") {
  const std::vector<std::pair<int, int>> dims = {{0, 0}, {0, 1}, {1, 0}, {-1, 0}, {1, -1}, {-1, -1}};
  for (int n : kWorlds)
    for (DType dtype : kFloatTypes)
      for (const auto& pair : dims) {
        const int split = pair.first, concat = pair.second;  // not a structured binding: lambdas capture them
        CAPTURE(n);
        CAPTURE(dtype_name(dtype));
        CAPTURE(split);
        CAPTURE(concat);
        ShmCommunicator comm(n);
        const CommGroup group = world(n);
        const Shape in_shape = scaled(Shape{3, 5, 7}, split, n);
        Shape block = in_shape;
        block[block.normalize_axis(split)] /= n;
        const Shape out_shape = scaled(block, concat, n);
        std::vector<Tensor> in, out;
        for (int r = 0; r < n; ++r) {
          in.push_back(filled(in_shape, dtype, r));
          out.push_back(Tensor::empty(out_shape, dtype));
        }
        check_no_errors(on_ranks(n, [&](int r) { comm.all_to_all(group, r, in[r], out[r], split, concat); }));
        const auto s = static_cast<std::size_t>(in_shape.normalize_axis(split));
        const auto c = static_cast<std::size_t>(in_shape.normalize_axis(concat));
        for (int r = 0; r < n; ++r) {
          // out[r] block j along concat = in[j] block r along split.
          std::string m = mismatch(out[r], [&](std::int64_t flat) {
            auto index = unravel(flat, out_shape);
            const auto j = static_cast<int>(index[c] / block[static_cast<int>(c)]);
            index[c] %= block[static_cast<int>(c)];
            index[s] += r * block[static_cast<int>(s)];
            return value(j, ravel(index, in_shape));
          });
          CHECK_MESSAGE(m.empty(), "rank " << r << ": " << m);
        }
      }
}

TEST_CASE("shm communicator: integer sum and max - and mean of integers is a DTypeError") {
  const int n = 4;
  ShmCommunicator comm(n);
  const CommGroup group = world(n);
  for (DType dtype : {DType::i32, DType::i64}) {
    CAPTURE(dtype_name(dtype));
    auto at = [dtype](const Tensor& t, std::int64_t i) {
      return dtype == DType::i32 ? static_cast<std::int64_t>(t.data<std::int32_t>()[i]) : t.data<std::int64_t>()[i];
    };
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
      std::vector<Tensor> in, out;
      for (int r = 0; r < n; ++r) {
        in.push_back(Tensor::empty({1001}, dtype));
        for (std::int64_t i = 0; i < 1001; ++i) {
          auto v = static_cast<std::int64_t>(value(r, i)) * (std::int64_t{1} << 20);
          if (dtype == DType::i32) in.back().data<std::int32_t>()[i] = static_cast<std::int32_t>(v);
          else in.back().data<std::int64_t>()[i] = v << 20;
        }
        out.push_back(Tensor::empty({1001}, dtype));
      }
      check_no_errors(on_ranks(n, [&](int r) { comm.all_reduce(group, r, in[r], out[r], op); }));
      for (std::int64_t i = 0; i < 1001; ++i) {
        std::int64_t want = at(in[0], i);
        for (int r = 1; r < n; ++r) want = op == ReduceOp::max ? std::max(want, at(in[r], i)) : want + at(in[r], i);
        for (int r = 0; r < n; ++r) REQUIRE(at(out[r], i) == want);
      }
    }
  }
  std::vector<Tensor> x;
  for (int r = 0; r < n; ++r) x.push_back(Tensor::empty({8}, DType::i32));
  auto errors = on_ranks(n, [&](int r) { comm.all_reduce(group, r, x[r], x[r], ReduceOp::mean); });
  for (const auto& e : errors) CHECK(contains(e, "mean of i32 is not supported"));
}

TEST_CASE("shm communicator: large buffers (streaming stores), unaligned lengths") {
  // Large enough that the collective writes more than the streaming threshold.
  const std::int64_t big = (std::int64_t{1} << 21) + 3;
  for (bool in_place : {false, true}) {
    const int n = 2;
    ShmCommunicator comm(n);
    const CommGroup group = world(n);
    std::vector<Tensor> in, out, gathered, scattered;
    for (int r = 0; r < n; ++r) {
      in.push_back(filled({n * big}, DType::f32, r));
      out.push_back(in_place ? in.back() : Tensor::empty({n * big}, DType::f32));
      gathered.push_back(Tensor::empty({n * n * big}, DType::f32));
      scattered.push_back(Tensor::empty({big}, DType::f32));
    }
    // reduce_scatter and all_gather first: all_reduce may overwrite `in` in place.
    check_no_errors(on_ranks(n, [&](int r) {
      comm.reduce_scatter(group, r, in[r], scattered[r], 0);
      comm.all_gather(group, r, in[r], gathered[r], 0);
      comm.all_reduce(group, r, in[r], out[r]);
    }));
    for (int r = 0; r < n; ++r) {
      CHECK(mismatch(out[r], [&](std::int64_t i) { return reduce(ReduceOp::sum, n, i); }) == "");
      CHECK(mismatch(scattered[r], [&](std::int64_t i) { return reduce(ReduceOp::sum, n, r * big + i); }) == "");
      CHECK(mismatch(gathered[r], [&](std::int64_t i) { return value(static_cast<int>(i / (n * big)), i % (n * big)); }) ==
            "");
    }
  }
}

TEST_CASE("shm communicator: the sub-groups of a 2x4 mesh run side by side") {
  // Ranks r = 4 * batch + model; groups along "model" and along "batch".
  const int n = 8;
  ShmCommunicator comm(n);
  auto model_group = [](int r) { return CommGroup{{r / 4 * 4, r / 4 * 4 + 1, r / 4 * 4 + 2, r / 4 * 4 + 3}, "model"}; };
  auto batch_group = [](int r) { return CommGroup{{r % 4, r % 4 + 4}, "batch"}; };
  const CommGroup all = {{0, 1, 2, 3, 4, 5, 6, 7}, "batch,model"};
  const Shape shape{5, 13};
  std::vector<Tensor> x, partial, total, world_total, gathered;
  for (int r = 0; r < n; ++r) {
    x.push_back(filled(shape, DType::f32, r));
    partial.push_back(Tensor::empty(shape, DType::f32));
    total.push_back(Tensor::empty(shape, DType::f32));
    world_total.push_back(Tensor::empty(shape, DType::f32));
    gathered.push_back(Tensor::empty({5, 26}, DType::f32));
  }
  for (int repeat = 0; repeat < 3; ++repeat) {
    check_no_errors(on_ranks(n, [&](int r) {
      const CommGroup model = model_group(r), batch = batch_group(r);
      comm.all_reduce(model, r, x[r], partial[r]);
      comm.all_gather(batch, r, x[r], gathered[r], 1);
      comm.all_reduce(batch, r, partial[r], total[r]);
      comm.all_reduce(all, r, x[r], world_total[r]);
      comm.barrier(model, r);
    }));
    for (int r = 0; r < n; ++r) {
      const int base = r / 4 * 4;
      CHECK(mismatch(partial[r], [&](std::int64_t i) {
              return value(base, i) + value(base + 1, i) + value(base + 2, i) + value(base + 3, i);
            }) == "");
      CHECK(mismatch(total[r], [&](std::int64_t i) { return reduce(ReduceOp::sum, n, i); }) == "");
      CHECK(mismatch(world_total[r], [&](std::int64_t i) { return reduce(ReduceOp::sum, n, i); }) == "");
      CHECK(mismatch(gathered[r], [&](std::int64_t i) {
              const std::int64_t row = i / 26, col = i % 26;
              return value(col < 13 ? r % 4 : r % 4 + 4, row * 13 + col % 13);
            }) == "");
    }
  }
}

TEST_CASE("shm communicator: a group of one copies, in place does nothing") {
  ShmCommunicator comm(2);
  const CommGroup solo{{1}, "model"};
  Tensor a = filled({7}, DType::f32, 3), b = Tensor::empty({7}, DType::f32);
  comm.all_reduce(solo, 1, a, b, ReduceOp::mean);
  CHECK(mismatch(b, [](std::int64_t i) { return value(3, i); }) == "");
  comm.all_reduce(solo, 1, a, a);
  CHECK(mismatch(a, [](std::int64_t i) { return value(3, i); }) == "");
  Tensor g = Tensor::empty({7}, DType::f32);
  comm.all_gather(solo, 1, a, g, 0);
  CHECK(mismatch(g, [](std::int64_t i) { return value(3, i); }) == "");
  comm.all_to_all(solo, 1, a, a, 0, 0);
  comm.broadcast(solo, 1, a, 0);
  comm.barrier(solo, 1);
  CHECK(mismatch(a, [](std::int64_t i) { return value(3, i); }) == "");
  CHECK_THROWS_AS(comm.all_reduce(solo, 0, a, b), Error);  // rank 0 is not a member
}

TEST_CASE("shm communicator: a missing member times out with the collective, axis and rank") {
  ShmCommunicator comm(4);
  comm.set_timeout(100ms);
  const CommGroup group{{0, 1, 2, 3}, "model"};
  std::vector<Tensor> x;
  for (int r = 0; r < 4; ++r) x.push_back(filled({16}, DType::f32, r));
  const auto start = std::chrono::steady_clock::now();
  auto errors = on_ranks(4, [&](int r) {
    if (r != 2) comm.all_reduce(group, r, x[r], x[r]);
  });
  CHECK(std::chrono::steady_clock::now() - start < 2s);
  CHECK(errors[2].empty());
  for (int r : {0, 1, 3}) {
    CAPTURE(errors[r]);
    CHECK(contains(errors[r], "CollectiveError"));
    CHECK(contains(errors[r], "all_reduce over mesh axis 'model' (ranks 0,1,2,3): rank 2 did not arrive within 100 ms"));
  }
  // The group cannot resume: the communicator is aborted.
  CHECK_THROWS_AS(comm.barrier(group, 2), CollectiveError);

  ShmCommunicator two_missing(4);
  two_missing.set_timeout(50ms);
  errors = on_ranks(4, [&](int r) {
    if (r == 0 || r == 2) two_missing.all_gather(group, r, x[r], Tensor::empty({64}, DType::f32), 0);
  });
  CHECK(contains(errors[0], "all_gather over mesh axis 'model' (ranks 0,1,2,3): ranks 1,3 did not arrive within 50 ms"));
}

TEST_CASE("shm communicator: abort wakes the waiting members with the reason") {
  ShmCommunicator comm(4);  // the default timeout (60 s): only abort can end the wait quickly
  const CommGroup group{{0, 1, 2, 3}, "batch,model"};
  std::vector<Tensor> x;
  for (int r = 0; r < 4; ++r) x.push_back(filled({16}, DType::f32, r));
  const auto start = std::chrono::steady_clock::now();
  auto errors = on_ranks(4, [&](int r) {
    if (r == 3) {
      std::this_thread::sleep_for(50ms);
      comm.abort("rank 3 ran out of memory");
      return;
    }
    comm.all_reduce(group, r, x[r], x[r]);
  });
  CHECK(std::chrono::steady_clock::now() - start < 2s);
  for (int r : {0, 1, 2}) {
    CAPTURE(errors[r]);
    CHECK(contains(errors[r], "all_reduce over mesh axes 'batch,model' (ranks 0,1,2,3)"));
    CHECK(contains(errors[r], "rank 3 ran out of memory"));
  }
  try {
    comm.barrier(group, 0);
    FAIL("a call after abort() returned");
  } catch (const CollectiveError& e) {
    CHECK(contains(e.what(), "rank 3 ran out of memory"));
  }
}

TEST_CASE("shm communicator: mismatched calls fail on every member, naming both") {
  ShmCommunicator comm(2);
  const CommGroup group = world(2);
  Tensor a0 = filled({4}, DType::f32, 0), a1 = filled({4}, DType::f32, 1), out0 = Tensor::empty({8}, DType::f32),
         out1 = Tensor::empty({4}, DType::f32);
  auto errors = on_ranks(2, [&](int r) {
    if (r == 0) comm.all_reduce(group, 0, a0, a0);
    else comm.all_gather(group, 1, a1, Tensor::empty({8}, DType::f32), 0);
  });
  for (const auto& e : errors) {
    CAPTURE(e);
    CHECK(contains(e, "CollectiveError"));
    CHECK(contains(e, "rank 0 called all_reduce but rank 1 called all_gather"));
  }

  Tensor b1 = filled({5}, DType::bf16, 1);
  errors = on_ranks(2, [&](int r) { comm.all_reduce(group, r, r == 0 ? a0 : b1, r == 0 ? a0 : b1); });
  for (const auto& e : errors) CHECK(contains(e, "rank 0 passes f32[4] but rank 1 passes bf16[5]"));

  errors = on_ranks(2, [&](int r) { comm.all_reduce(group, r, r == 0 ? a0 : a1, r == 0 ? a0 : a1,
                                                    r == 0 ? ReduceOp::sum : ReduceOp::max); });
  for (const auto& e : errors) CHECK(contains(e, "rank 0 reduces with sum but rank 1 with max"));

  errors = on_ranks(2, [&](int r) { comm.all_gather(group, r, r == 0 ? a0 : a1, r == 0 ? out0 : out1, 0); });
  for (const auto& e : errors) CHECK(contains(e, "rank 1's output is f32[4]; expected f32[8]"));

  // The communicator is still usable.
  check_no_errors(on_ranks(2, [&](int r) { comm.all_reduce(group, r, r == 0 ? a0 : a1, r == 0 ? a0 : a1); }));
  CHECK(mismatch(a1, [](std::int64_t i) { return reduce(ReduceOp::sum, 2, i); }) == "");
}

TEST_CASE("shm communicator: accounting records bus bytes per kind and axis") {
  const int n = 4;
  ShmCommunicator comm(n);
  const CommGroup model{{0, 1, 2, 3}, "model"};
  const std::int64_t bytes = 1000 * 4;
  std::vector<Tensor> x, gathered, scattered, exchanged;
  for (int r = 0; r < n; ++r) {
    x.push_back(filled({1000}, DType::f32, r));
    gathered.push_back(Tensor::empty({4000}, DType::f32));
    scattered.push_back(Tensor::empty({250}, DType::f32));
    exchanged.push_back(Tensor::empty({1000}, DType::f32));
  }
  check_no_errors(on_ranks(n, [&](int r) {
    comm.all_reduce(model, r, x[r], x[r]);
    comm.all_reduce(model, r, x[r], x[r]);
    comm.all_gather(model, r, x[r], gathered[r], 0);
    comm.reduce_scatter(model, r, x[r], scattered[r], 0);
    comm.all_to_all(model, r, x[r], exchanged[r], 0, 0);
    comm.broadcast(model, r, x[r], 1);
    comm.barrier(model, r);
    comm.all_reduce(CommGroup{{r}, "batch"}, r, x[r], x[r]);
  }));
  using K = CollectiveKind;
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    auto stats = comm.accounting().of_rank(r);
    auto at = [&](K kind, const std::string& axes) { return stats.at({kind, axes}); };
    CHECK(at(K::all_reduce, "model").calls == 2);
    CHECK(at(K::all_reduce, "model").bytes == 2 * (2 * (n - 1) * bytes / n));
    CHECK(at(K::all_reduce, "model").seconds > 0);
    CHECK(at(K::all_gather, "model").bytes == (n - 1) * (n * bytes) / n);
    CHECK(at(K::reduce_scatter, "model").bytes == (n - 1) * bytes / n);
    CHECK(at(K::all_to_all, "model").bytes == (n - 1) * bytes / n);
    CHECK(at(K::broadcast, "model").bytes == (r == 1 ? bytes : 0));
    CHECK(at(K::barrier, "model").calls == 1);
    CHECK(at(K::barrier, "model").bytes == 0);
    CHECK(at(K::all_reduce, "batch").calls == 1);
    CHECK(at(K::all_reduce, "batch").bytes == 0);  // a group of one sends nothing
    CHECK(stats.size() == 7);
  }
  auto total = comm.accounting().total();
  CHECK(total.at({K::all_reduce, "model"}).calls == 2 * n);
  CHECK(total.at({K::all_reduce, "model"}).bytes == n * 2 * (2 * (n - 1) * bytes / n));
  CHECK(total.at({K::broadcast, "model"}).bytes == bytes);
  comm.accounting().reset();
  CHECK(comm.accounting().total().empty());
}
