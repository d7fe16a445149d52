// Splitting a kernel's work over XLA's intra-op thread pool, deterministically.
//
// Work is cut into `parts` pieces by a rule that depends only on the problem size and the
// pool's thread count, never on timing, so every run computes the same sums in the same
// order and results are identical bit for bit from run to run on one machine.

#ifndef JAXSPARSE_NATIVE_PARALLEL_H_
#define JAXSPARSE_NATIVE_PARALLEL_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

#include "xla/ffi/api/ffi.h"

namespace jaxsparse {

// Below this many multiply-adds a piece is not worth a task on another thread.
inline constexpr int64_t kMinWorkPerPart = 1 << 15;

// How many pieces to cut `work` multiply-adds into: one per pool thread, fewer when
// the pieces would be small, at most `max_parts`.
inline int64_t NumParts(xla::ffi::ThreadPool& pool, int64_t work, int64_t max_parts = 64) {
  int64_t threads = std::max<int64_t>(1, pool.num_threads());
  int64_t by_work = std::max<int64_t>(1, work / kMinWorkPerPart);
  return std::min({threads, by_work, max_parts});
}

// Calls `fn(part)` for every part in [0, parts) and returns when all are done. The calling
// thread and up to `parts - 1` tasks on the pool take parts from a shared counter, so the
// caller does all the work itself when the pool's threads are busy elsewhere, rather than
// waiting for them. A task that starts late finds no part left and touches nothing but
// the shared state it co-owns.
template <typename F>
void ParallelFor(xla::ffi::ThreadPool& pool, int64_t parts, const F& fn) {
  if (parts <= 1) {
    fn(0);
    return;
  }
  struct State {
    std::atomic<int64_t> next{0};
    std::mutex mutex;
    std::condition_variable done;
    int64_t finished = 0;
  };
  auto state = std::make_shared<State>();
  // Runs parts until none is left; only a claimed part touches `fn`.
  auto work = [parts, &fn](State& state) {
    for (int64_t part; (part = state.next.fetch_add(1)) < parts;) {
      fn(part);
      std::lock_guard<std::mutex> lock(state.mutex);
      if (++state.finished == parts) state.done.notify_one();
    }
  };
  for (int64_t task = 1; task < parts; ++task) {
    pool.Schedule([state, work] { work(*state); });
  }
  work(*state);
  std::unique_lock<std::mutex> lock(state->mutex);
  state->done.wait(lock, [&] { return state->finished == parts; });
}

// The first element of piece `part` when [0, size) is cut into `parts` near-equal pieces.
inline int64_t PieceStart(int64_t size, int64_t parts, int64_t part) {
  return size / parts * part + std::min(part, size % parts);
}

}  // namespace jaxsparse

#endif  // JAXSPARSE_NATIVE_PARALLEL_H_
