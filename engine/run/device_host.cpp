// The StepHost of one device: an Executor per step over the store's tensors,
// which it updates in place.
#include "engine/graph/executor.hpp"
#include "engine/run/step_host.hpp"

namespace tessera {
namespace {

class DeviceHost final : public StepHost {
 public:
  DeviceHost(VariableStore& store, Device device) : store_(store), device_(device) {}

  std::unique_ptr<StepRunner> runner(const TracedStep& step) override {
    auto executor = std::make_unique<Executor>(step.graph, step.outputs, device_);
    for (const auto& [path, id] : step.variables) executor->bind(id, store_.find(path)->value);
    return executor;
  }
  RowWindow row_window() const override { return {}; }

  TrainingState load(const std::filesystem::path& dir) override { return load_checkpoint(dir, store_); }
  void store_changed() override {}  // the executors read the store's own tensors
  void save(const std::filesystem::path& dir, const TrainingState& state, const std::string& config) override {
    save_checkpoint(dir, store_, state, config);
  }
  void sync_store() override {}
  Communicator* communicator() override { return nullptr; }

 private:
  VariableStore& store_;
  Device device_;
};

}  // namespace

std::unique_ptr<StepHost> device_host(VariableStore& store, Device device) {
  return std::make_unique<DeviceHost>(store, device);
}

}  // namespace tessera
