// Tessera as a library, sharded: data-parallel training of a run config's
// model over cpu:N, in one process or as a job of several (the same program
// under `mpirun -np P`: each process runs its N/P devices). Process 0 prints
// each epoch's loss, which is the same either way.
//
//   data_parallel CONFIG.yaml N
//   mpirun -np 2 data_parallel CONFIG.yaml N
#include <cstdio>
#include <optional>
#include <string>

#include <tessera/backends/registry.hpp>
#include <tessera/distribution/collectives/mpi_session.hpp>
#include <tessera/distribution/distribution.hpp>
#include <tessera/engine/tessera.hpp>

using namespace tessera;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s CONFIG.yaml DEVICES\n", argv[0]);
    return 2;
  }
  std::optional<MpiSession> mpi;  // only when mpirun started us
  if (MpiSession::launched_by_mpirun()) mpi.emplace();
  const ProcessPlacement where = MpiSession::placement();
  try {
    RunConfig run = load_run_config(argv[1], {"training.epochs=3"});
    VariableStore store;
    run.model.build(store, run.training.seed);
    if (!run.train_data) throw ConfigError(std::string(argv[1]) + ": data.train is required");
    Dataset data = load_dataset(*run.train_data);

    // The job's devices, in rank order; this process runs its share of them.
    const int devices = std::stoi(argv[2]);
    set_cpu_device_count(devices, /*threads_per_device=*/1);
    DataParallel distribution(cpu_devices(devices));
    distribution.set_placement(where);
    Trainer trainer(run.model, run.training, store, distribution);
    for (const EpochLog& log : trainer.fit(data, /*validation=*/nullptr))
      if (where.process == 0) std::printf("epoch %lld: loss %.6f\n", static_cast<long long>(log.epoch), log.train.loss);
  } catch (const Error& e) {
    std::fprintf(stderr, "data_parallel: process %d: %s\n", where.process, e.what());
    if (where.multi_process()) MpiSession::abort_job(1);
    return 1;
  }
  return 0;
}
