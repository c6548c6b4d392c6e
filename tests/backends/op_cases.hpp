// The op table's cases: one list that covers every op of the graph IR, each
// case a small graph on random leaves (op_cases.cpp). The op table's tests
// run them on every backend, against finite differences and in every dtype
// (ops_test.cpp), and split over devices (distribution/op_sharding_test.cpp).
// A new op is a new case here.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/device.hpp"
#include "engine/core/tensor.hpp"
#include "engine/graph/graph.hpp"
#include "tests/test_util.hpp"

namespace tessera::test {

// `t` (on the CPU) converted to `dtype`.
Tensor cast_to(const Tensor& t, DType dtype);

// A case's graph under construction: leaves get random values, made in f32,
// rounded through `round_to` (so an f32 reference sees a bf16 run's inputs),
// then given the case's dtype.
struct Builder {
  Graph g;
  DType dtype = DType::f32;
  DType round_to = DType::f32;
  std::vector<std::pair<ValueId, Tensor>> leaves;
  std::vector<ValueId> updated;  // variables an update op writes (its result)

  ValueId leaf(const std::string& name, const Shape& shape, unsigned seed, float low = -1.0f, float high = 1.0f,
               bool variable = false) {
    ValueId id = variable ? g.variable(name, shape, dtype) : g.input(name, shape, dtype);
    Tensor value = cast_to(cast_to(random_tensor(shape, seed, low, high), round_to), DType::f32);
    leaves.emplace_back(id, cast_to(value, dtype));
    return id;
  }
  // Distinct values 0.05 apart in a scrambled order, odd multiples of 0.025
  // around 0: a max never has a rival, and relu never meets its kink, within
  // the finite differences' step.
  ValueId spread(const std::string& name, const Shape& shape) {
    const std::int64_t n = shape.numel();
    std::vector<float> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i)
      v[static_cast<std::size_t>(i)] = 0.05f * static_cast<float>((i * 37) % n - n / 2) + 0.025f;
    ValueId id = g.input(name, shape, dtype);
    leaves.emplace_back(id, cast_to(Tensor::from_vector(v, shape), dtype));
    return id;
  }
  ValueId ids(const std::string& name, const Shape& shape, std::vector<std::int32_t> values) {
    ValueId id = g.input(name, shape, DType::i32);
    leaves.emplace_back(id, Tensor::from_vector(values, shape));
    return id;
  }
};

struct OpCase {
  std::string name;
  std::vector<DType> dtypes;  // f32 first
  bool differentiable;
  std::function<ValueId(Builder&)> build;  // returns the result (-1 for an update op: see Builder::updated)
  double grad_h = 1e-2;                    // the finite differences' step
};
std::vector<OpCase> op_cases();

// A built case: its graph, its result and (for differentiable f32 cases) the
// gradient of sum(result * probe) with respect to each floating leaf.
struct Run {
  Builder b;
  ValueId out = -1, probe = -1;
  std::vector<ValueId> grads;
  std::vector<ValueId> outputs;
};
std::unique_ptr<Run> build(const OpCase& c, DType dtype, DType round_to, bool with_grads);

// The probe's values (the seed of the gradients) of a built case, on the CPU.
Tensor probe_value(const Run& r);

// Runs `r` once on `device` (leaves copied there) and returns its outputs,
// then its updated variables, as f32 host vectors.
std::vector<std::vector<float>> run_on(Run& r, Device device);

// Each of `actual` close to the same of `expected`.
void check_same(const std::vector<std::vector<float>>& actual, const std::vector<std::vector<float>>& expected,
                double rtol, double atol);

}  // namespace tessera::test
