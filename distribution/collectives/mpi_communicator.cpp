#include "distribution/collectives/mpi_communicator.hpp"

#include <mpi.h>

#include <algorithm>
#include <barrier>
#include <span>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <thread>

#include "distribution/collectives/group_plan.hpp"
#include "distribution/collectives/mpi_session.hpp"
#include "distribution/collectives/shm_kernels.hpp"
#include "distribution/sharding.hpp"

namespace tessera {

using Clock = std::chrono::steady_clock;

// All-reduces up to this many bytes take the path with two meetings (all_reduce).
constexpr std::size_t kSmallAllReduce = 1 << 20;

// MPI has no bf16: sums and maxima of bf16 are user operations (in f32, rounded once per pair).
struct MpiCommunicator::MpiOps {
  MPI_Op bf16_sum = MPI_OP_NULL, bf16_max = MPI_OP_NULL;
  MpiOps() {
    MPI_Op_create(&combine<false>, /*commute=*/1, &bf16_sum);
    MPI_Op_create(&combine<true>, 1, &bf16_max);
  }
  ~MpiOps() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    MPI_Op_free(&bf16_sum);
    MPI_Op_free(&bf16_max);
    for (auto& [unit, type] : chunks) MPI_Type_free(&type);
  }
  // Bytes moved as-is (gathers, broadcasts) are counted in chunks of the
  // largest power of two up to 4 KiB that divides `bytes`: MPI's int counts
  // then reach 2^31 chunks (8 TiB of 4 KiB chunks), not 2 GiB.
  std::pair<MPI_Datatype, std::size_t> chunk(std::size_t bytes) {
    std::size_t unit = 4096;
    while (unit > 1 && bytes % unit != 0) unit /= 2;
    if (unit == 1) return {MPI_BYTE, 1};
    std::lock_guard lock(chunks_mutex);  // the leaders of several groups call at once
    auto [it, added] = chunks.try_emplace(unit, MPI_DATATYPE_NULL);
    if (added) {
      MPI_Type_contiguous(static_cast<int>(unit), MPI_BYTE, &it->second);
      MPI_Type_commit(&it->second);
    }
    return {it->second, unit};
  }
  std::mutex chunks_mutex;
  std::map<std::size_t, MPI_Datatype> chunks;  // by bytes per chunk
  template <bool kMax>
  static void combine(void* in, void* inout, int* len, MPI_Datatype*) {
    auto* a = static_cast<const bf16*>(in);
    auto* b = static_cast<bf16*>(inout);
    for (int i = 0; i < *len; ++i) {
      const float x = to_f32(a[i]), y = to_f32(b[i]);
      b[i] = to_bf16(kMax ? std::max(x, y) : x + y);
    }
  }
  MPI_Datatype type(DType dtype) const {
    switch (dtype) {
      case DType::f32: return MPI_FLOAT;
      case DType::bf16: return MPI_UINT16_T;
      case DType::i32: return MPI_INT32_T;
      case DType::i64: return MPI_INT64_T;
    }
    return MPI_BYTE;
  }
  // mean is reduced as a sum and divided by the member count afterwards.
  MPI_Op op(DType dtype, ReduceOp reduce) const {
    const bool max = reduce == ReduceOp::max;
    if (dtype == DType::bf16) return max ? bf16_max : bf16_sum;
    return max ? MPI_MAX : MPI_SUM;
  }
};

namespace {
int as_count(std::size_t n, const char* what) {
  if (n > static_cast<std::size_t>(INT_MAX))
    throw UnsupportedError(std::string("MPI collective of ") + std::to_string(n) + " " + what +
                           ": larger than MPI's int counts allow");
  return static_cast<int>(n);
}
}  // namespace

struct MpiCommunicator::Group {
  CommGroup local;                // this process's members, in group order
  std::vector<int> processes;     // the group's processes, in group order (= their rank in comm)
  std::vector<int> members;       // members per process, same order
  MPI_Comm comm = MPI_COMM_NULL;  // the group's processes; null when every member is in this process
  int me = -1;                    // this process's index in `processes`
  int leader() const { return local.ranks.front(); }
  bool spans_processes() const { return comm != MPI_COMM_NULL; }
  int local_index(int rank) const { return local.index_of(rank); }

  std::mutex mutex;             // guards the buffers' growth
  Tensor shared;                // staging of the process's members
  std::map<int, Tensor> own;    // by rank

  // The process's members meet at a plain barrier: a failing member ends the
  // job (abort()), so it needs no timeout of its own.
  std::unique_ptr<std::barrier<>> sync;
  // Small all_reduces: two halves, used in turn, each a slot per member (see all_reduce).
  std::vector<std::byte> small;
  std::map<int, std::uint64_t> small_calls;  // by rank: which half is next
  std::map<int, std::unique_ptr<ShmKernels>> kernels;  // by rank: one per thread

  // The leader's argument arrays for MPI, kept from call to call: per
  // process of the group, `unit` x its members (counts) and where that starts (displs).
  std::vector<int> counts, displs;
  std::vector<const void*> sources;  // the slots a small all_reduce adds up
  void set_counts(std::size_t unit) {
    counts.clear();
    displs.clear();
    std::size_t offset = 0;
    for (int m : members) {
      displs.push_back(as_count(offset, "elements or chunks"));
      counts.push_back(as_count(static_cast<std::size_t>(m) * unit, "elements or chunks"));
      offset += static_cast<std::size_t>(m) * unit;
    }
    as_count(offset, "elements or chunks");
  }
};

MpiCommunicator::Watchdog::Watchdog(
    int process, int devices, std::function<std::string(CollectiveKind, const CommGroup&, const Group&)> describe)
    : describe_(std::move(describe)),
      slots_(static_cast<std::size_t>(devices)),
      thread_([this, process](std::stop_token stop) {
        std::unique_lock lock(mutex_);
        while (!stop.stop_requested()) {
          changed_.wait_for(lock, stop, std::chrono::milliseconds(20), [] { return false; });
          const auto now = std::chrono::steady_clock::now();
          for (const Slot& slot : slots_)
            if (slot.busy && now > slot.deadline) {
              // The call cannot be interrupted, and its peers are gone or
              // stuck: say which collective waited for whom, and end the job.
              std::fprintf(stderr, "tessera: rank %d: collective error: %s\n", process,
                           describe_(slot.kind, *slot.group, *slot.g).c_str());
              std::fflush(stderr);
              MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
      }) {}

MpiCommunicator::Watchdog::~Watchdog() {
  thread_.request_stop();
  changed_.notify_all();
}

MpiCommunicator::Watchdog::Watch MpiCommunicator::Watchdog::watch(std::size_t slot,
                                                                  std::chrono::steady_clock::time_point deadline,
                                                                  CollectiveKind kind, const CommGroup& group,
                                                                  const Group& g) {
  std::lock_guard lock(mutex_);
  slots_[slot] = Slot{true, deadline, kind, &group, &g};
  return Watch(this, slot);
}

MpiCommunicator::Watchdog::Watch::~Watch() {
  std::lock_guard lock(dog_->mutex_);
  dog_->slots_[slot_].busy = false;
}

namespace {


// Copies block j (of n) along `dim` of a row-major tensor of shape `shape`
// (the whole tensor) to or from a packed array of n contiguous blocks.
void copy_blocks(std::byte* whole, std::byte* packed, const Shape& shape, int dim, int n, std::size_t elem, bool pack) {
  std::int64_t outer = 1;
  for (int d = 0; d < dim; ++d) outer *= shape[d];
  const std::size_t row = static_cast<std::size_t>(shape.numel() / std::max<std::int64_t>(outer, 1)) * elem;
  const std::size_t piece = row / static_cast<std::size_t>(n);
  const std::size_t block = piece * static_cast<std::size_t>(outer);
  for (int j = 0; j < n; ++j)
    for (std::int64_t o = 0; o < outer; ++o) {
      std::byte* w = whole + static_cast<std::size_t>(o) * row + static_cast<std::size_t>(j) * piece;
      std::byte* p = packed + static_cast<std::size_t>(j) * block + static_cast<std::size_t>(o) * piece;
      if (pack)
        std::memcpy(p, w, piece);
      else
        std::memcpy(w, p, piece);
    }
}

void divide(const Tensor& t, int n) {
  const float scale = 1.0f / static_cast<float>(n);
  if (t.dtype() == DType::f32) {
    for (float *p = t.data<float>(), *end = p + t.numel(); p != end; ++p) *p *= scale;
  } else if (t.dtype() == DType::bf16) {
    for (bf16 *p = t.data<bf16>(), *end = p + t.numel(); p != end; ++p) *p = to_bf16(to_f32(*p) * scale);
  } else {
    throw DTypeError("a mean over processes needs f32 or bf16, got " + t.describe());
  }
}

std::byte* bytes(const Tensor& t) { return static_cast<std::byte*>(t.raw_data()); }

}  // namespace

MpiCommunicator::MpiCommunicator(const DeviceMesh& mesh, ProcessPlacement placement)
    : Communicator(static_cast<int>(mesh.size())),
      placement_(placement),
      whole_(static_cast<int>(mesh.size())),
      shm_(static_cast<int>(mesh.size())),
      ops_(std::make_unique<MpiOps>()),
      watchdog_(placement.process, placement.ranks_per_process(mesh.size()),
                [this](CollectiveKind kind, const CommGroup& group, const Group& g) {
                  return timeout_message(kind, group, g);
                }) {
  placement_.check(mesh.size());
  whole_.report_to(accounting());  // groups inside this process count here; the steps of others do not
  const std::int64_t size = mesh.size();
  // Every process walks the same groups in the same order: the MPI_Comm_split calls match.
  for (std::uint32_t mask = 0; mask < (1u << mesh.rank()); ++mask) {
    for (const auto& ranks : groups_of(mesh, mask)) {
      if (groups_.contains(ranks)) continue;
      auto g = std::make_unique<Group>();
      g->local.axes = axes_label(mask, mesh) + " within process " + std::to_string(placement_.process);
      for (int rank : ranks) {
        const int p = placement_.owner(rank, size);
        if (g->processes.empty() || g->processes.back() != p) {
          if (std::find(g->processes.begin(), g->processes.end(), p) != g->processes.end())
            throw UnsupportedError("the group of ranks " + join_ranks(ranks) + " over mesh axis '" + axes_label(mask, mesh) +
                                   "' visits process " + std::to_string(p) + " twice; its members must be consecutive");
          g->processes.push_back(p);
          g->members.push_back(0);
        }
        ++g->members.back();
        if (p == placement_.process) g->local.ranks.push_back(rank);
      }
      if (g->processes.size() > 1) {
        auto it = std::find(g->processes.begin(), g->processes.end(), placement_.process);
        const bool in = it != g->processes.end();
        MPI_Comm comm = MPI_COMM_NULL;
        if (MPI_Comm_split(MPI_COMM_WORLD, in ? 0 : MPI_UNDEFINED, placement_.process, &comm) != MPI_SUCCESS)
          throw CollectiveError("MPI_Comm_split failed for the group of ranks " + join_ranks(ranks));
        if (in) {
          g->comm = comm;
          g->me = static_cast<int>(it - g->processes.begin());
          MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
        }
      }
      if (g->local.size() > 1) {
        g->sync = std::make_unique<std::barrier<>>(g->local.size());
        g->small.resize(2 * static_cast<std::size_t>(g->local.size()) * kSmallAllReduce);
        for (int r : g->local.ranks) {
          g->small_calls[r] = 0;
          g->kernels[r] = std::make_unique<ShmKernels>();
        }
      }
      groups_.emplace(ranks, std::move(g));
    }
  }
}

void MpiCommunicator::set_timeout(std::chrono::milliseconds timeout) {
  Communicator::set_timeout(timeout);
  whole_.set_timeout(timeout);
  shm_.set_timeout(timeout + std::max<std::chrono::milliseconds>(timeout / 10, std::chrono::seconds(1)));
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (auto& [ranks, g] : groups_)
    if (g->comm != MPI_COMM_NULL) MPI_Comm_free(&g->comm);
}

MpiCommunicator::Group& MpiCommunicator::group_of(const CommGroup& group, int rank) {
  auto it = groups_.find(group.ranks);  // built in the constructor: read-only here
  if (it == groups_.end() || it->second->local.ranks.empty())
    throw Error("rank " + std::to_string(rank) + ": no collective group of ranks " + join_ranks(group.ranks) +
                " over mesh axis '" + group.axes + "' with members in " + placement_.str());
  Group& g = *it->second;
  g.local_index(rank);  // throws when this rank is not a local member
  if (aborted_) {
    std::lock_guard lock(abort_mutex_);
    throw CollectiveError(abort_reason_);
  }
  return g;
}

namespace {
// A view of `shape` x `dtype` at the start of `buffer`, grown first if too small.
Tensor view_of(Tensor& buffer, const Shape& shape, DType dtype) {
  const std::size_t n = static_cast<std::size_t>(shape.numel()) * dtype_size(dtype);
  if (!buffer.defined() || buffer.nbytes() < n)
    buffer = Tensor::empty(Shape({static_cast<std::int64_t>((n + 7) / 8)}), DType::i64);
  return Tensor::view(buffer.buffer(), 0, shape, dtype);
}
}  // namespace

Tensor MpiCommunicator::staging(Group& g, const Shape& shape, DType dtype) {
  // Every member asks for the same size (their calls agree), and the closing
  // barrier of the previous collective keeps the buffer unused while it grows.
  std::lock_guard lock(g.mutex);
  return view_of(g.shared, shape, dtype);
}

Tensor MpiCommunicator::scratch(Group& g, int rank, const Shape& shape, DType dtype) {
  std::lock_guard lock(g.mutex);
  return view_of(g.own[rank], shape, dtype);
}

void MpiCommunicator::local_barrier(Group& g, int) {
  if (g.sync) g.sync->arrive_and_wait();
}

std::string MpiCommunicator::timeout_message(CollectiveKind kind, const CommGroup& group, const Group& g) const {
  std::vector<int> others;
  for (int p : g.processes)
    if (p != placement_.process) others.push_back(p);
  return std::string(name(kind)) + " over mesh axis '" + group.axes + "' (ranks " + join_ranks(group.ranks) +
         "): " + MpiSession::not_joined(placement_.process, timeout(), others);
}

template <typename Call>
void MpiCommunicator::blocking(CollectiveKind kind, const CommGroup& group, const Group& g, int rank, TimePoint start,
                               Call call) {
  if (aborted_) {
    std::lock_guard lock(abort_mutex_);
    throw CollectiveError(abort_reason_);
  }
  const auto watch = watchdog_.watch(static_cast<std::size_t>(rank - placement_.first_rank(size())), start + timeout(), kind,
                                     group, g);
  if (call() != MPI_SUCCESS)
    throw CollectiveError(std::string(name(kind)) + " over mesh axis '" + group.axes + "': MPI reported an error");
}

void MpiCommunicator::record(int rank, CollectiveKind kind, const CommGroup& group, std::int64_t in_bytes,
                             std::int64_t out_bytes, bool root, std::int64_t inter_bytes, Clock::time_point start) {
  accounting().record(rank, kind, group.axes, bus_bytes(kind, in_bytes, out_bytes, group.size(), root),
                     std::chrono::duration<double>(Clock::now() - start).count(), inter_bytes);
}

void MpiCommunicator::all_reduce(const CommGroup& group, int rank, const Tensor& in, const Tensor& out, ReduceOp op) {
  Group& g = group_of(group, rank);
  if (!g.spans_processes()) return whole_.all_reduce(group, rank, in, out, op);
  const auto start = Clock::now();
  if (in.shape() != out.shape() || in.dtype() != out.dtype())
    throw ShapeError("all_reduce over mesh axis '" + group.axes + "': input " + in.describe() + " but output " +
                     out.describe());
  const ReduceOp sum_or_max = op == ReduceOp::mean ? ReduceOp::sum : op;
  const std::size_t bytes = in.nbytes();
  // Small buffers: the members meet twice instead of four times. Each copies
  // its input into its slot and waits; the leader reduces the slots, talks to
  // the other processes and leaves the result in slot 0; after the second
  // wait the others copy it out. The two halves of `small` alternate, so
  // nobody overwrites a slot a slower member may still read.
  if (g.sync && bytes <= kSmallAllReduce) {
    const auto members = static_cast<std::size_t>(g.local.size());
    std::byte* half = g.small.data() + (g.small_calls[rank]++ % 2) * members * kSmallAllReduce;
    auto slot = [&](std::size_t i) { return half + i * kSmallAllReduce; };
    std::memcpy(slot(static_cast<std::size_t>(g.local_index(rank))), in.raw_data(), bytes);
    local_barrier(g, rank);
    std::int64_t inter = 0;
    if (rank == g.leader()) {
      g.sources.clear();
      for (std::size_t i = 0; i < members; ++i) g.sources.push_back(slot(i));
      void* target = out.raw_data();
      g.kernels[rank]->reduce(g.sources, std::span<void* const>(&target, 1), out.numel(), out.dtype(), sum_or_max, false);
      const int count = as_count(static_cast<std::size_t>(out.numel()), "elements");
      blocking(CollectiveKind::all_reduce, group, g, rank, start, [&] {
        return MPI_Allreduce(MPI_IN_PLACE, out.raw_data(), count, ops_->type(out.dtype()),
                             ops_->op(out.dtype(), sum_or_max), g.comm);
      });
      std::memcpy(slot(0), out.raw_data(), bytes);
      inter = bus_bytes(CollectiveKind::all_reduce, static_cast<std::int64_t>(bytes), 0,
                        static_cast<int>(g.processes.size()), false);
    }
    local_barrier(g, rank);
    if (rank != g.leader()) std::memcpy(out.raw_data(), slot(0), bytes);
    if (op == ReduceOp::mean) divide(out, group.size());
    record(rank, CollectiveKind::all_reduce, group, static_cast<std::int64_t>(bytes), 0, false, inter, start);
    return;
  }
  if (g.local.size() > 1)
    shm_.all_reduce(g.local, rank, in, out, sum_or_max);
  else if (in.raw_data() != out.raw_data())
    std::memcpy(out.raw_data(), in.raw_data(), in.nbytes());
  std::int64_t inter = 0;
  if (rank == g.leader()) {
    const int count = as_count(static_cast<std::size_t>(out.numel()), "elements");
    blocking(CollectiveKind::all_reduce, group, g, rank, start, [&] {
      return MPI_Allreduce(MPI_IN_PLACE, out.raw_data(), count, ops_->type(out.dtype()),
                           ops_->op(out.dtype(), sum_or_max), g.comm);
    });
    inter = bus_bytes(CollectiveKind::all_reduce, static_cast<std::int64_t>(out.nbytes()), 0,
                      static_cast<int>(g.processes.size()), false);
  }
  if (g.local.size() > 1) shm_.broadcast(g.local, rank, out, 0);
  if (op == ReduceOp::mean) divide(out, group.size());
  record(rank, CollectiveKind::all_reduce, group, static_cast<std::int64_t>(in.nbytes()), 0, false, inter, start);
}

// Every member's `block` packed in group order into the process's staging
// buffer, which is returned ([members * block bytes]).
Tensor MpiCommunicator::gather_packed(Group& g, int rank, const std::byte* block, std::size_t block_bytes,
                                      const CommGroup& group, Clock::time_point start, std::int64_t& inter) {
  const int n = group.size();
  Tensor all = staging(g, Shape({(static_cast<std::int64_t>(block_bytes) * n + 7) / 8}), DType::i64);
  std::memcpy(bytes(all) + static_cast<std::size_t>(group.index_of(rank)) * block_bytes, block, block_bytes);
  local_barrier(g, rank);  // the process's blocks are in
  if (rank == g.leader()) {
    const std::pair<MPI_Datatype, std::size_t> chunk = ops_->chunk(block_bytes);
    const MPI_Datatype type = chunk.first;  // not a structured binding: lambdas capture it (Clang 14)
    const std::size_t unit = chunk.second;
    g.set_counts(block_bytes / unit);
    blocking(CollectiveKind::all_gather, group, g, rank, start, [&] {
      return MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all.raw_data(), g.counts.data(), g.displs.data(), type,
                            g.comm);
    });
    inter = static_cast<std::int64_t>(block_bytes) * (group.size() - g.local.size());
  }
  local_barrier(g, rank);  // the other processes' blocks are in
  return all;
}

void MpiCommunicator::all_gather(const CommGroup& group, int rank, const Tensor& in, const Tensor& out, int dim) {
  Group& g = group_of(group, rank);
  if (!g.spans_processes()) return whole_.all_gather(group, rank, in, out, dim);
  const auto start = Clock::now();
  if (out.numel() != in.numel() * group.size() || in.dtype() != out.dtype() || dim < 0 || dim >= out.rank() ||
      out.shape()[dim] % group.size() != 0)
    throw ShapeError("all_gather over mesh axis '" + group.axes + "' along dim " + std::to_string(dim) + ": input " +
                     in.describe() + " does not make output " + out.describe() + " for " +
                     std::to_string(group.size()) + " members");
  std::int64_t inter = 0;
  Tensor all = gather_packed(g, rank, bytes(in), in.nbytes(), group, start, inter);
  copy_blocks(bytes(out), bytes(all), out.shape(), dim, group.size(), dtype_size(out.dtype()), /*pack=*/false);
  local_barrier(g, rank);  // everyone has read the staging buffer
  record(rank, CollectiveKind::all_gather, group, 0, static_cast<std::int64_t>(out.nbytes()), false, inter, start);
}

void MpiCommunicator::reduce_scatter(const CommGroup& group, int rank, const Tensor& in, const Tensor& out, int dim,
                                     ReduceOp op) {
  Group& g = group_of(group, rank);
  if (!g.spans_processes()) return whole_.reduce_scatter(group, rank, in, out, dim, op);
  const auto start = Clock::now();
  const int n = group.size();
  if (in.numel() != out.numel() * n || in.dtype() != out.dtype() || dim < 0 || dim >= in.rank() ||
      in.shape()[dim] % n != 0)
    throw ShapeError("reduce_scatter over mesh axis '" + group.axes + "' along dim " + std::to_string(dim) +
                     ": input " + in.describe() + " does not make output " + out.describe() + " for " +
                     std::to_string(n) + " members");
  const ReduceOp sum_or_max = op == ReduceOp::mean ? ReduceOp::sum : op;
  // This member's input with the blocks for each member one after another,
  // reduced over the process's members.
  Tensor packed = scratch(g, rank, Shape({in.numel()}), in.dtype());
  copy_blocks(bytes(in), bytes(packed), in.shape(), dim, n, dtype_size(in.dtype()), /*pack=*/true);
  if (g.local.size() > 1) shm_.all_reduce(g.local, rank, packed, packed, sum_or_max);
  // The leader receives the process's members' blocks, reduced over every process.
  const std::int64_t block = out.numel();
  Tensor mine = staging(g, Shape({block * g.local.size()}), out.dtype());
  std::int64_t inter = 0;
  if (rank == g.leader()) {
    g.set_counts(static_cast<std::size_t>(block));
    blocking(CollectiveKind::reduce_scatter, group, g, rank, start, [&] {
      return MPI_Reduce_scatter(packed.raw_data(), mine.raw_data(), g.counts.data(), ops_->type(in.dtype()),
                                ops_->op(in.dtype(), sum_or_max), g.comm);
    });
    inter = bus_bytes(CollectiveKind::reduce_scatter, static_cast<std::int64_t>(in.nbytes()), 0,
                      static_cast<int>(g.processes.size()), false);
  }
  local_barrier(g, rank);  // the leader has the blocks
  std::memcpy(out.raw_data(), bytes(mine) + static_cast<std::size_t>(g.local_index(rank)) * out.nbytes(), out.nbytes());
  local_barrier(g, rank);  // everyone has read the staging buffer
  if (op == ReduceOp::mean) divide(out, n);
  record(rank, CollectiveKind::reduce_scatter, group, static_cast<std::int64_t>(in.nbytes()), 0, false, inter, start);
}

void MpiCommunicator::broadcast(const CommGroup& group, int rank, const Tensor& x, int root) {
  Group& g = group_of(group, rank);
  if (!g.spans_processes()) return whole_.broadcast(group, rank, x, root);
  const auto start = Clock::now();
  if (root < 0 || root >= group.size())
    throw Error("broadcast over mesh axis '" + group.axes + "': root " + std::to_string(root) + " of " +
                std::to_string(group.size()) + " members");
  const int root_rank = group.ranks[static_cast<std::size_t>(root)];
  const int root_process = placement_.owner(root_rank, size());
  const int root_index = static_cast<int>(std::find(g.processes.begin(), g.processes.end(), root_process) - g.processes.begin());
  // One member per process calls MPI: the root itself in its process, the leader elsewhere.
  const int caller = root_process == placement_.process ? root_rank : g.leader();
  std::int64_t inter = 0;
  if (rank == caller) {
    const std::pair<MPI_Datatype, std::size_t> chunk = ops_->chunk(x.nbytes());
    const MPI_Datatype type = chunk.first;  // not a structured binding: lambdas capture it (Clang 14)
    const std::size_t unit = chunk.second;
    const int count = as_count(x.nbytes() / unit, "chunks");
    blocking(CollectiveKind::broadcast, group, g, rank, start,
             [&] { return MPI_Bcast(x.raw_data(), count, type, root_index, g.comm); });
    if (rank == root_rank) inter = static_cast<std::int64_t>(x.nbytes());
  }
  if (g.local.size() > 1) shm_.broadcast(g.local, rank, x, g.local_index(caller));
  record(rank, CollectiveKind::broadcast, group, static_cast<std::int64_t>(x.nbytes()), 0, rank == root_rank, inter,
         start);
}

void MpiCommunicator::all_to_all(const CommGroup& group, int rank, const Tensor& in, const Tensor& out, int split_dim,
                                 int concat_dim) {
  Group& g = group_of(group, rank);
  if (!g.spans_processes()) return whole_.all_to_all(group, rank, in, out, split_dim, concat_dim);
  const auto start = Clock::now();
  const int n = group.size();
  if (in.numel() != out.numel() || in.dtype() != out.dtype() || split_dim < 0 || split_dim >= in.rank() ||
      concat_dim < 0 || concat_dim >= out.rank() || in.shape()[split_dim] % n != 0)
    throw ShapeError("all_to_all over mesh axis '" + group.axes + "': input " + in.describe() + " split along dim " +
                     std::to_string(split_dim) + " does not make output " + out.describe() + " for " +
                     std::to_string(n) + " members");
  // Every member's blocks, gathered: all[i][j] is member i's block for member j.
  const std::size_t block = in.nbytes() / static_cast<std::size_t>(n);
  Tensor own = scratch(g, rank, Shape({in.numel()}), in.dtype());
  copy_blocks(bytes(in), bytes(own), in.shape(), split_dim, n, dtype_size(in.dtype()), /*pack=*/true);
  std::int64_t inter = 0;
  Tensor all = gather_packed(g, rank, bytes(own), in.nbytes(), group, start, inter);
  // Member `me` keeps all[i][me] for every i, in member order (into `own`,
  // which the staging buffer holds a copy of now), then places them along concat_dim.
  const auto me = static_cast<std::size_t>(group.index_of(rank));
  for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i)
    std::memcpy(bytes(own) + i * block, bytes(all) + (i * static_cast<std::size_t>(n) + me) * block, block);
  local_barrier(g, rank);  // everyone has read the staging buffer
  copy_blocks(bytes(out), bytes(own), out.shape(), concat_dim, n, dtype_size(out.dtype()), /*pack=*/false);
  record(rank, CollectiveKind::all_to_all, group, static_cast<std::int64_t>(in.nbytes()), 0, false, inter, start);
}

void MpiCommunicator::barrier(const CommGroup& group, int rank) {
  Group& g = group_of(group, rank);
  if (!g.spans_processes()) return whole_.barrier(group, rank);
  const auto start = Clock::now();
  local_barrier(g, rank);
  if (rank == g.leader()) {
    blocking(CollectiveKind::barrier, group, g, rank, start, [&] { return MPI_Barrier(g.comm); });
  }
  local_barrier(g, rank);
  record(rank, CollectiveKind::barrier, group, 0, 0, false, 0, start);
}

void MpiCommunicator::abort(const std::string& reason) {
  {
    std::lock_guard lock(abort_mutex_);
    if (!aborted_) abort_reason_ = reason;
  }
  aborted_ = true;
  whole_.abort(reason);
  shm_.abort(reason);
  // A device of this process failed. Its peers elsewhere may be blocked in
  // MPI calls that nothing can interrupt, and so may this process's leaders:
  // report the cause now and end the job, rather than after the timeout.
  std::fprintf(stderr, "tessera: rank %d: error: %s\n", placement_.process, reason.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

}  // namespace tessera
