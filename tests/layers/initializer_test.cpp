// Block initialisation: a block of a variable drawn on its own equals the
// same slice of the whole variable drawn at once, for every initializer, so a
// device can make its block of a sharded variable without the whole.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "layers/initializer.hpp"

using namespace tessera;

namespace {

// The slice of `whole_values` (row-major, shape `whole`) at `start` with `shape`.
std::vector<float> slice(const Tensor& whole_values, const std::vector<std::int64_t>& start, const Shape& shape) {
  const Shape& whole = whole_values.shape();
  std::vector<float> out;
  std::vector<std::int64_t> index(static_cast<std::size_t>(shape.rank()), 0);
  for (std::int64_t n = 0; n < shape.numel(); ++n) {
    std::int64_t flat = 0;
    for (int d = 0; d < whole.rank(); ++d) flat = flat * whole[d] + start[static_cast<std::size_t>(d)] + index[static_cast<std::size_t>(d)];
    out.push_back(whole_values.data<float>()[flat]);
    for (int d = shape.rank() - 1; d >= 0; --d) {
      if (++index[static_cast<std::size_t>(d)] < shape[d]) break;
      index[static_cast<std::size_t>(d)] = 0;
    }
  }
  return out;
}

std::vector<float> values(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

}  // namespace

TEST_CASE("initializer: a block drawn alone equals the slice of the whole, for every initializer") {
  struct Case {
    Shape whole;
    std::vector<std::int64_t> start;
    Shape block;
  };
  const std::vector<Case> cases = {
      {Shape{6, 10}, {0, 5}, Shape{6, 5}},             // a column-parallel block
      {Shape{6, 10}, {3, 0}, Shape{3, 10}},            // a row-parallel block
      {Shape{6, 10}, {2, 4}, Shape{2, 3}},             // split along both (a 2-D mesh)
      {Shape{3, 3, 4, 8}, {0, 0, 2, 4}, Shape{3, 3, 2, 4}},  // a convolution kernel: fans from the whole
      {Shape{7}, {4}, Shape{3}},                       // a bias block
      {Shape{}, {}, Shape{}},                          // a scalar
  };
  for (int kind = 0; kind <= static_cast<int>(InitializerKind::he_uniform); ++kind) {
    Initializer init;
    init.kind = static_cast<InitializerKind>(kind);
    init.value = 0.25f;
    for (const Case& c : cases) {
      CAPTURE(initializer_name(init));
      CAPTURE(c.whole.str());
      CAPTURE(c.block.str());
      Tensor whole = Tensor::empty(c.whole, DType::f32);
      initialize(init, whole, 1234, 3);
      Tensor block = Tensor::empty(c.block, DType::f32);
      initialize_block(init, c.whole, c.start, block, 1234, 3);
      CHECK(values(block) == slice(whole, c.start, c.block));  // bit for bit
      // And not the values of the block drawn as a variable of its own shape
      // (which would make every block of a random variable the same numbers).
      Tensor alone = Tensor::empty(c.block, DType::f32);
      initialize(init, alone, 1234, 3);
      const bool random = kind >= static_cast<int>(InitializerKind::random_normal);
      const bool at_origin = std::all_of(c.start.begin(), c.start.end(), [](std::int64_t s) { return s == 0; });
      if (random && !at_origin) CHECK(values(alone) != values(block));
    }
  }
}

TEST_CASE("initializer: a block outside its variable, or of another rank, is a ShapeError naming both") {
  Initializer init;
  Tensor block = Tensor::empty(Shape{4, 4}, DType::f32);
  const std::vector<std::int64_t> past_end = {0, 8};
  CHECK_THROWS_WITH_AS(initialize_block(init, Shape{4, 10}, past_end, block, 1, 0),
                       doctest::Contains("lies outside the variable [4, 10]"), ShapeError);
  const std::vector<std::int64_t> one_index = {0};
  CHECK_THROWS_WITH_AS(initialize_block(init, Shape{4, 10}, one_index, block, 1, 0), doctest::Contains("the ranks differ"),
                       ShapeError);
}
