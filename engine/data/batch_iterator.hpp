// BatchIterator: a Dataset in batches, reshuffled every epoch, each batch
// gathered one ahead on a background thread.
//
// The order of epoch e is a pure function of (seed, e) (epoch_order), so a run
// resumed with seek(position()) from a checkpoint sees exactly the batches it
// would have seen. Batches are gathered into two reused buffers (double
// buffering): while the caller trains on one, the worker fills the other, and
// after the first two batches no tensor memory is allocated.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "engine/data/dataset.hpp"

namespace tessera {

struct Batch {
  Tensor inputs;          // [rows, ...]: rows [first_row, first_row + rows) of the batch
  Tensor targets;         // [rows] or [rows, ...]
  Tensor weights;         // [rows] f32 when the dataset has weights, else undefined
  std::int64_t size = 0;  // samples: the batch size, or fewer in a last partial batch
  std::int64_t first_row = 0;  // with a RowWindow, where inputs and targets start; else 0 (all rows)
  std::int64_t rows() const { return inputs.defined() ? inputs.shape()[0] : 0; }
};

// Which rows [begin, end) of a batch of `size` samples to gather: a process of
// a job of several gathers only the rows its devices train on.
using RowWindow = std::function<std::pair<std::int64_t, std::int64_t>(std::int64_t size)>;

// The sample order of `epoch` over `n` samples: a Fisher-Yates shuffle drawing
// from Philox keyed on (seed, epoch), or 0..n-1 without `shuffle`.
std::vector<std::int64_t> epoch_order(std::int64_t n, bool shuffle, std::uint64_t seed,
                                      std::int64_t epoch);

// Samples `indices` of `dataset` copied into new tensors: the plain gather,
// without a thread or reused buffers. Throws DataError for an index out of range.
Batch gather_batch(const Dataset& dataset, std::span<const std::int64_t> indices);

// Runs on the worker thread after each gather and may change the batch in place
// (augmentation, normalisation); what it throws surfaces from next().
using BatchTransform = std::function<void(Batch&)>;

// Use from one thread at a time; the worker is internal.
class BatchIterator {
 public:
  struct Position {
    std::int64_t epoch = 0;
    std::int64_t batch = 0;  // index of the batch next() returns next
    bool operator==(const Position&) const = default;
  };

  // Starts at epoch 0, batch 0, and begins prefetching at once. The dataset's
  // tensors are shared, not copied. Throws DataError for an empty or
  // inconsistent dataset (inputs and targets of different lengths, not on the
  // CPU, weights that are not [N] f32), batch_size < 1, or drop_remainder with fewer samples than one batch.
  // With `window`, each batch holds only the rows the window gives (a
  // transform then sees those rows alone).
  BatchIterator(const Dataset& dataset, std::int64_t batch_size, bool shuffle, std::uint64_t seed,
                bool drop_remainder, BatchTransform transform = {}, RowWindow window = {});
  ~BatchIterator() = default;  // worker_ (a jthread) is stopped and joined first
  BatchIterator(const BatchIterator&) = delete;
  BatchIterator& operator=(const BatchIterator&) = delete;

  // The next batch of the current epoch, or false (and an empty `out`) once
  // the epoch is done. `out` views the iterator's buffers: it stays valid until
  // the next call to next(), start_epoch() or seek(). Rethrows an exception
  // from the worker (until start_epoch() or seek() resets the iterator).
  bool next(Batch& out);

  // Starts `epoch` at its first batch (its order: epoch_order(n, shuffle, seed, epoch)).
  void start_epoch(std::int64_t epoch);
  // Continues at a position() saved earlier; batch may equal batches_per_epoch()
  // (the epoch is done). Throws DataError for a position outside the epoch.
  void seek(std::int64_t epoch, std::int64_t batch_index);
  Position position() const;

  std::int64_t batches_per_epoch() const { return batches_per_epoch_; }
  std::int64_t batch_size() const { return batch_size_; }
  const Dataset& dataset() const { return dataset_; }

 private:
  struct Slot {
    enum class State { free, filling, ready, handed_out };
    State state = State::free;
    Tensor inputs, targets, weights;  // the reused buffers, [min(batch_size, N), ...]
    Batch batch;             // the filled part of them (or what the transform made of it)
  };

  void run(std::stop_token stop);
  void fill(Slot& slot, std::int64_t batch_index);
  bool can_fill() const;  // under mutex_

  const Dataset dataset_;
  const std::int64_t batch_size_;
  const bool shuffle_;
  const std::uint64_t seed_;
  const std::int64_t batches_per_epoch_;
  const BatchTransform transform_;
  const RowWindow window_;

  mutable std::mutex mutex_;
  std::condition_variable_any changed_;  // any change of the state below
  std::vector<std::int64_t> order_;  // this epoch's order; written only while no slot is filling
  Slot slots_[2];                    // batch b goes to slot b % 2
  std::int64_t epoch_ = 0;
  std::int64_t next_batch_ = 0;  // what next() returns next
  std::int64_t fill_batch_ = 0;  // what the worker gathers next
  std::exception_ptr error_;

  std::jthread worker_;  // last: destroyed (stopped, joined) before the state above
};

}  // namespace tessera
