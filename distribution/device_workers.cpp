#include "distribution/device_workers.hpp"

#include "distribution/collectives/communicator.hpp"

namespace tessera {

DeviceWorkers::DeviceWorkers(int count, Communicator* comm) : comm_(comm), errors_(static_cast<std::size_t>(count)) {
  for (int rank = 0; rank < count; ++rank) threads_.emplace_back([this, rank] { loop(rank); });
}

DeviceWorkers::~DeviceWorkers() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  start_.notify_all();
  for (auto& t : threads_) t.join();
}

void DeviceWorkers::loop(int rank) {
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
    errors_[static_cast<std::size_t>(rank)] = error;
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
