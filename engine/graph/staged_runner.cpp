#include "engine/graph/staged_runner.hpp"

#include "backends/registry.hpp"

namespace tessera {

StagedRunner::StagedRunner(std::unique_ptr<StepRunner> inner, Device device) : inner_(std::move(inner)), device_(device) {}

const Tensor& StagedRunner::upload(ValueId leaf, const Tensor& host) {
  Tensor& copy = inputs_[leaf];
  if (!copy.defined() || copy.shape() != host.shape() || copy.dtype() != host.dtype())
    copy = Tensor::empty(host.shape(), host.dtype(), device_);
  backend_for(device_).copy(host, copy);
  return copy;
}

void StagedRunner::bind(ValueId leaf, const Tensor& host) { inner_->bind(leaf, upload(leaf, host)); }

void StagedRunner::bind_rows(ValueId leaf, const Tensor& host_rows, std::int64_t first_row) {
  inner_->bind_rows(leaf, upload(leaf, host_rows), first_row);
}

void StagedRunner::run() {
  inner_->run();
  fresh_.clear();  // the last run's copies are stale: copied again on request
}

Tensor StagedRunner::output(ValueId value) const {
  Tensor& copy = outputs_[value];
  if (fresh_.contains(value)) return copy;
  const Tensor on_device = inner_->output(value);
  if (!copy.defined() || copy.shape() != on_device.shape() || copy.dtype() != on_device.dtype())
    copy = Tensor::empty(on_device.shape(), on_device.dtype(), Device::cpu());
  Backend& backend = backend_for(device_);
  backend.copy(on_device, copy);
  backend.synchronize();  // the host reads it next
  fresh_.insert(value);
  return copy;
}

}  // namespace tessera
