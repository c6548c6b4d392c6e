// Sharded initialisation in a job of several processes: make_trainer's store
// defers its values, each device draws only its block of every variable, and
// no process makes a variable whole, in training or at the end of fit (the
// same losses as one process are checked by cli/mpi_test.sh).
#include <doctest/doctest.h>

#include <cmath>

#include "distribution/collectives/mpi_session.hpp"
#include "engine/run/run_config.hpp"
#include "tests/source_tree.hpp"

namespace tessera {
namespace {

TEST_CASE("make_trainer in a job of several processes: no process holds a whole variable") {
  const ProcessPlacement where = MpiSession::placement();
  if (4 % where.processes != 0) {
    MESSAGE("not run: ", where.processes, " processes cannot share 4 devices");
    return;
  }
  RunConfig run = load_run_config(
      test::source_path("configs/tiny_synthetic.yaml"),
      {"training.epochs=1", "data.train.samples=96",
       "distribution={devices: cpu:4, mesh: {shape: [2, 2], axis_names: [batch, model]}, type: model_parallel, "
       "layout_map: {'dense/kernel': [null, model], 'dense/bias': [model], 'dense_1/kernel': [model, null]}}"});
  VariableStore store;
  std::unique_ptr<Trainer> trainer = make_trainer(run, store);
  CHECK(store.defers_values() == where.multi_process());
  const Dataset data = load_dataset(*run.train_data);
  const std::vector<EpochLog> logs = trainer->fit(data, /*validation=*/nullptr);
  CHECK(std::isfinite(logs.back().train.loss));
  REQUIRE(store.variables().size() == 12);  // 2 Dense layers' kernels and biases, and Adam's m and v of each
  for (const Variable& v : store.variables()) {
    INFO(v.path);
    // One process holds the whole mesh: the end of fit writes the blocks back whole.
    CHECK(v.deferred() == where.multi_process());
    CHECK(v.value.defined() == !where.multi_process());
  }
}

}  // namespace
}  // namespace tessera
