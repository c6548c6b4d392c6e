// `tessera bench CONFIG`: sharding configurations side by side, the way
// llama-bench sweeps settings. For each mesh x layout it runs real training
// steps of the config's model on a synthetic batch of training.batch_size and
// prints one row: step time, samples/s, speed-up against one device, peak
// memory and parameter bytes per device, bytes moved per collective kind and
// mesh axis, the communication share of the step, and the cost model's
// predicted step time. The Spearman rank correlation of predicted and measured
// times closes the table.
//
// Timing: every configuration, the one-device baseline among them, is built
// and warmed up first, then timed in --rounds rounds that take each in turn
// (the order rotating), so that the machine's slow and fast minutes fall on
// all alike. A figure is the median over rounds with its min-max; a speed-up
// is worked out round by round. Rows that ran the same sharded program, the
// best row, rows within the best's spread and speed-ups whose spread takes in
// 1x are marked.
//
// Layouts: dp (DataParallel), zero (dp with ZeRO-1 optimizer state), tp
// (AutoTP over `model`, batches over `batch`),
// fsdp (each variable's first divisible dimension split over `batch`: weights
// gathered, gradients scattered, optimizer state split), config (the config's
// own layout_map), auto (whichever of dp, zero, tp and fsdp the cost model predicts
// fastest on that mesh).
//
// `--np 1,2`: each configuration also runs as a job of that many processes
// (mpirun, each process owning its share of the mesh's devices); those rows
// are measured by a child job and say how many bytes crossed between processes.
#pragma once

#include <string>
#include <vector>

namespace tessera {

struct BenchOptions {
  std::string config;
  std::vector<std::string> overrides;
  std::string meshes = "1x8,2x4,4x2,8x1";  // BATCHxMODEL, comma-separated
  std::string layouts = "dp,tp,fsdp";
  std::string devices;                     // cpu:N; default: the largest mesh
  int steps = 10, warmup = 3;
  int rounds = 5;                          // timed rounds, every configuration and one device alternated
  std::string format = "table";            // table | csv | json
  std::string chart;                       // an SVG file to write, if any
  bool recalibrate = false;
  std::string processes = "1";             // --np: process counts, comma-separated
  bool mpi_child = false;                  // this is one process of such a job: JSON rows only
};

// Returns the process exit code; throws Error (ConfigError, ...) on bad input.
int run_sharding_bench(const BenchOptions& options);

}  // namespace tessera
