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

// Calls `fn(part)` for every part in [0, parts): part 0 on the calling thread, the others
// as tasks on the pool (or inline, when the pool cannot take them); returns when all are
// done.
template <typename F>
void ParallelFor(xla::ffi::ThreadPool& pool, int64_t parts, const F& fn) {
  if (parts <= 1) {
    fn(0);
    return;
  }
  std::mutex mutex;
  std::condition_variable done;
  int64_t remaining = parts - 1;
  for (int64_t part = 1; part < parts; ++part) {
    pool.Schedule([&, part] {
      fn(part);
      // The count changes under the lock, so the caller cannot see zero, return and
      // destroy `mutex` before this task has released it.
      std::lock_guard<std::mutex> lock(mutex);
      if (--remaining == 0) done.notify_one();
    });
  }
  fn(0);
  std::unique_lock<std::mutex> lock(mutex);
  done.wait(lock, [&] { return remaining == 0; });
}

// The first element of piece `part` when [0, size) is cut into `parts` near-equal pieces.
inline int64_t PieceStart(int64_t size, int64_t parts, int64_t part) {
  return size / parts * part + std::min(part, size % parts);
}

}  // namespace jaxsparse

#endif  // JAXSPARSE_NATIVE_PARALLEL_H_
