// The StepHost of one device: an Executor per step. On a device that shares
// the host's memory (a CPU) the executors read and update the store's own
// tensors. On one that does not (a GPU) the variables live on the device
// between steps, each runner is staged (batches copied in, outputs copied
// out), and the store is written back on sync_store() and before each save.
#include <map>
#include <memory>

#include "backends/registry.hpp"
#include "engine/graph/executor.hpp"
#include "engine/graph/kept_copies.hpp"
#include "engine/graph/staged_runner.hpp"
#include "engine/run/step_host.hpp"

namespace tessera {
namespace {

class DeviceHost final : public StepHost {
 public:
  DeviceHost(VariableStore& store, Device device, Residency residency, std::shared_ptr<KeptCopies> kept)
      : store_(store), device_(device), on_device_(keeps_copies(residency, device)),
        kept_(kept ? std::move(kept) : std::make_shared<KeptCopies>()) {}

  std::unique_ptr<StepRunner> runner(const TracedStep& step) override {
    auto executor = std::make_unique<Executor>(step.graph, step.outputs, device_);
    for (const auto& [path, id] : step.variables) executor->bind(id, variable(path));
    if (step.fixed_variables) executor->fix_variables(kept_);
    if (!on_device_) return executor;
    return std::make_unique<StagedRunner>(std::move(executor), device_);
  }
  RowWindow row_window() const override { return {}; }
  AttentionKernelTest attention_kernel() const override { return attention_kernel_of(device_); }

  TrainingState load(const std::filesystem::path& dir, NonFinite non_finite) override {
    TrainingState state = load_checkpoint(dir, store_, LoadValues::all, non_finite);
    upload();
    kept_->changed();
    return state;
  }
  void store_changed() override {
    upload();
    kept_->changed();
  }
  std::shared_ptr<KeptCopies> kept_copies() override { return kept_; }
  void save(const std::filesystem::path& dir, const TrainingState& state, const std::string& config) override {
    sync_store();
    save_checkpoint(dir, store_, state, config);
  }
  void sync_store() override {
    if (resident_.empty()) return;
    Backend& backend = backend_for(device_);
    for (const auto& [path, tensor] : resident_) backend.copy(tensor, store_.find(path)->value);
    backend.synchronize();  // the store is read next
  }
  Communicator* communicator() override { return nullptr; }

 private:
  // The tensor the runners bind for the store's variable `path`: the store's
  // own, or its device copy (made on first use: optimizer state joins the store
  // when a training step is first traced).
  const Tensor& variable(const std::string& path) {
    const Tensor& stored = VariableStore::materialize(*store_.find(path));  // one device holds the whole
    if (!on_device_) return stored;
    auto [it, added] = resident_.try_emplace(path);
    if (added) {
      it->second = Tensor::empty(stored.shape(), stored.dtype(), device_);
      backend_for(device_).copy(stored, it->second);
    }
    return it->second;
  }
  // The store has new values (a checkpoint): the device copies take them.
  void upload() {
    Backend& backend = backend_for(device_);
    for (auto& [path, tensor] : resident_) backend.copy(store_.find(path)->value, tensor);
  }

  VariableStore& store_;
  Device device_;
  bool on_device_;
  std::map<std::string, Tensor> resident_;  // by variable path; empty when the executors use the store's tensors
  std::shared_ptr<KeptCopies> kept_;  // what runners of fixed variables multiply (perhaps shared with another host)
};

}  // namespace

AttentionKernelTest attention_kernel_of(Device device) {
  const Backend& backend = backend_for(device);
  return [&backend](DType operands, DType out, std::int64_t width) {
    return backend.prefers_attention_op(operands, out, width);
  };
}

std::unique_ptr<StepHost> device_host(VariableStore& store, Device device, Residency residency,
                                      std::shared_ptr<KeptCopies> kept) {
  return std::make_unique<DeviceHost>(store, device, residency, std::move(kept));
}

}  // namespace tessera
