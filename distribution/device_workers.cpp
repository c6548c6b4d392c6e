#include "distribution/device_workers.hpp"

#include "distribution/collectives/communicator.hpp"

namespace tessera {

DeviceWorkers::DeviceWorkers(std::vector<int> ranks, Communicator* comm)
    : ranks_(std::move(ranks)), comm_(comm), errors_(ranks_.size()) {
  try {
    for (std::size_t worker = 0; worker < ranks_.size(); ++worker) threads_.emplace_back([this, worker] { loop(worker); });
  } catch (...) {  // no thread to be had: join those started (destroying them running would terminate)
    stop();
    throw;
  }
}

DeviceWorkers::~DeviceWorkers() { stop(); }

void DeviceWorkers::stop() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  start_.notify_all();
  for (auto& t : threads_) t.join();
}

void DeviceWorkers::loop(std::size_t worker) {
  const int rank = ranks_[worker];
  std::uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* task;
    {
      std::unique_lock lock(mutex_);
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      task = task_;
    }
    std::exception_ptr error;
    try {
      (*task)(rank);
    } catch (const std::exception& e) {
      error = std::current_exception();
      if (comm_ != nullptr) comm_->abort("device " + std::to_string(rank) + " failed: " + e.what());
    } catch (...) {  // not ours, but it must not end the thread (std::terminate) or leave peers waiting
      error = std::current_exception();
      if (comm_ != nullptr) comm_->abort("device " + std::to_string(rank) + " failed");
    }
    std::lock_guard lock(mutex_);
    errors_[worker] = error;
    if (--pending_ == 0) done_.notify_all();
  }
}

void DeviceWorkers::run(const std::function<void(int rank)>& task) {
  {
    std::lock_guard lock(mutex_);
    task_ = &task;
    pending_ = size();
    for (auto& e : errors_) e = nullptr;
    ++generation_;
  }
  start_.notify_all();
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return pending_ == 0; });
  // The root cause: an error other than the abort it triggered in the peers.
  std::exception_ptr first;
  for (auto& e : errors_) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const CollectiveError&) {
      if (!first) first = e;
    } catch (...) {
      std::rethrow_exception(e);
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace tessera
