// CostModel: the predicted time of one training step of a partitioned
// program, from its per-device graph: FLOPs over a measured matmul throughput,
// the bytes of memory-bound ops over a measured memory bandwidth, and each
// collective's bus bytes over a measured link bandwidth plus a latency.
//
//   Calibration c = measure_calibration();   // a short probe (cache it: bin/)
//   StepCost cost = predict_step(program, c, threads_per_device);
//   cost.seconds();
//
// Devices that share cores take turns: with D devices of T threads on C
// cores, compute runs D*T/C times slower when D*T > C.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "distribution/spmd_program.hpp"

namespace tessera {

struct Calibration {
  double matmul_gflops_per_thread = 0;  // f32, a 512^3 matmul on one thread
  double memory_gbps_per_thread = 0;    // bytes read + written per second by an elementwise add on one thread
  double link_gbps = 0;                 // shared-memory all_reduce bus bandwidth, 2 ranks, 8 MiB
  double collective_latency_us = 0;     // a 4-byte all_reduce on 2 ranks
  int cores = 1;                        // hardware threads of the machine
};

// Runs the probe (about a second): the CPU backend with one thread, and the
// shared-memory communicator on two threads.
Calibration measure_calibration();

struct StepCost {
  std::int64_t flops = 0;         // per device
  double compute_seconds = 0;     // per device, with core sharing
  double communication_seconds = 0;
  // Bus bytes each device sends, per "kind axes" ("all_reduce batch"): what
  // CollectiveAccounting records for one step, divided by the device count.
  std::map<std::string, std::int64_t> collective_bytes;
  double seconds() const { return compute_seconds + communication_seconds; }
};

StepCost predict_step(const SpmdProgram& program, const Calibration& calibration, int threads_per_device);

// Bus bytes one member sends in a collective of `kind` over `members`
// devices on an operand of `bytes` (the input; all_gather's output).
std::int64_t bus_bytes(OpKind kind, std::int64_t bytes, std::int64_t members);

}  // namespace tessera
