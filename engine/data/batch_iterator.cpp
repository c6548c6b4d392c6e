#include "engine/data/batch_iterator.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "backends/philox.hpp"
#include "engine/data/detail.hpp"

namespace tessera {
namespace {

// Fills `order` (n entries) with the order of `epoch`.
void make_order(std::span<std::int64_t> order, bool shuffle, std::uint64_t seed,
                std::int64_t epoch) {
  std::iota(order.begin(), order.end(), std::int64_t{0});
  if (!shuffle) return;
  const std::uint64_t key = data_detail::stream_key(seed, static_cast<std::uint64_t>(epoch));
  for (std::size_t i = order.size(); i-- > 1;) {
    // 64 random bits per draw: the modulo's bias is below n / 2^64.
    philox::Block b = philox::philox4x32(i, 1, key);
    std::uint64_t r = std::uint64_t{b.v[0]} | (std::uint64_t{b.v[1]} << 32);
    std::swap(order[i], order[static_cast<std::size_t>(r % (i + 1))]);
  }
}

// Copies rows `indices` of `src` ([N, ...]) to the first rows of `dst`.
void gather_rows(const Tensor& src, std::span<const std::int64_t> indices, const Tensor& dst) {
  const std::size_t row_bytes = src.nbytes() / static_cast<std::size_t>(src.shape()[0]);
  const auto* from = static_cast<const std::uint8_t*>(src.raw_data());
  auto* to = static_cast<std::uint8_t*>(dst.raw_data());
  for (std::size_t i = 0; i < indices.size(); ++i)
    std::memcpy(to + i * row_bytes, from + static_cast<std::size_t>(indices[i]) * row_bytes,
                row_bytes);
}

// `shape` with its leading extent replaced by `rows`.
Shape with_rows(const Shape& shape, std::int64_t rows) {
  std::vector<std::int64_t> dims = shape.dims();
  dims[0] = rows;
  return Shape(std::move(dims));
}

// The first `rows` rows of `buffer` (the whole tensor when they are all of it).
Tensor leading_rows(const Tensor& buffer, std::int64_t rows) {
  if (rows == buffer.shape()[0]) return buffer;
  return Tensor::view(buffer.buffer(), 0, with_rows(buffer.shape(), rows), buffer.dtype());
}

void check_dataset(const Dataset& d, const char* what) {
  auto describe = [](const Tensor& t) {
    return t.defined() ? t.describe() : std::string("undefined");
  };
  const std::string tensors = " (inputs " + describe(d.inputs) + ", targets " +
                              describe(d.targets) + (d.source.empty() ? "" : ", from " + d.source) +
                              ")";
  if (!d.inputs.defined() || !d.targets.defined() || d.inputs.rank() == 0 || d.targets.rank() == 0)
    throw DataError(std::string(what) + ": inputs and targets must both be [N, ...] tensors" +
                    tensors);
  if (d.inputs.shape()[0] != d.targets.shape()[0])
    throw DataError(std::string(what) + ": inputs and targets hold different sample counts" +
                    tensors);
  if (d.inputs.shape()[0] == 0)
    throw DataError(std::string(what) + ": the dataset is empty" + tensors);
  if (d.inputs.device().kind != DeviceKind::cpu || d.targets.device().kind != DeviceKind::cpu)
    throw DataError(std::string(what) + ": the dataset must be in host memory" + tensors);
  if (d.weights.defined() && (d.weights.shape() != Shape{d.inputs.shape()[0]} || d.weights.dtype() != DType::f32 ||
                              d.weights.device().kind != DeviceKind::cpu))
    throw DataError(std::string(what) + ": sample weights must be one f32 per sample in host memory, got " +
                    d.weights.describe() + tensors);
}

std::int64_t checked_batches(const Dataset& dataset, std::int64_t batch_size, bool drop_remainder) {
  check_dataset(dataset, "BatchIterator");
  if (batch_size < 1)
    throw DataError("BatchIterator: batch size must be at least 1, got " +
                    std::to_string(batch_size));
  const std::int64_t n = dataset.size();
  if (drop_remainder && n < batch_size)
    throw DataError("BatchIterator: " + std::to_string(n) + " samples" +
                    (dataset.source.empty() ? "" : " of " + dataset.source) +
                    " do not fill one batch of " + std::to_string(batch_size) +
                    " and drop_remainder is set: every epoch would be empty");
  return drop_remainder ? n / batch_size : (n + batch_size - 1) / batch_size;
}

}  // namespace

std::vector<std::int64_t> epoch_order(std::int64_t n, bool shuffle, std::uint64_t seed,
                                      std::int64_t epoch) {
  if (n < 0 || epoch < 0)
    throw DataError("epoch_order: n (" + std::to_string(n) + ") and epoch (" +
                    std::to_string(epoch) + ") must not be negative");
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  make_order(order, shuffle, seed, epoch);
  return order;
}

Batch gather_batch(const Dataset& dataset, std::span<const std::int64_t> indices) {
  check_dataset(dataset, "gather_batch");
  const std::int64_t n = dataset.size();
  for (std::int64_t i : indices)
    if (i < 0 || i >= n)
      throw DataError("gather_batch: sample " + std::to_string(i) + " is outside the dataset of " +
                      std::to_string(n));
  const auto rows = static_cast<std::int64_t>(indices.size());
  Batch batch{Tensor::empty(with_rows(dataset.inputs.shape(), rows), dataset.inputs.dtype()),
              Tensor::empty(with_rows(dataset.targets.shape(), rows), dataset.targets.dtype()), {}, rows};
  gather_rows(dataset.inputs, indices, batch.inputs);
  gather_rows(dataset.targets, indices, batch.targets);
  if (dataset.weights.defined()) {
    batch.weights = Tensor::empty(Shape{rows}, DType::f32);
    gather_rows(dataset.weights, indices, batch.weights);
  }
  return batch;
}

BatchIterator::BatchIterator(const Dataset& dataset, std::int64_t batch_size, bool shuffle,
                             std::uint64_t seed, bool drop_remainder, BatchTransform transform, RowWindow window)
    : dataset_(dataset),
      batch_size_(batch_size),
      shuffle_(shuffle),
      seed_(seed),
      batches_per_epoch_(checked_batches(dataset, batch_size, drop_remainder)),
      transform_(std::move(transform)),
      window_(std::move(window)),
      order_(static_cast<std::size_t>(dataset.size())) {
  make_order(order_, shuffle_, seed_, 0);
  worker_ = std::jthread([this](std::stop_token stop) { run(stop); });
}

bool BatchIterator::can_fill() const {
  return !error_ && fill_batch_ < batches_per_epoch_ &&
         slots_[fill_batch_ % 2].state == Slot::State::free;
}

void BatchIterator::run(std::stop_token stop) {
  std::unique_lock lock(mutex_);
  for (;;) {
    if (!changed_.wait(lock, stop, [this] { return can_fill(); })) return;  // stop requested
    const std::int64_t index = fill_batch_++;
    Slot& slot = slots_[index % 2];
    slot.state = Slot::State::filling;
    lock.unlock();
    std::exception_ptr error;
    try {
      fill(slot, index);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    slot.state = error ? Slot::State::free : Slot::State::ready;
    if (error) error_ = error;
    changed_.notify_all();
  }
}

void BatchIterator::fill(Slot& slot, std::int64_t batch_index) {
  const std::int64_t first = batch_index * batch_size_;
  const std::int64_t size = std::min(batch_size_, dataset_.size() - first);
  auto [begin, end] = window_ ? window_(size) : std::pair<std::int64_t, std::int64_t>{0, size};
  if (begin < 0 || end > size || begin >= end)
    throw DataError("batch iterator: the row window " + std::to_string(begin) + ".." + std::to_string(end) +
                    " does not lie in a batch of " + std::to_string(size));
  const std::int64_t rows = end - begin;
  if (!slot.inputs.defined()) {  // the only allocations: once per slot
    const std::int64_t capacity = std::min(batch_size_, dataset_.size());
    slot.inputs =
        Tensor::empty(with_rows(dataset_.inputs.shape(), capacity), dataset_.inputs.dtype());
    slot.targets =
        Tensor::empty(with_rows(dataset_.targets.shape(), capacity), dataset_.targets.dtype());
    if (dataset_.weights.defined()) slot.weights = Tensor::empty(Shape{capacity}, DType::f32);
  }
  std::span<const std::int64_t> indices(order_.data() + first + begin, static_cast<std::size_t>(rows));
  gather_rows(dataset_.inputs, indices, slot.inputs);
  gather_rows(dataset_.targets, indices, slot.targets);
  Tensor weights;
  if (slot.weights.defined()) {
    gather_rows(dataset_.weights, indices, slot.weights);
    weights = leading_rows(slot.weights, rows);
  }
  slot.batch = Batch{leading_rows(slot.inputs, rows), leading_rows(slot.targets, rows), weights, size, begin};
  if (transform_) transform_(slot.batch);
}

bool BatchIterator::next(Batch& out) {
  std::unique_lock lock(mutex_);
  // The caller is done with the batch it holds: its slot may be refilled.
  for (Slot& slot : slots_)
    if (slot.state == Slot::State::handed_out) slot.state = Slot::State::free;
  changed_.notify_all();
  out = Batch{};
  if (next_batch_ >= batches_per_epoch_) return false;
  Slot& slot = slots_[next_batch_ % 2];
  changed_.wait(lock, [&] { return slot.state == Slot::State::ready || error_; });
  if (slot.state != Slot::State::ready) std::rethrow_exception(error_);
  slot.state = Slot::State::handed_out;
  out = slot.batch;
  ++next_batch_;
  return true;
}

void BatchIterator::start_epoch(std::int64_t epoch) { seek(epoch, 0); }

void BatchIterator::seek(std::int64_t epoch, std::int64_t batch_index) {
  if (epoch < 0 || batch_index < 0 || batch_index > batches_per_epoch_)
    throw DataError("BatchIterator::seek: position (epoch " + std::to_string(epoch) + ", batch " +
                    std::to_string(batch_index) + ") is outside an epoch of " +
                    std::to_string(batches_per_epoch_) + " batches");
  std::unique_lock lock(mutex_);
  // order_ and the slots change only while the worker is not gathering.
  changed_.wait(lock, [this] {
    return slots_[0].state != Slot::State::filling && slots_[1].state != Slot::State::filling;
  });
  if (epoch != epoch_ && shuffle_) make_order(order_, shuffle_, seed_, epoch);
  for (Slot& slot : slots_) slot.state = Slot::State::free;
  epoch_ = epoch;
  next_batch_ = fill_batch_ = batch_index;
  error_ = nullptr;
  changed_.notify_all();
}

BatchIterator::Position BatchIterator::position() const {
  std::lock_guard lock(mutex_);
  return Position{epoch_, next_batch_};
}

}  // namespace tessera
