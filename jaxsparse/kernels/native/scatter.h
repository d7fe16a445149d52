// Adding stored entries into the output rows their columns name (the CSR transposed
// products), in pieces over XLA's thread pool, deterministically and without building a
// transposed structure. Two ways, by how the structure's columns lie:
//
// - Banded columns (ScatterOwnedColumns): each piece of entries owns an interval of
//   columns, writes the output rows of its own columns itself and defers each entry whose
//   column another piece owns. Once every piece is done, the deferred entries are added
//   piece after piece, in entry order. The intervals are cut halfway between the columns
//   the pieces' middle entries name, so on a banded structure only entries near a cut are
//   deferred, and no piece needs a buffer or a pass of its own over the indices.
// - Scattered columns (ScatterInPieces): the first piece writes the output, each later
//   piece a buffer of all n rows; the buffers are added into the output in piece order.
//
// Either way each column gets its sums in an order fixed by the structure alone, whatever
// the threads' timing.

#ifndef JAXSPARSE_NATIVE_SCATTER_H_
#define JAXSPARSE_NATIVE_SCATTER_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <vector>

#include "arrays.h"
#include "parallel.h"
#include "xla/ffi/api/ffi.h"

namespace jaxsparse {

// out[0:size] = 0, in pieces over the pool.
template <typename T>
void ParallelZero(xla::ffi::ThreadPool& pool, T* out, int64_t size) {
  const int64_t parts = NumParts(pool, size);
  ParallelFor(pool, parts, [&](int64_t part) {
    std::fill(out + PieceStart(size, parts, part), out + PieceStart(size, parts, part + 1), T(0));
  });
}

// Whether every column read (their largest, as unsigned) lies in [0, n); with no column
// (n = 0) the kernels have refused any entry, so nothing was read.
inline bool ColumnsInRange(uint64_t largest, int64_t n) {
  return n == 0 || largest < static_cast<uint64_t>(n);
}

// The bound below which a column index of type I, read as unsigned, lies in [0, n): a
// negative one reads as at least 2^(bits - 1), beyond any column the type can name.
template <typename I>
constexpr uint64_t ColumnLimit(int64_t n) {
  return std::min<uint64_t>(n, static_cast<uint64_t>(std::numeric_limits<I>::max()) + 1);
}

// Column index `column` as unsigned: a negative one reads as at least 2^63, beyond n.
template <typename I>
JAXSPARSE_INLINE uint64_t AsColumn(I column) {
  return static_cast<uint64_t>(static_cast<int64_t>(column));
}

// The columns [begin, end) whose output rows one piece writes itself.
struct OwnedColumns {
  uint64_t begin = 0, end = 0;

  // Whether `column` is one of them (and so lies in [0, n)).
  JAXSPARSE_INLINE bool Hold(uint64_t column) const { return column - begin < end - begin; }
};

// An entry whose column another piece owns, with its row, added after every piece is done.
struct DeferredEntry {
  int64_t entry, row;
};

// The entries one piece defers, with the largest of their columns. Deferring is the rare
// case, called out of line, so that the loops around it keep their values in registers.
class Deferrals {
 public:
  explicit Deferrals(std::vector<DeferredEntry>& kept) : kept_(kept) {}
  Deferrals(const Deferrals&) = delete;
  Deferrals& operator=(const Deferrals&) = delete;

  __attribute__((noinline)) void Defer(int64_t entry, int64_t row, uint64_t column) {
    kept_.push_back(DeferredEntry{entry, row});
    largest_ = std::max(largest_, column);
  }
  uint64_t largest() const { return largest_; }

 private:
  std::vector<DeferredEntry>& kept_;
  uint64_t largest_ = 0;
};

// Cuts the columns [0, n) into one interval per piece of the entries [0, nnz): the pieces
// in the order of the column their middle entry names (ties in piece order), each owning
// the columns from halfway to the previous piece's to halfway to the next one's. Reads
// one column index per piece, as a number only.
template <typename I>
std::vector<OwnedColumns> OwnColumns(const I* indices, int64_t nnz, int64_t n, int64_t parts) {
  std::vector<uint64_t> middle(parts, static_cast<uint64_t>(n));
  for (int64_t part = 0; part < parts; ++part) {
    const int64_t begin = PieceStart(nnz, parts, part), end = PieceStart(nnz, parts, part + 1);
    if (begin < end) {
      middle[part] =
          std::min(AsColumn(indices[begin + (end - begin) / 2]), static_cast<uint64_t>(n));
    }
  }
  std::vector<int64_t> order(parts);
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return middle[a] < middle[b]; });
  std::vector<OwnedColumns> owned(parts);
  uint64_t cut = 0;
  for (int64_t i = 0; i < parts; ++i) {
    const uint64_t next =
        i + 1 < parts ? (middle[order[i]] + middle[order[i + 1]]) / 2 : static_cast<uint64_t>(n);
    owned[order[i]] = OwnedColumns{cut, next};
    cut = next;
  }
  return owned;
}

// Runs scatter(begin, end, owned, deferrals) over pieces of the entries [0, nnz) of a
// banded structure, into `out` (batch members of n rows of k values, n * k apart):
// `scatter` adds each entry whose column `owned` holds into its rows of `out`, and hands
// each other entry to `deferrals`, which keeps it and the largest of their columns. Each
// piece first zeroes the rows of its own columns. Once all are done, and if every column
// lay in [0, n), add_deferred(entry) adds the deferred entries, each piece those of its
// own columns, piece after piece in entry order. Returns whether every column lay in
// [0, n).
template <typename T, typename I, typename F, typename G>
bool ScatterOwnedColumns(xla::ffi::ThreadPool& pool, const I* indices, int64_t nnz, int64_t n,
                         int64_t k, int64_t batch, int64_t work, T* out, const F& scatter,
                         const G& add_deferred) {
  const int64_t parts = NumParts(pool, work);
  const std::vector<OwnedColumns> owned = OwnColumns(indices, nnz, n, parts);
  // The lists keep their memory from call to call on this thread: grown afresh on every
  // call, they would fault in new pages each time.
  // (A reference, so that the pool's threads reach this thread's lists.)
  static thread_local std::vector<std::vector<DeferredEntry>> kept_lists;
  std::vector<std::vector<DeferredEntry>>& deferred = kept_lists;
  if (static_cast<int64_t>(deferred.size()) < parts) deferred.resize(parts);
  for (int64_t part = 0; part < parts; ++part) deferred[part].clear();
  std::atomic<bool> ok(true);
  ParallelFor(pool, parts, [&](int64_t part) {
    for (int64_t b = 0; b < batch; ++b) {
      T* member = out + b * n * k;
      std::fill(member + owned[part].begin * k, member + owned[part].end * k, T(0));
    }
    const int64_t begin = PieceStart(nnz, parts, part), end = PieceStart(nnz, parts, part + 1);
    if (begin >= end) return;
    Deferrals deferrals(deferred[part]);
    scatter(begin, end, owned[part], deferrals);
    if (!ColumnsInRange(deferrals.largest(), n)) ok = false;
  });
  if (!ok) return false;
  ParallelFor(pool, parts, [&](int64_t owner) {
    for (int64_t part = 0; part < parts; ++part) {
      for (const DeferredEntry& entry : deferred[part]) {
        if (owned[owner].Hold(AsColumn(indices[entry.entry]))) add_deferred(entry);
      }
    }
  });
  return true;
}

// Runs scatter(begin, end, rows) over pieces of the entries [0, nnz) of a structure with
// scattered columns: the first piece adds into `out` itself, each later one into a zeroed
// buffer of all n rows (`rows`: member 0's n rows of k values, members n * k apart),
// checking the columns before it writes and returning whether they lay in [0, n); the
// buffers are then added into `out` in piece order. The pieces are capped so the buffers
// stay within twice the entries. Returns whether every column lay in [0, n).
template <typename T, typename F>
bool ScatterInPieces(xla::ffi::ThreadPool& pool, int64_t nnz, int64_t n, int64_t k, int64_t batch,
                     int64_t work, T* out, const F& scatter) {
  const int64_t max_parts =
      std::max<int64_t>(1, std::min<int64_t>(8, 1 + 2 * nnz / std::max<int64_t>(n, 1)));
  const int64_t parts = NumParts(pool, work, max_parts);
  const int64_t size = batch * n * k;
  std::unique_ptr<T[]> buffers(new T[(parts - 1) * size]);
  std::atomic<bool> ok(true);
  ParallelFor(pool, parts, [&](int64_t part) {
    T* rows = part == 0 ? out : buffers.get() + (part - 1) * size;
    std::fill(rows, rows + size, T(0));
    const int64_t begin = PieceStart(nnz, parts, part), end = PieceStart(nnz, parts, part + 1);
    if (begin >= end) return;
    if (!scatter(begin, end, rows)) ok = false;
  });
  if (parts > 1) {
    const int64_t reduce_parts = NumParts(pool, size * parts);
    ParallelFor(pool, reduce_parts, [&](int64_t piece) {
      const int64_t first = PieceStart(size, reduce_parts, piece);
      const int64_t last = PieceStart(size, reduce_parts, piece + 1);
      for (int64_t part = 1; part < parts; ++part) {
        const T* partial = buffers.get() + (part - 1) * size;
        for (int64_t e = first; e < last; ++e) out[e] += partial[e];
      }
    });
  }
  return ok;
}

}  // namespace jaxsparse

#endif  // JAXSPARSE_NATIVE_SCATTER_H_
