// Adding stored entries into the output rows their columns name (the CSR transposed
// products), in pieces over XLA's thread pool, deterministically and without building a
// transposed structure.
//
// Each piece of entries adds into rows of its own: straight into the output for the
// columns no earlier piece can reach, into a buffer of its own for the others. Once every
// piece is done, the buffers are added into the output in piece order, so each column
// gets its pieces' sums in piece order whatever the threads' timing. Where the columns
// each piece reaches are measured first (a banded structure, whose pieces of consecutive
// rows reach nearly disjoint ranges of columns), the buffers cover only the columns where
// those ranges overlap; otherwise every piece after the first buffers all n columns.

#ifndef JAXSPARSE_NATIVE_SCATTER_H_
#define JAXSPARSE_NATIVE_SCATTER_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <type_traits>
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

// The rows one piece adds into, k values a row: columns from `direct_begin` on are the
// output's own rows, columns in [buffer_begin, direct_begin) rows of the piece's buffer.
// Batch members lie `out_stride` apart in the output and `buffer_stride` in the buffer.
template <typename T>
struct ScatterTarget {
  T* out;
  T* buffer;
  int64_t buffer_begin, direct_begin, k, out_stride, buffer_stride;

  JAXSPARSE_INLINE T* Row(int64_t column) const {
    return column < direct_begin ? buffer + (column - buffer_begin) * k : out + column * k;
  }
  // The rows of all n columns as one array, for a piece whose span was not measured: the
  // first piece writes every column, the others buffer every column.
  T* AllRows() const { return direct_begin == 0 ? out : buffer - buffer_begin * k; }
  ScatterTarget Member(int64_t member) const {
    ScatterTarget target = *this;
    target.out += member * out_stride;
    target.buffer += member * buffer_stride;
    return target;
  }
};

// Every column straight into `out` (rows of k values, members `out_stride` apart).
template <typename T>
ScatterTarget<T> DirectTarget(T* out, int64_t k, int64_t out_stride) {
  return ScatterTarget<T>{out, nullptr, 0, 0, k, out_stride, 0};
}

// The columns [begin, end) one piece of entries reaches (begin == end: none).
struct ColumnSpan {
  int64_t begin = 0, end = 0;
};

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

// The span of the columns of entries [begin, end), in one pass the compiler vectorizes;
// false if one lies outside [0, n).
template <typename I>
bool MeasureColumns(const I* indices, int64_t begin, int64_t end, int64_t n, ColumnSpan& span) {
  using U = std::make_unsigned_t<I>;
  U smallest = std::numeric_limits<U>::max(), largest = 0;
  for (int64_t p = begin; p < end; ++p) {
    const U column = static_cast<U>(indices[p]);
    smallest = std::min(smallest, column);
    largest = std::max(largest, column);
  }
  if (begin >= end) return true;
  if (static_cast<uint64_t>(largest) >= ColumnLimit<I>(n)) return false;
  span = ColumnSpan{static_cast<int64_t>(smallest), static_cast<int64_t>(largest) + 1};
  return true;
}

// Runs scatter(begin, end, target, largest) over pieces of the entries [0, nnz) into
// `out` (batch members of n rows of k values), each piece through its ScatterTarget, and
// adds the buffers into `out` afterwards; every row of `out` is written, zero where no
// entry reaches it. With `measure_spans` (banded columns), the pieces' column spans are
// measured first, which also checks every column, and the scatter may read columns
// unchecked; otherwise every span is [0, n) and the scatter checks what it reads,
// recording its largest column in `largest`. The number of pieces is capped so the
// buffers stay within twice the entries. Returns whether every column lay in [0, n).
template <typename T, typename I, typename F>
bool ScatterInPieces(xla::ffi::ThreadPool& pool, const I* indices, int64_t nnz, int64_t n,
                     int64_t k, int64_t batch, int64_t work, bool measure_spans, T* out,
                     const F& scatter) {
  const int64_t max_parts =
      std::max<int64_t>(1, std::min<int64_t>(8, 1 + 2 * nnz / std::max<int64_t>(n, 1)));
  const int64_t parts = NumParts(pool, work, max_parts);
  std::vector<ColumnSpan> spans(parts, ColumnSpan{0, n});
  if (measure_spans) {
    std::atomic<bool> in_range(true);
    ParallelFor(pool, parts, [&](int64_t part) {
      spans[part] = ColumnSpan{};
      if (!MeasureColumns(indices, PieceStart(nnz, parts, part),
                          PieceStart(nnz, parts, part + 1), n, spans[part])) {
        in_range = false;
      }
    });
    if (!in_range) return false;
  }
  // Piece p writes columns [direct_begin[p], spans[p].end) of `out` itself: no earlier
  // piece's span reaches past the largest end before p. It buffers the rest of its span.
  std::vector<int64_t> direct_begin(parts), buffer_offset(parts + 1, 0);
  int64_t reached = 0;
  for (int64_t part = 0; part < parts; ++part) {
    const ColumnSpan& span = spans[part];
    direct_begin[part] = std::clamp(reached, span.begin, span.end);
    buffer_offset[part + 1] = buffer_offset[part] + batch * (direct_begin[part] - span.begin) * k;
    if (span.end > span.begin) reached = std::max(reached, span.end);
  }
  std::unique_ptr<T[]> buffers(new T[buffer_offset[parts]]);
  auto target_of = [&](int64_t part) {
    const int64_t buffered = direct_begin[part] - spans[part].begin;
    return ScatterTarget<T>{out, buffers.get() + buffer_offset[part], spans[part].begin,
                            direct_begin[part], k, n * k, buffered * k};
  };

  std::atomic<bool> ok(true);
  ParallelFor(pool, parts, [&](int64_t part) {
    const ScatterTarget<T> target = target_of(part);
    for (int64_t b = 0; b < batch; ++b) {
      std::fill(out + b * n * k + direct_begin[part] * k, out + b * n * k + spans[part].end * k,
                T(0));
    }
    std::fill(buffers.get() + buffer_offset[part], buffers.get() + buffer_offset[part + 1], T(0));
    const int64_t begin = PieceStart(nnz, parts, part), end = PieceStart(nnz, parts, part + 1);
    if (begin >= end) return;
    uint64_t largest = 0;
    scatter(begin, end, target, largest);
    if (!ColumnsInRange(largest, n)) ok = false;
  });

  // Columns between consecutive bounds are written by the same piece (or none) and
  // buffered by the same pieces: zero them where no piece wrote them, then add the
  // buffers in piece order.
  std::vector<int64_t> bounds = {0, n};
  for (int64_t part = 0; part < parts; ++part) {
    bounds.insert(bounds.end(), {spans[part].begin, direct_begin[part], spans[part].end});
  }
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  const int64_t reduce_parts = NumParts(pool, batch * n * k * parts);
  ParallelFor(pool, reduce_parts, [&](int64_t piece) {
    const int64_t first = PieceStart(n, reduce_parts, piece);
    const int64_t last = PieceStart(n, reduce_parts, piece + 1);
    for (size_t i = 0; i + 1 < bounds.size(); ++i) {
      const int64_t begin = std::max(first, bounds[i]), end = std::min(last, bounds[i + 1]);
      if (begin >= end) continue;
      bool written = false, buffered = false;
      for (int64_t part = 0; part < parts; ++part) {
        written |= begin >= direct_begin[part] && begin < spans[part].end;
        buffered |= begin >= spans[part].begin && begin < direct_begin[part];
      }
      if (written && !buffered) continue;
      for (int64_t b = 0; b < batch; ++b) {
        T* rows = out + b * n * k + begin * k;
        const int64_t size = (end - begin) * k;
        if (!written) std::fill(rows, rows + size, T(0));
        for (int64_t part = 0; part < parts; ++part) {
          if (begin < spans[part].begin || begin >= direct_begin[part]) continue;
          const T* partial = target_of(part).Member(b).Row(begin);
          for (int64_t e = 0; e < size; ++e) rows[e] += partial[e];
        }
      }
    }
  });
  return ok;
}

}  // namespace jaxsparse

#endif  // JAXSPARSE_NATIVE_SCATTER_H_
