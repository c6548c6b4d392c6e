// DeviceWorkers: one persistent thread per device of a mesh that this process
// owns, so that the devices run their part of a step at the same time (a
// collective needs every member running). run() hands each worker the same
// function with its device's mesh rank and returns when all are done.
//
// When a worker throws, the communicator is aborted so that its peers leave
// their collectives instead of waiting for the timeout, and run() rethrows the
// first error that is not a consequence of the abort.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera {

class Communicator;

class DeviceWorkers {
 public:
  // One worker per mesh rank in `ranks`.
  DeviceWorkers(std::vector<int> ranks, Communicator* comm);
  ~DeviceWorkers();
  DeviceWorkers(const DeviceWorkers&) = delete;
  DeviceWorkers& operator=(const DeviceWorkers&) = delete;

  int size() const { return static_cast<int>(threads_.size()); }
  // Runs task(rank) on every worker; rethrows a worker's error.
  void run(const std::function<void(int rank)>& task);

 private:
  void loop(std::size_t worker);
  void stop();  // ends and joins every started thread

  std::vector<int> ranks_;
  Communicator* comm_;
  std::mutex mutex_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* task_ = nullptr;
  std::uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::vector<std::exception_ptr> errors_;
  std::vector<std::thread> threads_;
};

}  // namespace tessera
