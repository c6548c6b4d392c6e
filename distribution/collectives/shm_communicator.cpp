#include "distribution/collectives/shm_communicator.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <optional>
#include <span>
#include <thread>

#include <fmt/core.h>

#include "distribution/collectives/shm_kernels.hpp"

#if defined(__SSE2__)
#include <immintrin.h>  // _mm_pause
#endif

namespace tessera {

namespace shm_detail {

struct Call {
  CollectiveKind kind = CollectiveKind::barrier;
  ReduceOp op = ReduceOp::sum;
  int dim = 0;   // all_gather, reduce_scatter; the split dim of all_to_all
  int dim2 = 0;  // the concat dim of all_to_all
  int root = 0;  // broadcast
  const Tensor* in = nullptr;  // broadcast: x
  const Tensor* out = nullptr;
};

struct Rendezvous {
  explicit Rendezvous(int members)
      : members(members), slots(static_cast<std::size_t>(members)), present(static_cast<std::size_t>(members), 0) {}

  const int members;
  // Written by each member just before it arrives; read by all after.
  std::vector<Call> slots;

  // Arrival: under `mutex`, so that waits can honour the timeout and abort().
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<char> present;  // who has arrived at the current generation
  int arrived = 0;
  std::string failure;  // the timeout that broke this rendezvous, if any
  // Completed arrivals; atomic so that a member can spin on it before blocking.
  alignas(64) std::atomic<std::uint64_t> arrivals{0};

  // Barriers among members already inside the collective: two atomics, on
  // their own cache lines (every member writes the count).
  alignas(64) std::atomic<int> phase_count{0};
  alignas(64) std::atomic<std::uint32_t> phase_generation{0};
};

struct Workspace {
  Workspace(int ranks, std::unique_ptr<SharedMemoryKernels> kernels)
      : kernels(std::move(kernels)), srcs(static_cast<std::size_t>(ranks)), dsts(static_cast<std::size_t>(ranks)) {}
  std::unique_ptr<SharedMemoryKernels> kernels;
  std::vector<const void*> srcs;
  std::vector<void*> dsts;
};

}  // namespace shm_detail

namespace {

using shm_detail::Call;
using shm_detail::Rendezvous;
using shm_detail::Workspace;
using Clock = std::chrono::steady_clock;

// How long a waiting member spins before it blocks: a peer with a core of
// its own arrives within a microsecond or two of a tight loop of small
// collectives, while a futex sleep and wake-up costs tens of microseconds.
// Short, because a spinning waiter may hold the core its peer waits for.
constexpr std::chrono::nanoseconds kSpinTime{10000};
// Collectives writing more bytes than this (all members together) use
// non-temporal stores: they skip reading each destination line before it is
// overwritten and leave the cache to the data still to be read. On the 2-core
// EPYC VM they win from about 1 MiB (4 MiB all_reduce on 2 ranks: 3.6x faster,
// 64 MiB: 3x), and lose below it, where everything stays in cache.
constexpr std::size_t kStreamThreshold = std::size_t{1} << 20;

// ---------------------------------------------------------------------------
// Waiting, and the shapes of blocks
// ---------------------------------------------------------------------------

inline void cpu_pause() {
#if defined(__SSE2__)
  _mm_pause();
#endif
}

// Spins until done() or `limit` has passed; whether done() came true.
template <typename Done>
bool spin_until(Done done, std::chrono::nanoseconds limit) {
  if (limit.count() <= 0) return false;
  const auto end = Clock::now() + limit;
  for (;;) {
    for (int i = 0; i < 16; ++i) {
      if (done()) return true;
      cpu_pause();
    }
    if (Clock::now() >= end) return done();
  }
}

// A shape viewed as [outer, extent, inner] around dimension `dim`.
struct Around {
  std::int64_t outer = 1, extent = 1, inner = 1;
};

Around around(const Shape& shape, int dim) {
  Around a;
  for (int d = 0; d < shape.rank(); ++d) {
    if (d < dim) a.outer *= shape[d];
    else if (d == dim) a.extent = shape[d];
    else a.inner *= shape[d];
  }
  return a;
}

std::byte* bytes_of(const Tensor* t) { return static_cast<std::byte*>(t->raw_data()); }

// ---------------------------------------------------------------------------
// Messages and validation
// ---------------------------------------------------------------------------

// "all_reduce over mesh axis 'model' (ranks 0,1,2,3)"
std::string describe(CollectiveKind kind, const CommGroup& group) {
  std::string s = name(kind);
  if (group.axes.empty()) return s + " over ranks " + join_ranks(group.ranks);
  s += group.axes.find(',') == std::string::npos ? " over mesh axis '" : " over mesh axes '";
  return s + group.axes + "' (ranks " + join_ranks(group.ranks) + ")";
}

std::string duration_str(std::chrono::milliseconds t) {
  if (t.count() < 1000) return std::to_string(t.count()) + " ms";
  return fmt::format("{:g} s", static_cast<double>(t.count()) / 1000.0);
}

std::string type_str(const Tensor& t) { return std::string(dtype_name(t.dtype())) + t.shape().str(); }

struct Failure {
  enum class Type { collective, shape, dtype, device } type;
  std::string message;
};

[[noreturn]] void raise(const Failure& f) {
  switch (f.type) {
    case Failure::Type::shape: throw ShapeError(f.message);
    case Failure::Type::dtype: throw DTypeError(f.message);
    case Failure::Type::device: throw DeviceError(f.message);
    case Failure::Type::collective: break;
  }
  throw CollectiveError(f.message);
}

bool is_reduction(CollectiveKind kind) {
  return kind == CollectiveKind::all_reduce || kind == CollectiveKind::reduce_scatter;
}

bool overlaps(const std::byte* a, std::size_t na, const std::byte* b, std::size_t nb) {
  return na > 0 && nb > 0 && a < b + nb && b < a + na;
}

// The shape `out` must have, given `in` (already checked: dims in range, divisible).
Shape expected_out(const Call& c, const Shape& in, int n, int dim, int dim2) {
  Shape out = in;
  switch (c.kind) {
    case CollectiveKind::all_gather: out[dim] *= n; break;
    case CollectiveKind::reduce_scatter: out[dim] /= n; break;
    case CollectiveKind::all_to_all:
      out[dim] /= n;
      out[dim2] *= n;
      break;
    default: break;
  }
  return out;
}

// Every member runs this on every member's call after all have arrived, so
// all of them reach the same verdict and fail together instead of leaving
// the others waiting.
std::optional<Failure> validate(std::span<const Call> slots, const CommGroup& group,
                                const SharedMemoryKernels& memory) {
  using Type = Failure::Type;
  const Call& first = slots[0];
  const int n = static_cast<int>(slots.size());
  const std::string what = describe(first.kind, group) + ": ";
  auto rank = [&](std::size_t k) { return "rank " + std::to_string(group.ranks[k]); };

  for (std::size_t k = 1; k < slots.size(); ++k)
    if (slots[k].kind != first.kind)
      return Failure{Type::collective, what + rank(0) + " called " + name(first.kind) + " but " + rank(k) +
                                           " called " + name(slots[k].kind)};
  if (first.kind == CollectiveKind::barrier) return std::nullopt;
  const bool has_out = first.kind != CollectiveKind::broadcast;

  for (std::size_t k = 0; k < slots.size(); ++k) {
    const Call& c = slots[k];
    if (!c.in->defined() || (has_out && !c.out->defined()))
      return Failure{Type::collective, what + rank(k) + " passed an undefined tensor"};
    for (const Tensor* t : {c.in, has_out ? c.out : c.in})
      if (!memory.reaches(t->device()))
        return Failure{Type::device, what + rank(k) + " passed " + t->describe() +
                                         "; this shared-memory communicator needs " + memory.memory_name()};
    if (k == 0) continue;
    if (c.in->dtype() != first.in->dtype() || c.in->shape() != first.in->shape())
      return Failure{Type::collective,
                     what + rank(0) + " passes " + type_str(*first.in) + " but " + rank(k) + " passes " + type_str(*c.in)};
    if (is_reduction(first.kind) && c.op != first.op)
      return Failure{Type::collective, what + rank(0) + " reduces with " + std::string(name(first.op)) + " but " +
                                           rank(k) + " with " + std::string(name(c.op))};
    if (first.kind == CollectiveKind::broadcast && c.root != first.root)
      return Failure{Type::collective, what + rank(0) + " names root " + std::to_string(first.root) + " but " +
                                           rank(k) + " root " + std::to_string(c.root)};
    if (first.kind == CollectiveKind::all_to_all && (c.dim != first.dim || c.dim2 != first.dim2))
      return Failure{Type::collective, what + rank(0) + " passes split_dim " + std::to_string(first.dim) +
                                           ", concat_dim " + std::to_string(first.dim2) + " but " + rank(k) +
                                           " split_dim " + std::to_string(c.dim) + ", concat_dim " +
                                           std::to_string(c.dim2)};
    if ((first.kind == CollectiveKind::all_gather || first.kind == CollectiveKind::reduce_scatter) &&
        c.dim != first.dim)
      return Failure{Type::collective, what + rank(0) + " passes dim " + std::to_string(first.dim) + " but " +
                                           rank(k) + " dim " + std::to_string(c.dim)};
  }

  // Every member passes the same input type and arguments from here on.
  const Tensor& in = *first.in;
  const DType dtype = in.dtype();
  if (is_reduction(first.kind) && first.op == ReduceOp::mean && !is_floating(dtype))
    return Failure{Type::dtype, what + "mean of " + std::string(dtype_name(dtype)) +
                                    " is not supported (sum and max are)"};
  if (first.kind == CollectiveKind::broadcast) {
    if (first.root < 0 || first.root >= n)
      return Failure{Type::collective, what + "root " + std::to_string(first.root) +
                                           " is not a member index (0.." + std::to_string(n - 1) + ")"};
    return std::nullopt;
  }

  int dim = 0, dim2 = 0;
  if (first.kind != CollectiveKind::all_reduce) {
    for (int d : {first.dim, first.kind == CollectiveKind::all_to_all ? first.dim2 : first.dim})
      if (d < -in.rank() || d >= in.rank())
        return Failure{Type::shape, what + "dim " + std::to_string(d) + " is out of range for " + type_str(in)};
    dim = in.shape().normalize_axis(first.dim);
    dim2 = in.shape().normalize_axis(first.kind == CollectiveKind::all_to_all ? first.dim2 : first.dim);
    const bool splits = first.kind == CollectiveKind::reduce_scatter || first.kind == CollectiveKind::all_to_all;
    if (splits && in.shape()[dim] % n != 0)
      return Failure{Type::shape, what + "dim " + std::to_string(dim) + " of " + type_str(in) + " (" +
                                      std::to_string(in.shape()[dim]) + ") does not split into " + std::to_string(n) +
                                      " blocks"};
  }

  const Shape want = expected_out(first, in.shape(), n, dim, dim2);
  const Around a = first.kind == CollectiveKind::all_reduce ? Around{} : around(in.shape(), dim);
  for (std::size_t k = 0; k < slots.size(); ++k) {
    const Tensor& out = *slots[k].out;
    if (out.dtype() != dtype || out.shape() != want)
      return Failure{out.dtype() != dtype ? Type::dtype : Type::shape,
                     what + rank(k) + "'s output is " + type_str(out) + "; expected " + std::string(dtype_name(dtype)) +
                         want.str()};
    const std::byte* i = bytes_of(slots[k].in);
    const std::byte* o = bytes_of(slots[k].out);
    if (i == o && (first.kind == CollectiveKind::all_reduce || n == 1)) continue;
    // In place along dim 0 (nothing before it): this member's block of the larger tensor.
    const bool contiguous_blocks = a.outer == 1;
    if (first.kind == CollectiveKind::all_gather && contiguous_blocks && i == o + k * in.nbytes()) continue;
    if (first.kind == CollectiveKind::reduce_scatter && contiguous_blocks && o == i + k * out.nbytes()) continue;
    if (overlaps(i, in.nbytes(), o, out.nbytes()))
      return Failure{Type::collective,
                     what + rank(k) + "'s input and output overlap (in place works for all_reduce with in == out, "
                                      "all_gather and reduce_scatter with this member's block along dim 0)"};
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------
// The collectives, once every member has arrived and the calls agree
// ---------------------------------------------------------------------------

struct Job {
  std::span<const Call> slots;
  int me;  // this member's index in the group
  Workspace& ws;
  int n() const { return static_cast<int>(slots.size()); }
  const Call& mine() const { return slots[static_cast<std::size_t>(me)]; }
};

// Bytes that all members together write: large collectives stream their stores.
std::size_t bytes_written(const Job& job) {
  const Call& c = job.mine();
  const auto n = static_cast<std::size_t>(job.n());
  switch (c.kind) {
    case CollectiveKind::all_reduce: return n * c.in->nbytes();
    case CollectiveKind::all_gather: return n * c.out->nbytes();
    case CollectiveKind::reduce_scatter: return c.in->nbytes();
    case CollectiveKind::broadcast: return (n - 1) * c.in->nbytes();
    case CollectiveKind::all_to_all: return n * c.in->nbytes();
    case CollectiveKind::barrier: return 0;
  }
  return 0;
}

// Member `me` reduces slice `me` of every input and writes it into every
// output: each byte is read once and written once, and no two members touch
// the same bytes (slices start on cache lines), so in == out is safe: slice
// `me` of an input is read by this member only, in full before it is written.
void run_all_reduce(const Job& job, bool stream) {
  const Call& c = job.mine();
  const DType dtype = c.in->dtype();
  const std::size_t es = dtype_size(dtype);
  const std::int64_t count = c.in->numel();
  const auto line = static_cast<std::int64_t>(64 / es);
  const std::int64_t per = (count + job.n() * line - 1) / (job.n() * line) * line;
  const std::int64_t lo = std::min(count, job.me * per), hi = std::min(count, lo + per);
  const auto off = static_cast<std::size_t>(lo) * es;
  auto srcs = std::span(job.ws.srcs).first(job.slots.size());
  auto dsts = std::span(job.ws.dsts).first(job.slots.size());
  for (std::size_t k = 0; k < job.slots.size(); ++k) {
    srcs[k] = bytes_of(job.slots[k].in) + off;
    dsts[k] = bytes_of(job.slots[k].out) + off;
  }
  job.ws.kernels->reduce(srcs, dsts, hi - lo, dtype, c.op, stream);
}

// Member `me` reduces block `me` along dim of every input into its output,
// viewing the inputs as [outer, n, block].
void run_reduce_scatter(const Job& job, bool stream) {
  const Call& c = job.mine();
  const DType dtype = c.in->dtype();
  const std::size_t es = dtype_size(dtype);
  const Around a = around(c.in->shape(), c.in->shape().normalize_axis(c.dim));
  const std::int64_t block = a.extent / job.n() * a.inner;
  auto srcs = std::span(job.ws.srcs).first(job.slots.size());
  auto dst = std::span(job.ws.dsts).first(1);
  for (std::int64_t o = 0; o < a.outer; ++o) {
    const auto src_off = static_cast<std::size_t>((o * job.n() + job.me) * block) * es;
    for (std::size_t k = 0; k < job.slots.size(); ++k) srcs[k] = bytes_of(job.slots[k].in) + src_off;
    dst[0] = bytes_of(c.out) + static_cast<std::size_t>(o * block) * es;
    job.ws.kernels->reduce(srcs, dst, block, dtype, c.op, stream);
  }
}

// Member `me` writes its input into block `me` of every output, viewing the
// outputs as [outer, n, block]: its input is read once.
void run_all_gather(const Job& job, bool stream) {
  const Call& c = job.mine();
  const std::size_t es = dtype_size(c.in->dtype());
  const Around a = around(c.in->shape(), c.in->shape().normalize_axis(c.dim));
  const auto block = static_cast<std::size_t>(a.extent * a.inner) * es;
  const std::byte* in = bytes_of(c.in);
  const auto n = static_cast<std::size_t>(job.n()), me = static_cast<std::size_t>(job.me);
  for (std::size_t o = 0; o < static_cast<std::size_t>(a.outer); ++o) {
    const std::byte* src = in + o * block;
    std::size_t m = 0;
    for (const Call& peer : job.slots) {
      std::byte* dst = bytes_of(peer.out) + (o * n + me) * block;
      if (dst != src) job.ws.dsts[m++] = dst;  // in place: already there
    }
    job.ws.kernels->copy(src, std::span(job.ws.dsts).first(m), block, stream);
  }
}

void run_broadcast(const Job& job, bool stream) {
  const Call& c = job.mine();
  if (job.me == c.root) return;
  const std::byte* src = bytes_of(job.slots[static_cast<std::size_t>(c.root)].in);
  void* dst = bytes_of(c.in);
  if (dst != src) job.ws.kernels->copy(src, std::span(&dst, 1), c.in->nbytes(), stream);
}

// Member `me` gathers block `me` (along split_dim) of every peer's input into
// its output, peer j's block at position j along concat_dim.
void run_all_to_all(const Job& job, bool stream) {
  const Call& c = job.mine();
  const Shape& in_shape = c.in->shape();
  const int split = in_shape.normalize_axis(c.dim), concat = in_shape.normalize_axis(c.dim2);
  const std::size_t es = dtype_size(c.in->dtype());
  Shape block = in_shape;
  block[split] /= job.n();
  const std::vector<std::int64_t> in_strides = contiguous_strides(in_shape);
  const std::vector<std::int64_t> out_strides = contiguous_strides(c.out->shape());
  const auto s = static_cast<std::size_t>(split), d = static_cast<std::size_t>(concat);
  std::byte* out = bytes_of(c.out);
  for (std::size_t j = 0; j < job.slots.size(); ++j) {
    const std::byte* src =
        bytes_of(job.slots[j].in) + static_cast<std::size_t>(job.me * block[split] * in_strides[s]) * es;
    std::byte* dst = out + static_cast<std::size_t>(static_cast<std::int64_t>(j) * block[concat] * out_strides[d]) * es;
    if (dst == src) continue;  // a group of one, in place
    job.ws.kernels->copy_strided(dst, out_strides, src, in_strides, block.dims(), es, stream);
  }
}

// A group of one: out = in, unless in place.
void copy_own(const Job& job, bool stream) {
  const Call& c = job.mine();
  void* out = bytes_of(c.out);
  if (out != c.in->raw_data()) job.ws.kernels->copy(c.in->raw_data(), std::span(&out, 1), c.in->nbytes(), stream);
}

void execute(const Job& job, std::size_t stream_threshold) {
  const bool stream = bytes_written(job) >= stream_threshold;
  const Call& c = job.mine();
  const bool alone = job.n() == 1;
  switch (c.kind) {
    case CollectiveKind::all_reduce:
      if (alone) copy_own(job, stream);
      else run_all_reduce(job, stream);
      break;
    case CollectiveKind::all_gather: run_all_gather(job, stream); break;
    case CollectiveKind::reduce_scatter:
      if (alone) copy_own(job, stream);
      else run_reduce_scatter(job, stream);
      break;
    case CollectiveKind::broadcast: run_broadcast(job, stream); break;
    case CollectiveKind::all_to_all: run_all_to_all(job, stream); break;
    case CollectiveKind::barrier: break;
  }
  job.ws.kernels->after_writes(stream);  // visible to the peers before the closing barrier
}

}  // namespace

// ---------------------------------------------------------------------------
// ShmCommunicator
// ---------------------------------------------------------------------------

ShmCommunicator::ShmCommunicator(int ranks, const KernelsFor& kernels)
    : Communicator(ranks), ranks_(ranks), spin_(0), stream_threshold_(kStreamThreshold) {
  if (ranks < 1) throw Error("shared-memory communicator: needs at least one rank, got " + std::to_string(ranks));
  // Spinning only pays while every rank can have a core; with more threads
  // than cores, a spinning waiter takes the core from the peer it waits for.
  const unsigned cores = std::thread::hardware_concurrency();
  if (cores == 0 || static_cast<unsigned>(ranks) <= cores) spin_ = kSpinTime;
  workspace_.reserve(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r)
    workspace_.push_back(
        std::make_unique<Workspace>(ranks, kernels ? kernels(r) : std::make_unique<ShmKernels>()));
}

ShmCommunicator::~ShmCommunicator() = default;

void ShmCommunicator::all_reduce(const CommGroup& group, int rank, const Tensor& in, const Tensor& out, ReduceOp op) {
  run(group, rank, Call{CollectiveKind::all_reduce, op, 0, 0, 0, &in, &out});
}

void ShmCommunicator::all_gather(const CommGroup& group, int rank, const Tensor& in, const Tensor& out, int dim) {
  run(group, rank, Call{CollectiveKind::all_gather, ReduceOp::sum, dim, 0, 0, &in, &out});
}

void ShmCommunicator::reduce_scatter(const CommGroup& group, int rank, const Tensor& in, const Tensor& out, int dim,
                                     ReduceOp op) {
  run(group, rank, Call{CollectiveKind::reduce_scatter, op, dim, 0, 0, &in, &out});
}

void ShmCommunicator::broadcast(const CommGroup& group, int rank, const Tensor& x, int root) {
  run(group, rank, Call{CollectiveKind::broadcast, ReduceOp::sum, 0, 0, root, &x, nullptr});
}

void ShmCommunicator::all_to_all(const CommGroup& group, int rank, const Tensor& in, const Tensor& out, int split_dim,
                                 int concat_dim) {
  run(group, rank, Call{CollectiveKind::all_to_all, ReduceOp::sum, split_dim, concat_dim, 0, &in, &out});
}

void ShmCommunicator::barrier(const CommGroup& group, int rank) {
  run(group, rank, Call{CollectiveKind::barrier, ReduceOp::sum, 0, 0, 0, nullptr, nullptr});
}

void ShmCommunicator::run(const CommGroup& group, int rank, const Call& call) {
  const auto start = Clock::now();
  if (rank < 0 || rank >= ranks_)
    throw Error(describe(call.kind, group) + ": rank " + std::to_string(rank) + " is outside the communicator's " +
                std::to_string(ranks_) + " ranks");
  const int me = group.index_of(rank);
  if (aborted_.load(std::memory_order_acquire)) throw_aborted(call.kind, group);
  Workspace& ws = *workspace_[static_cast<std::size_t>(rank)];
  if (group.size() == 1) {
    std::span<const Call> slots(&call, 1);
    if (auto failure = validate(slots, group, *ws.kernels)) raise(*failure);
    execute(Job{slots, 0, ws}, stream_threshold_);
  } else {
    Rendezvous& rv = rendezvous_for(group);
    rv.slots[static_cast<std::size_t>(me)] = call;
    ws.kernels->before_publish();
    arrive(rv, group, me, call.kind, start);
    std::span<const Call> slots(rv.slots);
    if (auto failure = validate(slots, group, *ws.kernels)) {
      phase_barrier(rv);  // every member has read the calls before any leaves
      raise(*failure);
    }
    // A member whose kernels fail (a GPU's) still meets its peers at the
    // closing barrier, which has no timeout: leaving would hang them there.
    std::exception_ptr failed;
    try {
      execute(Job{slots, me, ws}, stream_threshold_);
    } catch (...) {
      failed = std::current_exception();
    }
    phase_barrier(rv);  // every peer is done with this member's buffers
    if (failed) {
      abort(describe(call.kind, group) + ": rank " + std::to_string(rank) + "'s kernels failed");
      std::rethrow_exception(failed);
    }
  }
  accounting().record(rank, call.kind, group.axes, bus_bytes(call.kind, call.in ? static_cast<std::int64_t>(call.in->nbytes()) : 0,
                               call.out ? static_cast<std::int64_t>(call.out->nbytes()) : 0, group.size(), me == call.root),
                     std::chrono::duration<double>(Clock::now() - start).count());
}

Rendezvous& ShmCommunicator::rendezvous_for(const CommGroup& group) {
  std::lock_guard lock(mutex_);
  auto it = rendezvous_.find(group.ranks);
  if (it != rendezvous_.end()) return *it->second;
  std::vector<int> sorted = group.ranks;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] < 0 || sorted[i] >= ranks_)
      throw Error("communication group (ranks " + join_ranks(group.ranks) + "): rank " + std::to_string(sorted[i]) +
                  " is outside the communicator's " + std::to_string(ranks_) + " ranks");
    if (i > 0 && sorted[i] == sorted[i - 1])
      throw Error("communication group (ranks " + join_ranks(group.ranks) + "): rank " + std::to_string(sorted[i]) +
                  " appears twice");
  }
  auto rv = std::make_unique<Rendezvous>(group.size());
  Rendezvous& ref = *rv;
  rendezvous_.emplace(group.ranks, std::move(rv));
  return ref;
}

void ShmCommunicator::arrive(Rendezvous& rv, const CommGroup& group, int member, CollectiveKind kind,
                             Clock::time_point start) {
  std::unique_lock lock(rv.mutex);
  if (!rv.failure.empty()) throw CollectiveError(rv.failure);
  if (aborted_.load(std::memory_order_acquire)) throw_aborted(kind, group);
  const std::uint64_t generation = rv.arrivals.load(std::memory_order_relaxed);
  rv.present[static_cast<std::size_t>(member)] = 1;
  if (++rv.arrived == rv.members) {
    rv.arrived = 0;
    std::fill(rv.present.begin(), rv.present.end(), 0);
    rv.arrivals.store(generation + 1, std::memory_order_release);
    lock.unlock();
    rv.cv.notify_all();
    return;
  }
  lock.unlock();
  if (spin_until([&] { return rv.arrivals.load(std::memory_order_acquire) != generation; }, spin_)) return;
  const auto deadline = start + timeout();
  lock.lock();
  for (;;) {
    // Once all have arrived this member takes part, even if an abort came
    // meanwhile: its peers are about to read its buffers.
    if (rv.arrivals.load(std::memory_order_acquire) != generation) return;
    if (!rv.failure.empty()) throw CollectiveError(rv.failure);
    if (aborted_.load(std::memory_order_acquire)) throw_aborted(kind, group);
    if (rv.cv.wait_until(lock, deadline) == std::cv_status::timeout &&
        rv.arrivals.load(std::memory_order_acquire) == generation) {
      std::vector<int> missing;
      for (std::size_t k = 0; k < rv.present.size(); ++k)
        if (!rv.present[k]) missing.push_back(group.ranks[k]);
      rv.failure = describe(kind, group) + ": " + (missing.size() == 1 ? "rank " : "ranks ") + join_ranks(missing) +
                   " did not arrive within " + duration_str(timeout());
      const std::string message = rv.failure;
      lock.unlock();
      rv.cv.notify_all();
      abort(message);
      throw CollectiveError(message);
    }
  }
}

void ShmCommunicator::phase_barrier(Rendezvous& rv) const {
  const std::uint32_t generation = rv.phase_generation.load(std::memory_order_acquire);
  if (rv.phase_count.fetch_add(1, std::memory_order_acq_rel) + 1 == rv.members) {
    rv.phase_count.store(0, std::memory_order_relaxed);
    rv.phase_generation.store(generation + 1, std::memory_order_release);
    rv.phase_generation.notify_all();
    return;
  }
  if (spin_until([&] { return rv.phase_generation.load(std::memory_order_acquire) != generation; }, spin_)) return;
  while (rv.phase_generation.load(std::memory_order_acquire) == generation)
    rv.phase_generation.wait(generation, std::memory_order_acquire);
}

void ShmCommunicator::throw_aborted(CollectiveKind kind, const CommGroup& group) const {
  // abort_reason_ is written once, before aborted_ is set (release).
  throw CollectiveError(describe(kind, group) + ": the communicator was aborted: " + abort_reason_);
}

void ShmCommunicator::abort(const std::string& reason) {
  std::vector<Rendezvous*> waiting;
  {
    std::lock_guard lock(mutex_);
    if (!aborted_.load(std::memory_order_relaxed)) {
      abort_reason_ = reason;
      aborted_.store(true, std::memory_order_release);
    }
    for (auto& [ranks, rv] : rendezvous_) waiting.push_back(rv.get());
  }
  // Taking each mutex orders the flag before any waiter's next check.
  for (Rendezvous* rv : waiting) {
    { std::lock_guard lock(rv->mutex); }
    rv->cv.notify_all();
  }
}

}  // namespace tessera
