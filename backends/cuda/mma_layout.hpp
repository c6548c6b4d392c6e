// Which elements each lane of a warp reads and holds for mma.sync's
// 16 x 8 x 16 bf16 product (PTX ISA, "Matrix fragments for mma.m16n8k16"),
// as the flash kernels take their operands with ldmatrix: written once for
// the kernels (mma_fragments.hpp) and for the test that emulates ldmatrix
// and mma on the host (tests/backends/mma_layout_test.cpp). Plain C++.
//
// ldmatrix .x4 reads four 8 x 8 matrices of 16-bit elements; lane l gives the
// address of row l % 8 of matrix l / 8. The functions below say which
// element of a row-major tile (row, column) that row starts at, for the
// three ways the kernels read tiles.
#pragma once

#include "backends/host_device.hpp"

namespace tessera::mma {

struct At {
  int row = 0, col = 0;
};

// A 16 x 16 A operand: matrices (rows 0-7, columns 0-7), (8-15, 0-7),
// (0-7, 8-15), (8-15, 8-15), which are registers a[0] .. a[3].
TESSERA_HOST_DEVICE constexpr At a_operand(int lane) { return {lane % 16, lane / 16 * 8}; }

// Two 16 x 8 B operands, columns n .. n + 7 and n + 8 .. n + 15, from a
// row-major [n, k] tile read as it is (keys by head dimensions for q k^T):
// registers b[0], b[1] of the first, then of the second.
TESSERA_HOST_DEVICE constexpr At b_operands_of_rows(int lane) { return {lane / 16 * 8 + lane % 8, lane / 8 % 2 * 8}; }

// The same from a row-major [k, n] tile read transposed (ldmatrix .trans:
// values by keys for P v).
TESSERA_HOST_DEVICE constexpr At b_operands_of_columns(int lane) {
  return {lane / 8 % 2 * 8 + lane % 8, lane / 16 * 8};
}

// Element e (0 .. 3) of lane l's 16 x 8 f32 accumulator: rows l / 4 and
// l / 4 + 8, columns 2 (l % 4) and 2 (l % 4) + 1.
TESSERA_HOST_DEVICE constexpr At accumulator(int lane, int e) { return {lane / 4 + e / 2 * 8, 2 * (lane % 4) + e % 2}; }

}  // namespace tessera::mma
