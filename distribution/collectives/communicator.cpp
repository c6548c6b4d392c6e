#include "distribution/collectives/communicator.hpp"

#include <algorithm>
#include <array>

namespace tessera {
namespace {

constexpr std::array<const char*, kCollectiveKindCount> kKindNames = {
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "barrier"};

}  // namespace

std::string join_ranks(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

int CommGroup::index_of(int rank) const {
  auto it = std::find(ranks.begin(), ranks.end(), rank);
  if (it == ranks.end())
    throw Error("rank " + std::to_string(rank) + " is not a member of the group over mesh axis '" + axes +
                "' (ranks " + join_ranks(ranks) + ")");
  return static_cast<int>(it - ranks.begin());
}

const char* name(CollectiveKind kind) { return kKindNames[static_cast<std::size_t>(kind)]; }

CollectiveAccounting::CollectiveAccounting(int ranks) : per_rank_(static_cast<std::size_t>(std::max(ranks, 0))) {}

std::int64_t bus_bytes(CollectiveKind kind, std::int64_t in_bytes, std::int64_t out_bytes, int n, bool root) {
  if (n <= 1) return 0;
  auto share = [n](std::int64_t bytes) { return bytes * (n - 1) / n; };
  switch (kind) {
    case CollectiveKind::all_reduce: return 2 * share(in_bytes);
    case CollectiveKind::all_gather: return share(out_bytes);
    case CollectiveKind::reduce_scatter: return share(in_bytes);
    case CollectiveKind::all_to_all: return share(in_bytes);
    case CollectiveKind::broadcast: return root ? in_bytes : 0;
    case CollectiveKind::barrier: return 0;
  }
  return 0;
}

void CollectiveAccounting::record(int rank, CollectiveKind kind, const std::string& axes, std::int64_t bytes,
                                  double seconds, std::int64_t inter_process_bytes) {
  if (rank < 0) throw Error("collective accounting: negative rank " + std::to_string(rank));
  std::lock_guard lock(mutex_);
  // A default-constructed accounting does not know the world size: grow on demand.
  if (static_cast<std::size_t>(rank) >= per_rank_.size()) per_rank_.resize(static_cast<std::size_t>(rank) + 1);
  CollectiveStats& stats = per_rank_[static_cast<std::size_t>(rank)][{kind, axes}];
  stats.calls += 1;
  stats.bytes += bytes;
  stats.seconds += seconds;
  stats.inter_process_bytes += inter_process_bytes;
}

std::map<CollectiveAccounting::Key, CollectiveStats> CollectiveAccounting::of_rank(int rank) const {
  std::lock_guard lock(mutex_);
  if (rank < 0 || static_cast<std::size_t>(rank) >= per_rank_.size()) return {};
  return per_rank_[static_cast<std::size_t>(rank)];
}

std::map<CollectiveAccounting::Key, CollectiveStats> CollectiveAccounting::total() const {
  std::lock_guard lock(mutex_);
  std::map<Key, CollectiveStats> sum;
  for (const auto& rank : per_rank_)
    for (const auto& [key, stats] : rank) {
      CollectiveStats& s = sum[key];
      s.calls += stats.calls;
      s.bytes += stats.bytes;
      s.seconds += stats.seconds;
      s.inter_process_bytes += stats.inter_process_bytes;
    }
  return sum;
}

void CollectiveAccounting::reset() {
  std::lock_guard lock(mutex_);
  for (auto& rank : per_rank_) rank.clear();
}

}  // namespace tessera
