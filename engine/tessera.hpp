// Tessera: an engine that trains and runs neural networks, sharded across
// devices. This header is the public interface for embedding the engine.
//
// Today the engine offers its foundation layer: tensors on logical CPU devices
// (and GPUs when built with CUDA), the backend kernels, and a static graph IR
// with reverse-mode autodiff and a planned executor. YAML models, training and
// distribution build on it in coming releases.
//
//   #include <tessera/engine/tessera.hpp>
//   using namespace tessera;
//
//   Graph g;
//   ValueId x = g.input("x", {32, 4});
//   ValueId w = g.variable("dense/kernel", {4, 1});
//   ValueId y = g.input("y", {32, 1});
//   ValueId err = g.sub(g.matmul(x, w), y);
//   ValueId loss = g.reduce(ReduceOp::mean, g.mul(err, err), {0, 1});
//   auto grads = append_gradients(g, loss, {w});
//   ValueId vel = g.variable("dense/kernel/velocity", {4, 1});
//   g.sgd_update(w, grads.at(w), vel, {.learning_rate = 0.1f});
//
//   Executor step(g, {loss}, Device::cpu(0));
//   step.bind(x, xs); step.bind(y, ys); step.bind(w, weights); step.bind(vel, zeros);
//   for (int i = 0; i < 100; ++i) step.run();   // no allocation after the first run
#pragma once

#include "backends/backend.hpp"
#include "backends/registry.hpp"
#include "engine/error.hpp"
#include "engine/graph/autodiff.hpp"
#include "engine/graph/executor.hpp"
#include "engine/graph/graph.hpp"
#include "engine/tensor.hpp"
