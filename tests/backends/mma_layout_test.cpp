// The flash kernels' tensor-core fragment layouts (backends/cuda/mma_layout.hpp),
// checked on the host: ldmatrix and mma.m16n8k16 are emulated lane by lane
// as the PTX ISA defines them, fed through the layout functions in the order
// the kernels (flash_attention_mma.cu, flash_attention_backward_mma.cu) use
// them, and must give a matrix product: S = Q K^T from a row-major key tile,
// then O = S V with S's accumulators as the A operand as they lie and a
// row-major value tile read transposed. Small integers make every sum exact.
#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <vector>

#include "backends/cuda/mma_layout.hpp"

using namespace tessera;

namespace {

constexpr int kLanes = 32;

// A row-major tile of floats standing in for bf16 in shared memory.
struct Tile {
  int rows, cols;
  std::vector<float> values;
  // Integers in [-3, 3] from a hash of (seed, index): no two offsets of a tile alike.
  Tile(int r, int c, std::uint32_t seed) : rows(r), cols(c), values(static_cast<std::size_t>(r * c)) {
    for (std::size_t i = 0; i < values.size(); ++i) {
      std::uint32_t h = static_cast<std::uint32_t>(i) * 2654435761u ^ seed * 40503u;
      h ^= h >> 13;
      h *= 0x5bd1e995u;
      h ^= h >> 15;
      values[i] = static_cast<float>(h % 7) - 3.0f;
    }
  }
  float at(int r, int c) const { return values[static_cast<std::size_t>(r * cols + c)]; }
};

using Pair = std::array<float, 2>;                       // one 32-bit register: two 16-bit elements
using Registers = std::array<std::array<Pair, 4>, kLanes>;  // [lane][register] of an .x4 load
using Accumulators = std::array<std::array<float, 4>, kLanes>;

// ldmatrix.sync.aligned.m8n8.x4(.trans): lane l gives the address of row l % 8
// of matrix l / 8 (`where(l)`, from the tile's element (row0, col0)); lane l
// receives in register i, of matrix i, row l / 4's elements 2 (l % 4) and
// 2 (l % 4) + 1, or with .trans column l / 4's.
Registers ldmatrix(const Tile& tile, int row0, int col0, mma::At (*where)(int), bool transposed) {
  Registers out{};
  for (int i = 0; i < 4; ++i) {
    float matrix[8][8];
    for (int r = 0; r < 8; ++r) {
      const mma::At at = where(8 * i + r);
      for (int c = 0; c < 8; ++c) matrix[r][c] = tile.at(row0 + at.row, col0 + at.col + c);
    }
    for (int lane = 0; lane < kLanes; ++lane) {
      const int g = lane / 4, t = lane % 4;
      out[lane][i] = transposed ? Pair{matrix[2 * t][g], matrix[2 * t + 1][g]} : Pair{matrix[g][2 * t], matrix[g][2 * t + 1]};
    }
  }
  return out;
}

// mma.sync.aligned.m16n8k16.row.col: d += A B. Lane l (g = l / 4, t = l % 4)
// holds A's a0 = (g, 2t..2t+1), a1 = (g + 8, 2t..), a2 = (g, 2t + 8..),
// a3 = (g + 8, 2t + 8..); B's b0 = rows 2t, 2t + 1 of column g, b1 = rows
// 2t + 8, 2t + 9; D's d0, d1 = (g, 2t..2t+1), d2, d3 = (g + 8, 2t..2t+1).
void product(Accumulators& d, const std::array<std::array<Pair, 4>, kLanes>& a, const Registers& b, int b0) {
  float A[16][16], B[16][8];
  for (int lane = 0; lane < kLanes; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int e = 0; e < 2; ++e) {
      A[g][2 * t + e] = a[lane][0][e];
      A[g + 8][2 * t + e] = a[lane][1][e];
      A[g][2 * t + 8 + e] = a[lane][2][e];
      A[g + 8][2 * t + 8 + e] = a[lane][3][e];
      B[2 * t + e][g] = b[lane][b0][e];
      B[2 * t + 8 + e][g] = b[lane][b0 + 1][e];
    }
  }
  for (int lane = 0; lane < kLanes; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int e = 0; e < 4; ++e) {
      const int row = g + e / 2 * 8, col = 2 * t + e % 2;
      for (int k = 0; k < 16; ++k) d[lane][e] += A[row][k] * B[k][col];
    }
  }
}

// Element (row, col) of a b^T (b_rows_are_n: b is [n, k]) or of a b, summed in order.
float reference(const Tile& a, int row, const Tile& b, int col, bool b_rows_are_n) {
  float sum = 0.0f;
  for (int k = 0; k < a.cols; ++k) sum += a.at(row, k) * (b_rows_are_n ? b.at(col, k) : b.at(k, col));
  return sum;
}

// The 16 x 8N tile that N accumulators hold, each element where mma::accumulator says.
template <std::size_t N>
Tile gathered(const std::array<Accumulators, N>& tiles) {
  Tile t(16, static_cast<int>(8 * N), 0);
  for (std::size_t n = 0; n < N; ++n)
    for (int lane = 0; lane < kLanes; ++lane)
      for (int e = 0; e < 4; ++e) {
        const mma::At at = mma::accumulator(lane, e);
        t.values[static_cast<std::size_t>(at.row * t.cols) + 8 * n + static_cast<std::size_t>(at.col)] = tiles[n][lane][e];
      }
  return t;
}

void check_product(const Tile& got, const Tile& a, const Tile& b, bool b_rows_are_n) {
  for (int r = 0; r < got.rows; ++r)
    for (int c = 0; c < got.cols; ++c) {
      CAPTURE(r);
      CAPTURE(c);
      REQUIRE(got.at(r, c) == reference(a, r, b, c, b_rows_are_n));
    }
}

}  // namespace

TEST_CASE("mma fragments: the flash kernels' ldmatrix and mma layouts multiply Q K^T, then P V") {
  constexpr int kWidth = 64, kKeys = 64;  // a head's width, a tile of keys
  const Tile q(16, kWidth, 1), k(kKeys, kWidth, 2), v(kKeys, kWidth, 3);

  // S = Q K^T, as the forward kernel and the backward's times_transposed take it.
  std::array<Accumulators, kKeys / 8> s{};
  for (int i = 0; i < kWidth / 16; ++i) {
    const Registers queries = ldmatrix(q, 0, i * 16, mma::a_operand, false);
    for (int n = 0; n < kKeys / 8; n += 2) {
      const Registers keys = ldmatrix(k, n * 8, i * 16, mma::b_operands_of_rows, false);
      product(s[n], queries, keys, 0);
      product(s[n + 1], queries, keys, 2);
    }
  }
  const Tile scores = gathered(s);
  check_product(scores, q, k, true);

  // O = S V: the accumulators of key columns 2j and 2j + 1 are step j's A operand as they lie
  // (the kernels' pack order), the row-major value tile read transposed is the B operand.
  std::array<Accumulators, kWidth / 8> o{};
  for (int j = 0; j < kKeys / 16; ++j) {
    std::array<std::array<Pair, 4>, kLanes> weights{};
    for (int lane = 0; lane < kLanes; ++lane) {
      weights[lane][0] = {s[2 * j][lane][0], s[2 * j][lane][1]};
      weights[lane][1] = {s[2 * j][lane][2], s[2 * j][lane][3]};
      weights[lane][2] = {s[2 * j + 1][lane][0], s[2 * j + 1][lane][1]};
      weights[lane][3] = {s[2 * j + 1][lane][2], s[2 * j + 1][lane][3]};
    }
    for (int n = 0; n < kWidth / 8; n += 2) {
      const Registers values = ldmatrix(v, j * 16, n * 8, mma::b_operands_of_columns, true);
      product(o[n], weights, values, 0);
      product(o[n + 1], weights, values, 2);
    }
  }
  check_product(gathered(o), scores, v, false);
}

TEST_CASE("mma fragments: each lane's accumulator elements cover a 16 x 8 tile once, two rows per lane") {
  int seen[16][8] = {};
  for (int lane = 0; lane < kLanes; ++lane)
    for (int e = 0; e < 4; ++e) {
      const mma::At at = mma::accumulator(lane, e);
      REQUIRE(at.row >= 0);
      REQUIRE(at.row < 16);
      REQUIRE(at.col >= 0);
      REQUIRE(at.col < 8);
      ++seen[at.row][at.col];
      // Elements 0, 1 share a row, and 2, 3 the row 8 below: the softmax's row statistics.
      CHECK(mma::accumulator(lane, e).row == mma::accumulator(lane, e % 2 == 0 ? e + 1 : e - 1).row);
      CHECK(mma::accumulator(lane, 2).row == mma::accumulator(lane, 0).row + 8);
    }
  for (const auto& row : seen)
    for (int count : row) CHECK(count == 1);
  // A row's four lanes are l ^ 1 and l ^ 2 of each other (the kernels' two shuffles).
  for (int lane = 0; lane < kLanes; ++lane) {
    CHECK(mma::accumulator(lane ^ 1, 0).row == mma::accumulator(lane, 0).row);
    CHECK(mma::accumulator(lane ^ 2, 0).row == mma::accumulator(lane, 0).row);
  }
}
