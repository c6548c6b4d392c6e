#include "backends/op_timer.hpp"

#include <chrono>
#include <utility>

namespace tessera {
namespace {

class HostOpTimer final : public OpTimer {
 public:
  void start() override { started_ = std::chrono::steady_clock::now(); }
  void stop() override {
    seconds_.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
  }
  std::vector<double> seconds() override { return std::exchange(seconds_, {}); }

 private:
  std::chrono::steady_clock::time_point started_;
  std::vector<double> seconds_;
};

}  // namespace

std::unique_ptr<OpTimer> make_host_op_timer() { return std::make_unique<HostOpTimer>(); }

}  // namespace tessera
