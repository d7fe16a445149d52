// CSR kernels for CPU: the product A @ X, the transposed product A^T @ G and the sampled
// product (the gradient in the values), for float32/float64/complex64/complex128 values
// with int32 or int64 indices, for one matrix or a batch of matrices sharing a structure.
//
// Row i holds the entries p in [indptr[i], indptr[i + 1]). Work is split by stored entries,
// not rows (parallel.h), so a power-law row is shared by several threads: a row cut by a
// piece boundary gets each later piece's partial sum added in piece order after all pieces
// finish. Every handler first checks its buffers' types and shapes (buffer_checks.h); every
// kernel then checks the structure it reads: the index pointer before use (the product: its
// ends first, then a chunk of rows at a time just before the chunk is read), and the column
// indices a chunk at a time just before the chunk is used (ChunkColumnsInRange) or, in the
// transposed products on banded columns, against the interval of columns the piece owns
// (scatter.h). A bad structure is an InvalidArgument error, and nothing out of range is
// ever read or written. Checking a chunk in one vectorized pass leaves the kernels' loops
// only the arithmetic, where clamping each column as it is read would not.
//
// Kernels with k >= 2 on scattered columns prefetch operand rows ahead into the L2 cache
// (ScatteredColumns, PrefetchAhead), and rows of 64 bytes or more are written past the
// cache (StreamStore). At k = 1 on banded columns, runs of rows of one short length (a
// stencil's inner rows) are summed by loops unrolled for that length (SumEvenRows,
// PullbackEvenRows). Rows of float or double sums are whole vector registers
// (RowAccumulator). The measurements behind each choice: benchmarks/results/native-kernels.md.
//
// Batches (the contract of `_primitive.py`): values `(B, nnz)`, dense operands
// `(B, rows, k)`, results `(B, ...)`; an operand without the leading axis is shared by
// the batch. A piece of work walks its entries in chunks of kChunkEntries and runs every
// batch member over a chunk before the next, so the structure is read from memory once
// for the whole batch; with one shared vector, groups of members also share each entry's
// column and vector value (SharedVectorRows).

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "arrays.h"
#include "buffer_checks.h"
#include "dispatch.h"
#include "handlers.h"
#include "pages.h"
#include "parallel.h"
#include "scatter.h"

namespace jaxsparse {
namespace {

// How far ahead (in entries) a product with k >= 2 and scattered columns prefetches
// operand rows: far enough for the misses of many rows to overlap, near enough that the
// rows are still cached when summed.
constexpr int64_t kPrefetchEntries = 128;

// Entries per chunk of a batched call: their indices stay in the L1 cache while every
// member of the batch reads them.
constexpr int64_t kChunkEntries = 8192;

// Entries per chunk of a kernel over one matrix, whose columns are checked in one pass
// (ChunkColumnsInRange) just before the kernel reads them. On banded columns the chunk is
// small, so it is reread from the L1 cache and a stencil's runs of even rows fill whole
// chunks (SumEvenRows); on scattered columns it is large, since each chunk's checks stall
// the cache misses of the sums around them.
constexpr int64_t CheckedChunkEntries(bool scattered) { return scattered ? 16384 : 256; }

// Checks indptr[0] == 0, indptr[m] == nnz and that indptr never decreases (in pieces over
// the pool: it is a pass over m + 1 values before the kernel may trust any of them). The
// mark of an invalid transpose is named as such: the user never wrote that indptr.
template <typename I>
ffi::Error CheckIndptr(ffi::ThreadPool& pool, const I* indptr, int64_t m, int64_t nnz) {
  if (indptr[0] == kInvalidTransposeIndptr && indptr[m] == kInvalidTransposeIndptr) {
    return ffi::Error::InvalidArgument(
        "invalid CSR structure: the transpose (A.T under jit) of a matrix A whose indices or "
        "indptr are invalid; A.check() names the fault");
  }
  if (indptr[0] != 0) {
    return ffi::Error::InvalidArgument("CSR index pointer should start with 0, got indptr[0] = " +
                                       std::to_string(indptr[0]));
  }
  const int64_t parts = NumParts(pool, m);
  std::vector<int64_t> first_decrease(parts, m);
  ParallelFor(pool, parts, [&](int64_t part) {
    const int64_t end = PieceStart(m, parts, part + 1);
    for (int64_t row = PieceStart(m, parts, part); row < end; ++row) {
      if (indptr[row + 1] < indptr[row]) {
        first_decrease[part] = row;
        return;
      }
    }
  });
  const int64_t row = *std::min_element(first_decrease.begin(), first_decrease.end());
  if (row < m) {
    return ffi::Error::InvalidArgument("CSR indptr must be a non-decreasing sequence: indptr[" +
                                       std::to_string(row + 1) +
                                       "] = " + std::to_string(indptr[row + 1]) + " < indptr[" +
                                       std::to_string(row) + "] = " + std::to_string(indptr[row]));
  }
  if (indptr[m] != nnz) {
    return ffi::Error::InvalidArgument("last value of CSR index pointer should be nnz = " +
                                       std::to_string(nnz) + ", got " + std::to_string(indptr[m]));
  }
  return ffi::Error::Success();
}

// CheckIndptr's error for an index pointer a kernel found out of order as it went (which
// implies one of CheckIndptr's faults); its fallback is never expected to be returned.
template <typename I>
ffi::Error IndptrError(ffi::ThreadPool& pool, const I* indptr, int64_t m, int64_t nnz) {
  ffi::Error error = CheckIndptr(pool, indptr, m, nnz);
  if (!error.success()) return error;
  return ffi::Error::InvalidArgument("CSR index pointer out of order");
}

// Whether indptr[first_row:last_row + 1] never decreases and lies within [0, nnz]: the
// rows of a chunk, checked in one pass the compiler vectorizes just before the product
// reads them. With indptr[0] == 0 and indptr[m] == nnz checked, chunks covering every row
// check the whole index pointer without a pass of its own over memory.
template <typename I>
JAXSPARSE_INLINE bool ChunkRowsInOrder(const I* indptr, int64_t first_row, int64_t last_row,
                                       int64_t nnz) {
  int decreases = 0;
  for (int64_t row = first_row; row < last_row; ++row) decreases |= indptr[row + 1] < indptr[row];
  return decreases == 0 && indptr[first_row] >= 0 && indptr[last_row] <= nnz;
}

ffi::Error ColumnError(int64_t n) {
  return ffi::Error::InvalidArgument("CSR column index out of range: indices must lie in [0, " +
                                     std::to_string(n) + ")");
}

// The row holding entry p (the last row starting at or before p).
template <typename I>
int64_t RowOf(const I* indptr, int64_t m, int64_t p) {
  return std::upper_bound(indptr, indptr + m + 1, static_cast<I>(p)) - indptr - 1;
}

// The first row starting at or after entry p (m if none).
template <typename I>
int64_t FirstRowFrom(const I* indptr, int64_t m, int64_t p) {
  return std::lower_bound(indptr, indptr + m, static_cast<I>(p)) - indptr;
}

// Column `column` (AsColumn) clamped into [0, n) for a read (n >= 1), branch-free: a
// column out of range reads the last row, and the caller reports an error before the
// result is used.
JAXSPARSE_INLINE uint64_t ClampedColumn(uint64_t column, int64_t n) {
  return std::min(column, static_cast<uint64_t>(n - 1));
}

// Whether the columns of the entries [begin, end) all lie in [0, n), in one pass the
// compiler vectorizes (read as unsigned: see ColumnLimit).
template <typename I>
JAXSPARSE_INLINE bool ChunkColumnsInRange(const I* indices, int64_t begin, int64_t end, int64_t n) {
  using U = std::make_unsigned_t<I>;
  U largest = 0;
  for (int64_t p = begin; p < end; ++p) largest = std::max(largest, static_cast<U>(indices[p]));
  return begin == end || static_cast<uint64_t>(largest) < ColumnLimit<I>(n);
}

// Calls visit(chunk, chunk_end, chunk_row) for the chunks [chunk, chunk_end) of
// `chunk_size` entries that cut [begin, end), chunk_row the row of entry `chunk`, each
// after checking its columns (ChunkColumnsInRange); returns false, without visiting it, at
// the first chunk holding a column outside [0, n). `indptr` must be checked in order.
template <typename I, typename F>
JAXSPARSE_INLINE bool ForCheckedChunks(const I* indices, const I* indptr, int64_t m, int64_t n,
                                       int64_t begin, int64_t end, int64_t chunk_size,
                                       const F& visit) {
  int64_t chunk_row = RowOf(indptr, m, begin);
  for (int64_t chunk = begin; chunk < end; chunk += chunk_size) {
    const int64_t chunk_end = std::min(end, chunk + chunk_size);
    while (indptr[chunk_row + 1] <= chunk) ++chunk_row;
    if (!ChunkColumnsInRange(indices, chunk, chunk_end, n)) return false;
    visit(chunk, chunk_end, chunk_row);
  }
  return true;
}

// Asks for the rows `rows + indices[p] * k` of the entries p kPrefetchEntries after the
// entries [begin, end) being summed (up to `limit`), so that accesses to rows scattered
// through memory overlap rather than wait one after another. Only columns in [0, n) are
// asked for. A row of up to 64 bytes is asked for by its first byte; a longer one by each
// cache line it spans, since the hardware does not follow a row past its first line. The
// rows go into the L2 cache, not the L1 (prefetcht1): the L1 is too small to hold them
// until they are summed.
template <typename T, typename I>
JAXSPARSE_INLINE void PrefetchAhead(const T* rows, const I* indices, int64_t begin, int64_t end,
                                    int64_t limit, int64_t n, int64_t k) {
  const int64_t stop = std::min(end + kPrefetchEntries, limit);
  const uintptr_t row_bytes = static_cast<uintptr_t>(k) * sizeof(T);
  for (int64_t p = begin + kPrefetchEntries; p < stop; ++p) {
    const uint64_t column = static_cast<uint64_t>(indices[p]);
    if (column >= static_cast<uint64_t>(n)) continue;
    if (row_bytes <= 64) {
      __builtin_prefetch(rows + column * k, 0, 2);
      continue;
    }
    const uintptr_t row = reinterpret_cast<uintptr_t>(rows + column * k);
    for (uintptr_t line = row & ~uintptr_t{63}; line < row + row_bytes; line += 64) {
      __builtin_prefetch(reinterpret_cast<const void*>(line), 0, 2);
    }
  }
}

// out[c0:c0 + W] = sum over entries p in [begin, end) of values[p] * x[indices[p], c0:c0 + W]
// with W a compile-time width, so the W sums stay in registers.
template <int W, typename T, typename I>
JAXSPARSE_INLINE void SumColumnBlock(const T* values, const I* indices, const T* x, int64_t k,
                                     int64_t c0, int64_t begin, int64_t end, T* out) {
  RowAccumulator<W, T> accumulator;
  for (int64_t p = begin; p < end; ++p) {
    accumulator.Add(values[p], x + static_cast<int64_t>(indices[p]) * k + c0);
  }
  if constexpr (W * sizeof(T) >= 64) {
    T sums[W];
    accumulator.CopyTo(sums);
    StreamStore<W>(out + c0, sums);
  } else {
    accumulator.CopyTo(out + c0);
  }
}

// out[0:k] = sum of values[p] * x[indices[p]] over p in [begin, end), columns checked.
// Inlined: with a few entries per row, a call per row costs more than the sums.
template <typename T, typename I>
JAXSPARSE_INLINE void RowSum(const T* values, const I* indices, const T* x, int64_t k,
                             int64_t begin, int64_t end, T* out) {
  ForColumnBlocks<T>(k, 0, [&](auto width, int64_t c0) {
    SumColumnBlock<decltype(width)::value>(values, indices, x, k, c0, begin, end, out);
  });
}

// The longest rows SumEvenRows and PullbackEvenRows take: longer stencil rows (7-point)
// alternate between lengths too often for an unrolled loop per length to pay.
constexpr int64_t kLongestEvenRow = 6;

// The number of entries of each row in [first_row, last_row) when every one of them has
// the same number, from 1 to kLongestEvenRow, else 0, in one pass the compiler
// vectorizes (the rows' `indptr` checked in order: ChunkRowsInOrder).
template <typename I>
JAXSPARSE_INLINE int64_t EvenRowLength(const I* indptr, int64_t first_row, int64_t last_row) {
  if (last_row <= first_row) return 0;
  const I length = indptr[first_row + 1] - indptr[first_row];
  int uneven = 0;
  for (int64_t row = first_row; row < last_row; ++row) {
    uneven |= static_cast<I>(indptr[row + 1] - indptr[row]) != length;
  }
  return uneven || length < 1 || length > kLongestEvenRow ? 0 : static_cast<int64_t>(length);
}

// Calls f(std::integral_constant<int, L>()) for L == length in [1, kLongestEvenRow].
template <int L = 1, typename F>
JAXSPARSE_INLINE void WithRowLength(int64_t length, const F& f) {
  if (length == L) {
    f(std::integral_constant<int, L>());
  } else if constexpr (L < kLongestEvenRow) {
    WithRowLength<L + 1>(length, f);
  }
}

// out[r] = sum of values[r * L + j] * x[indices[r * L + j]] over j in [0, L), for rows r
// in [0, rows) of L entries each (k = 1, columns in range), the entries in the order of
// ProductRows: with L known at compile time the row loop has no inner loop.
template <int L, typename T, typename I>
JAXSPARSE_INLINE void SumEvenRows(const T* values, const I* indices, const T* x, int64_t rows,
                                  T* out) {
  for (int64_t r = 0; r < rows; ++r) {
    T sum = T(0);
    for (int j = 0; j < L; ++j) sum += values[r * L + j] * x[indices[r * L + j]];
    out[r] = sum;
  }
}

// Rows [first_row, last_row) of one member's product, entries cut off at `end`, their
// columns checked.
template <typename T, typename I>
JAXSPARSE_INLINE void ProductRows(const T* values, const I* indices, const I* indptr,
                                  const T* dense, int64_t n, int64_t k, int64_t first_row,
                                  int64_t last_row, int64_t end, bool prefetch, T* out) {
  if (k == 1) {
    // Rows of one length, none cut off at `end` (a stencil's inner rows).
    if (const int64_t length = EvenRowLength(indptr, first_row, last_row);
        length > 0 && indptr[last_row] <= end) {
      const int64_t first = indptr[first_row];
      WithRowLength(length, [&](auto row_length) {
        SumEvenRows<decltype(row_length)::value>(values + first, indices + first, dense,
                                                 last_row - first_row, out + first_row);
      });
      return;
    }
    // The common SpMV, its row loop written out for the compiler.
    for (int64_t row = first_row; row < last_row; ++row) {
      const int64_t row_end = std::min<int64_t>(indptr[row + 1], end);
      T sum = T(0);
      for (int64_t p = indptr[row]; p < row_end; ++p) sum += values[p] * dense[indices[p]];
      out[row] = sum;
    }
    return;
  }
  for (int64_t row = first_row; row < last_row; ++row) {
    const int64_t row_begin = indptr[row];
    const int64_t row_end = std::min<int64_t>(indptr[row + 1], end);
    if (prefetch) PrefetchAhead(dense, indices, row_begin, row_end, end, n, k);
    RowSum(values, indices, dense, k, row_begin, row_end, out + row * k);
  }
}

// Rows [first_row, last_row) of G members' products with one shared vector (k = 1), entries
// cut off at `end`: each entry's column and vector value are read once for the G members,
// whose G sums run side by side (each in the order of a single product). Columns checked.
template <int G, typename T, typename I>
JAXSPARSE_INLINE void SharedVectorRows(const T* values, int64_t values_stride, const I* indices,
                                       const I* indptr, const T* x, int64_t first_row,
                                       int64_t last_row, int64_t end, T* out, int64_t out_stride) {
  for (int64_t row = first_row; row < last_row; ++row) {
    const int64_t row_end = std::min<int64_t>(indptr[row + 1], end);
    T sums[G] = {};
    for (int64_t p = indptr[row]; p < row_end; ++p) {
      const T value = x[indices[p]];
      for (int j = 0; j < G; ++j) sums[j] += values[j * values_stride + p] * value;
    }
    for (int j = 0; j < G; ++j) out[j * out_stride + row] = sums[j];
  }
}

// Whether the columns of consecutive rows are scattered, judged on a sample of pairs of
// rows: a banded or stencil structure, where most entries of a row sit within a few
// columns of an entry of the row before, is read by the hardware's own prefetching, and
// software prefetches only cost it time; random columns gain from them. Compares column
// indices without using them as addresses, and skips a sampled pair whose `indptr` values
// are out of order or out of [0, nnz] (the product checks them later), so it never reads
// outside `indices`.
template <typename I>
bool ScatteredColumns(const I* indices, const I* indptr, int64_t m, int64_t nnz) {
  constexpr int64_t kSampledRows = 256, kSampledEntries = 32, kNear = 4;
  int64_t near = 0, total = 0;
  for (int64_t s = 0; s < kSampledRows && m >= 2; ++s) {
    const int64_t row = (m - 2) * s / kSampledRows;
    if (!ChunkRowsInOrder(indptr, row, row + 2, nnz)) continue;
    const int64_t above_begin = indptr[row];
    const int64_t above_end = std::min<int64_t>(indptr[row + 1], above_begin + kSampledEntries);
    const int64_t below_end = std::min<int64_t>(indptr[row + 2], indptr[row + 1] + kSampledEntries);
    for (int64_t q = indptr[row + 1]; q < below_end; ++q, ++total) {
      for (int64_t p = above_begin; p < above_end; ++p) {
        const int64_t step = static_cast<int64_t>(indices[q]) - static_cast<int64_t>(indices[p]);
        if (step >= -kNear && step <= kNear) {
          ++near;
          break;
        }
      }
    }
  }
  return 2 * near < total;
}

// Members per group of SharedVectorRows.
constexpr int64_t kSharedVectorGroup = 8;

template <typename T, typename I>
ffi::Error Matmul(ffi::ThreadPool& pool, const ffi::AnyBuffer& data, const ffi::AnyBuffer& x,
                  const ffi::AnyBuffer& indices_buffer, const ffi::AnyBuffer& indptr_buffer,
                  ffi::Result<ffi::AnyBuffer>& out_buffer) {
  const int64_t n = Trailing(x, 2), k = Trailing(x, 1);
  const int64_t m = indptr_buffer.dimensions()[0] - 1, nnz = indices_buffer.dimensions()[0];
  const int64_t batch = BatchOf(*out_buffer, 2);
  const int64_t values_stride = MemberStride(data, 1), x_stride = MemberStride(x, 2);
  const I* indptr = Data<I>(indptr_buffer);
  // The ends here; the order of the rest chunk by chunk as the pieces go (ChunkRowsInOrder).
  if (indptr[0] != 0 || indptr[m] != nnz) return IndptrError(pool, indptr, m, nnz);
  if (k == 0 || m == 0 || batch == 0) return CheckIndptr(pool, indptr, m, nnz);
  if (n == 0 && nnz > 0) return ColumnError(n);  // no column to read, nor to clamp into
  const T* values = Data<T>(data);
  const I* indices = Data<I>(indices_buffer);
  const T* dense = Data<T>(x);
  T* out = Data<T>(out_buffer);

  // Columns are checked a chunk at a time before the product reads them, which leaves the
  // product's loop only the arithmetic.
  const bool scattered = ScatteredColumns(indices, indptr, m, nnz);
  const bool prefetch = k >= 2 && scattered;
  const int64_t parts = NumParts(pool, batch * (nnz + m) * k);
  // Piece t owns the rows starting in its entries; its leading entries belong to a row
  // an earlier piece started, and are summed into carry[t] (row carry_row[t]).
  std::vector<T> carry(parts * batch * k, T(0));
  std::vector<int64_t> carry_row(parts, -1);
  std::atomic<bool> ok(true), rows_in_order(true);
  ParallelFor(pool, parts, [&](int64_t part) {
    const int64_t begin = PieceStart(nnz, parts, part);
    const int64_t end = PieceStart(nnz, parts, part + 1);
    const int64_t first_row = part == 0 ? 0 : FirstRowFrom(indptr, m, begin);
    const int64_t last_row = part == parts - 1 ? m : FirstRowFrom(indptr, m, end);
    const int64_t owned_start = first_row < m ? static_cast<int64_t>(indptr[first_row]) : nnz;
    const int64_t carried_end = std::min(owned_start, end);
    // Whether every column read was in range. Every pair of consecutive rows lies in a
    // chunk of some piece: the pieces' [first_row, last_row) cover [0, m) even where an
    // out-of-order `indptr` misplaces their bounds.
    auto piece = [&] {
      if (first_row > 0 && begin < carried_end) {
        if (!ChunkColumnsInRange(indices, begin, carried_end, n)) return false;
        carry_row[part] = first_row - 1;
        for (int64_t b = 0; b < batch; ++b) {
          RowSum(values + b * values_stride, indices, dense + b * x_stride, k, begin, carried_end,
                 carry.data() + (part * batch + b) * k);
        }
      }
      // Rows in chunks of about `chunk_entries` entries, at most as many rows.
      const int64_t chunk_entries = batch > 1 ? kChunkEntries : CheckedChunkEntries(scattered);
      for (int64_t chunk_row = first_row; chunk_row < last_row;) {
        const int64_t chunk_end =
            std::lower_bound(indptr + chunk_row + 1,
                             indptr + std::min(last_row, chunk_row + chunk_entries),
                             static_cast<int64_t>(indptr[chunk_row]) + chunk_entries,
                             [](I start, int64_t bound) { return start < bound; }) -
            indptr;
        if (!ChunkRowsInOrder(indptr, chunk_row, chunk_end, nnz)) {
          rows_in_order = false;
          return true;
        }
        if (!ChunkColumnsInRange(indices, indptr[chunk_row],
                                 std::min<int64_t>(indptr[chunk_end], end), n)) {
          return false;
        }
        int64_t b = 0;
        if (k == 1 && x_stride == 0 && values_stride != 0) {
          for (; b + kSharedVectorGroup <= batch; b += kSharedVectorGroup) {
            SharedVectorRows<kSharedVectorGroup>(values + b * values_stride, values_stride, indices,
                                                 indptr, dense, chunk_row, chunk_end, end,
                                                 out + b * m, m);
          }
        }
        for (; b < batch; ++b) {
          ProductRows(values + b * values_stride, indices, indptr, dense + b * x_stride, n, k,
                      chunk_row, chunk_end, end, prefetch, out + b * m * k);
        }
        chunk_row = chunk_end;
      }
      return true;
    };
    if (!piece()) ok = false;
    StreamFence();
  });
  for (int64_t part = 1; part < parts; ++part) {
    if (carry_row[part] < 0) continue;
    for (int64_t b = 0; b < batch; ++b) {
      T* row = out + b * m * k + carry_row[part] * k;
      const T* partial = carry.data() + (part * batch + b) * k;
      for (int64_t c = 0; c < k; ++c) row[c] += partial[c];
    }
  }
  if (!rows_in_order) return IndptrError(pool, indptr, m, nnz);
  return ok ? ffi::Error::Success() : ColumnError(n);
}

// Adds value * source[0:k] into destination[0:k]: one entry of a transposed product.
template <typename T>
JAXSPARSE_INLINE void AddEntry(T* destination, T value, const T* source, int64_t k) {
  if (k == 1) {
    destination[0] += value * source[0];
  } else {
    AddScaled(destination, value, source, k);
  }
}

// Row indices[p] of member b of `rows` += values_b[p] * g_b[row(p)] for entries p in
// [begin, end) and members b in [first_member, last_member), entries in chunks shared by
// the members; `rows` holds member `first_member`'s n rows of k values, members n * k
// apart. Each chunk's columns are checked before they are used (as in the product: the
// loop keeps only the arithmetic); returns false, at the first chunk holding a column
// outside [0, n), before writing it. `scattered`: ScatteredColumns of the structure.
template <typename T, typename I>
bool ScatterEntries(const T* values, int64_t values_stride, const T* cotangent, int64_t g_stride,
                    const I* indices, const I* indptr, int64_t m, int64_t n, int64_t k,
                    int64_t begin, int64_t end, int64_t first_member, int64_t last_member,
                    bool scattered, T* rows) {
  const bool prefetch = k >= 2 && scattered;
  const int64_t chunk_size =
      last_member - first_member > 1 ? kChunkEntries : CheckedChunkEntries(scattered);
  auto scatter_chunk = [&](int64_t chunk, int64_t chunk_end, int64_t chunk_row) {
    for (int64_t b = first_member; b < last_member; ++b) {
      const T* member_values = values + b * values_stride;
      const T* member_g = cotangent + b * g_stride;
      T* member_rows = rows + (b - first_member) * n * k;
      for (int64_t row = chunk_row; row < m && indptr[row] < chunk_end; ++row) {
        const int64_t row_begin = std::max<int64_t>(indptr[row], chunk);
        const int64_t row_end = std::min<int64_t>(indptr[row + 1], chunk_end);
        const T* source = member_g + row * k;
        if (prefetch) PrefetchAhead(member_rows, indices, row_begin, row_end, end, n, k);
        for (int64_t p = row_begin; p < row_end; ++p) {
          AddEntry(member_rows + static_cast<int64_t>(indices[p]) * k, member_values[p], source, k);
        }
      }
    }
  };
  return ForCheckedChunks(indices, indptr, m, n, begin, end, chunk_size, scatter_chunk);
}

// ScatterEntries for all `batch` members on a banded structure (ScatterOwnedColumns):
// entries whose column `owned` holds go into their rows of `out` (members n * k apart),
// the others to `deferrals`, once for all members.
template <typename T, typename I>
void ScatterOwnedEntries(const T* values, int64_t values_stride, const T* cotangent,
                         int64_t g_stride, const I* indices, const I* indptr, int64_t m, int64_t n,
                         int64_t k, int64_t batch, int64_t begin, int64_t end,
                         const OwnedColumns owned, T* out, Deferrals& deferrals) {
  const int64_t chunk_size = batch > 1 ? kChunkEntries : end - begin;
  for (int64_t chunk = begin; chunk < end; chunk += chunk_size) {
    const int64_t chunk_end = std::min(end, chunk + chunk_size);
    const int64_t chunk_row = RowOf(indptr, m, chunk);
    for (int64_t b = 0; b < batch; ++b) {
      const T* member_values = values + b * values_stride;
      const T* member_g = cotangent + b * g_stride;
      T* member_out = out + b * n * k;
      for (int64_t row = chunk_row; row < m && indptr[row] < chunk_end; ++row) {
        const int64_t row_begin = std::max<int64_t>(indptr[row], chunk);
        const int64_t row_end = std::min<int64_t>(indptr[row + 1], chunk_end);
        const T* source = member_g + row * k;
        for (int64_t p = row_begin; p < row_end; ++p) {
          const uint64_t column = AsColumn(indices[p]);
          if (owned.Hold(column)) [[likely]] {
            AddEntry(member_out + column * k, member_values[p], source, k);
          } else if (b == 0) {
            deferrals.Defer(p, row, column);
          }
        }
      }
    }
  }
}

// A deferred entry of ScatterOwnedColumns, added for all `batch` members of `out`.
template <typename T, typename I>
void AddDeferredEntry(const T* values, int64_t values_stride, const T* cotangent, int64_t g_stride,
                      const I* indices, int64_t n, int64_t k, int64_t batch,
                      const DeferredEntry& deferred, T* out) {
  const int64_t column = indices[deferred.entry];
  for (int64_t b = 0; b < batch; ++b) {
    AddEntry(out + b * n * k + column * k, values[b * values_stride + deferred.entry],
             cotangent + b * g_stride + deferred.row * k, k);
  }
}

// out = A^T @ G: each piece of entries adds its rows of G into the rows its columns name.
// On banded columns each piece owns an interval of columns and defers the few entries
// outside it (ScatterOwnedColumns), so no piece needs a buffer of its own; on scattered
// columns every piece after the first fills a buffer of all n rows (ScatterInPieces). Its
// read-modify-writes, not its reads, set its pace: it costs about twice the product.
template <typename T, typename I>
ffi::Error MatmulT(ffi::ThreadPool& pool, const ffi::AnyBuffer& data, const ffi::AnyBuffer& g,
                   const ffi::AnyBuffer& indices_buffer, const ffi::AnyBuffer& indptr_buffer,
                   ffi::Result<ffi::AnyBuffer>& out_buffer) {
  const int64_t m = Trailing(g, 2), k = Trailing(g, 1);
  const int64_t n = Trailing(*out_buffer, 2), nnz = indices_buffer.dimensions()[0];
  const int64_t batch = BatchOf(*out_buffer, 2);
  const int64_t values_stride = MemberStride(data, 1), g_stride = MemberStride(g, 2);
  const I* indptr = Data<I>(indptr_buffer);
  if (ffi::Error error = CheckIndptr(pool, indptr, m, nnz); !error.success()) return error;
  if (n == 0 && nnz > 0) return ColumnError(n);  // no column to read, nor to clamp into
  const T* values = Data<T>(data);
  const I* indices = Data<I>(indices_buffer);
  const T* cotangent = Data<T>(g);
  T* out = Data<T>(out_buffer);
  if (k == 0 || nnz == 0 || batch == 0) {
    ParallelZero(pool, out, batch * n * k);
    return ffi::Error::Success();
  }

  std::atomic<bool> ok(true);
  const bool scattered = ScatteredColumns(indices, indptr, m, nnz);
  const int64_t work = batch * nnz * k;
  if (const int64_t parts = NumParts(pool, work); batch >= parts) {
    // Enough members for every thread: each piece scatters whole members into their own
    // outputs, with no partial buffers.
    ParallelZero(pool, out, batch * n * k);
    ParallelFor(pool, parts, [&](int64_t part) {
      const int64_t first = PieceStart(batch, parts, part);
      const int64_t last = PieceStart(batch, parts, part + 1);
      if (!ScatterEntries(values, values_stride, cotangent, g_stride, indices, indptr, m, n, k, 0,
                          nnz, first, last, scattered, out + first * n * k)) {
        ok = false;
      }
    });
    return ok ? ffi::Error::Success() : ColumnError(n);
  }
  const bool in_range =
      scattered
          ? ScatterInPieces(pool, nnz, n, k, batch, work, out,
                            [&](int64_t begin, int64_t end, T* rows) {
                              return ScatterEntries(values, values_stride, cotangent, g_stride,
                                                    indices, indptr, m, n, k, begin, end, 0, batch,
                                                    scattered, rows);
                            })
          : ScatterOwnedColumns(
                pool, indices, nnz, n, k, batch, work, out,
                [&](int64_t begin, int64_t end, const OwnedColumns& owned, Deferrals& deferrals) {
                  ScatterOwnedEntries(values, values_stride, cotangent, g_stride, indices, indptr,
                                      m, n, k, batch, begin, end, owned, out, deferrals);
                },
                [&](const DeferredEntry& deferred) {
                  AddDeferredEntry(values, values_stride, cotangent, g_stride, indices, n, k, batch,
                                   deferred, out);
                });
  return in_range ? ffi::Error::Success() : ColumnError(n);
}

// Sddmm's entries [first, last) of one member on banded columns when k is one block of W
// columns (WithEightDotsBlock), their columns checked: eight entries' dot products at a
// time, across rows, from `row`, the row of entry `first`; each gets Dot's bits. Banded
// columns only: on scattered columns the gathers set the pace and the shuffles only cost.
template <int W, typename T, typename I>
void SddmmEightAtATime(const T* cotangent, const T* dense, const I* indices, const I* indptr,
                       int64_t first, int64_t last, int64_t row, T* out) {
  int64_t p = first;
  for (; p + 8 <= last; p += 8) {
    const T* lefts[8];
    const T* rights[8];
    for (int s = 0; s < 8; ++s) {
      while (indptr[row + 1] <= p + s) ++row;
      lefts[s] = cotangent + row * W;
      rights[s] = dense + static_cast<int64_t>(indices[p + s]) * W;
    }
    T dots[8];
    EightFixedDots<W>(lefts, rights, dots);
    for (int s = 0; s < 8; ++s) out[p + s] = T(0) + dots[s];  // Dot's sum starts at 0
  }
  for (; p < last; ++p) {
    while (indptr[row + 1] <= p) ++row;
    out[p] = Dot(cotangent + row * W, dense + static_cast<int64_t>(indices[p]) * W, W);
  }
}

// out[p] = g[row(p)] . x[indices[p]] for every entry p. Each piece of entries checks a chunk
// of columns before reading them, as the product does.
template <typename T, typename I>
ffi::Error Sddmm(ffi::ThreadPool& pool, const ffi::AnyBuffer& g, const ffi::AnyBuffer& x,
                 const ffi::AnyBuffer& indices_buffer, const ffi::AnyBuffer& indptr_buffer,
                 ffi::Result<ffi::AnyBuffer>& out_buffer) {
  const int64_t m = Trailing(g, 2), k = Trailing(g, 1);
  const int64_t n = Trailing(x, 2), nnz = indices_buffer.dimensions()[0];
  const int64_t batch = BatchOf(*out_buffer, 1);
  const int64_t g_stride = MemberStride(g, 2), x_stride = MemberStride(x, 2);
  const I* indptr = Data<I>(indptr_buffer);
  if (ffi::Error error = CheckIndptr(pool, indptr, m, nnz); !error.success()) return error;
  if (n == 0 && nnz > 0) return ColumnError(n);  // no column to read, nor to clamp into
  const I* indices = Data<I>(indices_buffer);
  const T* cotangent = Data<T>(g);
  const T* dense = Data<T>(x);
  T* out = Data<T>(out_buffer);
  if (nnz == 0 || batch == 0) return ffi::Error::Success();

  const int64_t parts = NumParts(pool, batch * nnz * std::max<int64_t>(k, 1));
  const bool scattered = ScatteredColumns(indices, indptr, m, nnz);
  const bool prefetch = k >= 2 && scattered;
  std::atomic<bool> ok(true);
  ParallelFor(pool, parts, [&](int64_t part) {
    const int64_t begin = PieceStart(nnz, parts, part);
    const int64_t end = PieceStart(nnz, parts, part + 1);
    if (begin >= end) return;
    const int64_t chunk_size = batch > 1 ? kChunkEntries : CheckedChunkEntries(scattered);
    auto sample_chunk = [&](int64_t chunk, int64_t chunk_end, int64_t chunk_row) {
      for (int64_t b = 0; b < batch; ++b) {
        const T* member_g = cotangent + b * g_stride;
        const T* member_x = dense + b * x_stride;
        T* member_out = out + b * nnz;
        if (!prefetch && WithEightDotsBlock<T>(k, [&](auto width) {
              SddmmEightAtATime<decltype(width)::value>(member_g, member_x, indices, indptr, chunk,
                                                        chunk_end, chunk_row, member_out);
            })) {
          continue;
        }
        for (int64_t row = chunk_row; row < m && indptr[row] < chunk_end; ++row) {
          const int64_t row_begin = std::max<int64_t>(indptr[row], chunk);
          const int64_t row_end = std::min<int64_t>(indptr[row + 1], chunk_end);
          const T* left = member_g + row * k;
          if (k == 1) {
            for (int64_t p = row_begin; p < row_end; ++p) {
              member_out[p] = left[0] * member_x[indices[p]];
            }
            continue;
          }
          if (prefetch) PrefetchAhead(member_x, indices, row_begin, row_end, end, n, k);
          for (int64_t p = row_begin; p < row_end; ++p) {
            member_out[p] = Dot(left, member_x + static_cast<int64_t>(indices[p]) * k, k);
          }
        }
      }
    };
    if (!ForCheckedChunks(indices, indptr, m, n, begin, end, chunk_size, sample_chunk)) {
      ok = false;
    }
  });
  return ok ? ffi::Error::Success() : ColumnError(n);
}

// One entry p of row `row` in the fused gradient pass at k = 1: dvalues[p] = left *
// x[column], and out[column] += values[p] * left if `owned` holds the column, else the
// entry is handed to `deferrals` (ScatterOwnedColumns), its column clamped for the read.
template <typename T, typename I>
JAXSPARSE_INLINE void PullbackEntry(const T* values, const I* indices, int64_t n, const T* dense,
                                    T left, int64_t p, int64_t row, T* dvalues, T* out,
                                    const OwnedColumns owned, Deferrals& deferrals) {
  const uint64_t column = AsColumn(indices[p]);
  if (owned.Hold(column)) [[likely]] {
    dvalues[p] = left * dense[column];
    out[column] += values[p] * left;
  } else {
    dvalues[p] = left * dense[ClampedColumn(column, n)];
    deferrals.Defer(p, row, column);
  }
}

// PullbackEntry for the entries of rows [first_row, last_row), each of L entries, the
// first at `first_entry`: the row loop without an inner loop, as SumEvenRows.
template <int L, typename T, typename I>
JAXSPARSE_INLINE void PullbackEvenRows(const T* values, const I* indices, int64_t n,
                                       const T* cotangent, const T* dense, int64_t first_row,
                                       int64_t last_row, int64_t first_entry, T* dvalues, T* out,
                                       const OwnedColumns owned, Deferrals& deferrals) {
  for (int64_t row = first_row; row < last_row; ++row) {
    const T left = cotangent[row];
    const int64_t row_begin = first_entry + (row - first_row) * L;
    for (int j = 0; j < L; ++j) {
      PullbackEntry(values, indices, n, dense, left, row_begin + j, row, dvalues, out, owned,
                    deferrals);
    }
  }
}

// PullbackEntry for the entries of rows [first_row, last_row) inside [begin, end). Out of
// line: inlined into the chunk loop of PullbackOneColumn, it crowds that loop's registers.
template <typename T, typename I>
__attribute__((noinline)) void PullbackRows(const T* values, const I* indices, const I* indptr,
                                            int64_t n, const T* cotangent, const T* dense,
                                            int64_t first_row, int64_t last_row, int64_t begin,
                                            int64_t end, T* dvalues, T* out,
                                            const OwnedColumns owned, Deferrals& deferrals) {
  for (int64_t row = first_row; row < last_row; ++row) {
    const int64_t row_end = std::min<int64_t>(indptr[row + 1], end);
    const T left = cotangent[row];
    for (int64_t p = std::max<int64_t>(indptr[row], begin); p < row_end; ++p) {
      PullbackEntry(values, indices, n, dense, left, p, row, dvalues, out, owned, deferrals);
    }
  }
}

// Rows per chunk of the fused gradient pass at k = 1, each chunk tested for rows of one
// length (EvenRowLength): long enough to amortize the test, short enough that a stencil's
// boundary rows spoil few chunks.
constexpr int64_t kEvenChunkRows = 128;

// The fused gradient pass over entries [begin, end) at k = 1 (PullbackEntry), a chunk of
// rows at a time: a chunk inside [begin, end) whose rows have one length takes
// PullbackEvenRows, others PullbackRows.
template <typename T, typename I>
void PullbackOneColumn(const T* values, const I* indices, const I* indptr, int64_t m, int64_t n,
                       const T* cotangent, const T* dense, int64_t begin, int64_t end, T* dvalues,
                       T* out, const OwnedColumns owned, Deferrals& deferrals) {
  const int64_t last_row = FirstRowFrom(indptr, m, end);
  for (int64_t row = RowOf(indptr, m, begin); row < last_row; row += kEvenChunkRows) {
    const int64_t chunk_end = std::min(last_row, row + kEvenChunkRows);
    const int64_t length = indptr[row] >= begin && indptr[chunk_end] <= end
                               ? EvenRowLength(indptr, row, chunk_end)
                               : 0;
    if (length == 0) {
      PullbackRows(values, indices, indptr, n, cotangent, dense, row, chunk_end, begin, end,
                   dvalues, out, owned, deferrals);
      continue;
    }
    WithRowLength(length, [&](auto row_length) {
      PullbackEvenRows<decltype(row_length)::value>(values, indices, n, cotangent, dense, row,
                                                    chunk_end, indptr[row], dvalues, out, owned,
                                                    deferrals);
    });
  }
}

// The fused gradient pass over entries [begin, end) at k >= 2, as PullbackOneColumn: in
// each row, one block of columns at a time (ForColumnBlocks), so the block widths are
// chosen once a row rather than once an entry, dvalues[p] adding the blocks' dot products
// in Dot's order.
template <typename T, typename I>
void PullbackColumnBlocks(const T* values, const I* indices, const I* indptr, int64_t m, int64_t n,
                          int64_t k, const T* cotangent, const T* dense, int64_t begin, int64_t end,
                          T* dvalues, T* out, const OwnedColumns owned, Deferrals& deferrals) {
  for (int64_t row = RowOf(indptr, m, begin); row < m && indptr[row] < end; ++row) {
    const int64_t row_begin = std::max<int64_t>(indptr[row], begin);
    const int64_t row_end = std::min<int64_t>(indptr[row + 1], end);
    const T* left = cotangent + row * k;
    ForColumnBlocks<T>(k, 0, [&](auto width, int64_t c0) {
      constexpr int W = decltype(width)::value;
      for (int64_t p = row_begin; p < row_end; ++p) {
        const uint64_t column = AsColumn(indices[p]);
        const T part = Opaque(FixedDot<W>(left + c0, dense + ClampedColumn(column, n) * k + c0));
        dvalues[p] = (c0 == 0 ? T(0) : dvalues[p]) + part;
        if (owned.Hold(column)) [[likely]] {
          AddScaledBlock<W>(out + column * k + c0, values[p], left + c0);
        } else if (c0 == 0) {
          deferrals.Defer(p, row, column);
        }
      }
    });
  }
}

// The gradient step of A @ X along the cotangent G, one matrix: the values' gradient
// dvalues[p] = G[row(p)] . X[indices[p]] and the operand's dX = A^T @ G. Where columns
// sit near those of the row before (a banded or stencil structure), one pass over the
// entries reads each entry's column, value and cotangent row once for both, each piece
// writing the columns it owns and deferring the others as MatmulT does. On scattered
// columns (ScatteredColumns) it runs Sddmm and then MatmulT: there one pass would make two
// random accesses per entry, whose misses overlap worse than one per pass. Each output
// gets the same sums, in the same order, as Sddmm and MatmulT (the same bits for real
// values; see native_csr.py for complex ones).
template <typename T, typename I>
ffi::Error MatmulPullback(ffi::ThreadPool& pool, const ffi::AnyBuffer& g,
                          const ffi::AnyBuffer& data, const ffi::AnyBuffer& x,
                          const ffi::AnyBuffer& indices_buffer, const ffi::AnyBuffer& indptr_buffer,
                          ffi::Result<ffi::AnyBuffer>& dvalues_buffer,
                          ffi::Result<ffi::AnyBuffer>& dx_buffer) {
  const int64_t m = Trailing(g, 2), k = Trailing(g, 1);
  const int64_t n = Trailing(x, 2), nnz = indices_buffer.dimensions()[0];
  const I* indptr = Data<I>(indptr_buffer);
  if (ffi::Error error = CheckIndptr(pool, indptr, m, nnz); !error.success()) return error;
  if (ScatteredColumns(Data<I>(indices_buffer), indptr, m, nnz)) {
    if (ffi::Error error = Sddmm<T, I>(pool, g, x, indices_buffer, indptr_buffer, dvalues_buffer);
        !error.success()) {
      return error;
    }
    return MatmulT<T, I>(pool, data, g, indices_buffer, indptr_buffer, dx_buffer);
  }
  if (n == 0 && nnz > 0) return ColumnError(n);  // no column to read, nor to clamp into
  const T* values = Data<T>(data);
  const I* indices = Data<I>(indices_buffer);
  const T* cotangent = Data<T>(g);
  const T* dense = Data<T>(x);
  T* dvalues = Data<T>(dvalues_buffer);
  T* dx = Data<T>(dx_buffer);
  if (nnz == 0 || k == 0) {
    ParallelZero(pool, dx, n * k);
    std::fill(dvalues, dvalues + nnz, T(0));
    return ffi::Error::Success();
  }

  const bool in_range = ScatterOwnedColumns(
      pool, indices, nnz, n, k, int64_t{1}, nnz * k, dx,
      [&](int64_t begin, int64_t end, const OwnedColumns& owned, Deferrals& deferrals) {
        if (k == 1) {
          PullbackOneColumn(values, indices, indptr, m, n, cotangent, dense, begin, end, dvalues,
                            dx, owned, deferrals);
        } else {
          PullbackColumnBlocks(values, indices, indptr, m, n, k, cotangent, dense, begin, end,
                               dvalues, dx, owned, deferrals);
        }
      },
      [&](const DeferredEntry& deferred) {
        AddDeferredEntry(values, 0, cotangent, 0, indices, n, k, 1, deferred, dx);
      });
  return in_range ? ffi::Error::Success() : ColumnError(n);
}

// The buffers of `A @ x` (transposed: `A^T @ g`): data `(nnz,)` and the dense operand
// `(rows, k)`, each with a batch axis or shared; the structure for one matrix; the result
// `(rows, k)`, batched where an input is. The product's result has m rows, the transposed
// product's operand.
ffi::Error CheckProductBuffers(const ffi::AnyBuffer& data, const ffi::AnyBuffer& dense,
                               const ffi::AnyBuffer& indices, const ffi::AnyBuffer& indptr,
                               const ffi::AnyBuffer& out, bool transposed) {
  const ffi::DataType type = data.element_type();
  const NamedBuffer values{data, "data", 1}, operand{dense, transposed ? "g" : "x", 2};
  const NamedBuffer result{out, "the result", 2};
  JAXSPARSE_RETURN_IF_ERROR(CheckStructure(indices, indptr));
  JAXSPARSE_RETURN_IF_ERROR(CheckBuffer(values, type, /*may_batch=*/true));
  JAXSPARSE_RETURN_IF_ERROR(CheckBuffer(operand, type, /*may_batch=*/true));
  JAXSPARSE_RETURN_IF_ERROR(CheckBuffer(result, type, /*may_batch=*/true));
  const int64_t m = indptr.dimensions()[0] - 1, nnz = indices.dimensions()[0];
  JAXSPARSE_RETURN_IF_ERROR(CheckAxis(values, 0, nnz, "the length of indices"));
  JAXSPARSE_RETURN_IF_ERROR(
      CheckAxis(transposed ? operand : result, 0, m, "the rows of indptr, its length - 1"));
  JAXSPARSE_RETURN_IF_ERROR(CheckAxis(result, 1, operand.Axis(1), "the operand's columns"));
  JAXSPARSE_RETURN_IF_ERROR(CheckBatch(values, result));
  return CheckBatch(operand, result);
}

// The buffers of the sampled product: g `(m, k)` and x `(n, k)`, each with a batch axis or
// shared; the structure for one matrix; the result `(nnz,)`, batched where an input is.
ffi::Error CheckSddmmBuffers(const ffi::AnyBuffer& g, const ffi::AnyBuffer& x,
                             const ffi::AnyBuffer& indices, const ffi::AnyBuffer& indptr,
                             const ffi::AnyBuffer& out) {
  const ffi::DataType type = g.element_type();
  const NamedBuffer cotangent{g, "g", 2}, operand{x, "x", 2}, result{out, "the result", 1};
  JAXSPARSE_RETURN_IF_ERROR(CheckStructure(indices, indptr));
  JAXSPARSE_RETURN_IF_ERROR(CheckBuffer(cotangent, type, /*may_batch=*/true));
  JAXSPARSE_RETURN_IF_ERROR(CheckBuffer(operand, type, /*may_batch=*/true));
  JAXSPARSE_RETURN_IF_ERROR(CheckBuffer(result, type, /*may_batch=*/true));
  const int64_t m = indptr.dimensions()[0] - 1, nnz = indices.dimensions()[0];
  JAXSPARSE_RETURN_IF_ERROR(CheckAxis(cotangent, 0, m, "the rows of indptr, its length - 1"));
  JAXSPARSE_RETURN_IF_ERROR(CheckAxis(operand, 1, cotangent.Axis(1), "g's columns"));
  JAXSPARSE_RETURN_IF_ERROR(CheckAxis(result, 0, nnz, "the length of indices"));
  JAXSPARSE_RETURN_IF_ERROR(CheckBatch(cotangent, result));
  return CheckBatch(operand, result);
}

// The buffers of the gradient step of one matrix: g `(m, k)`, data `(nnz,)`, x `(n, k)`,
// the structure, and the results `(nnz,)` and `(n, k)`; none has a batch axis.
ffi::Error CheckPullbackBuffers(const ffi::AnyBuffer& g, const ffi::AnyBuffer& data,
                                const ffi::AnyBuffer& x, const ffi::AnyBuffer& indices,
                                const ffi::AnyBuffer& indptr, const ffi::AnyBuffer& dvalues,
                                const ffi::AnyBuffer& dx) {
  const ffi::DataType type = data.element_type();
  const NamedBuffer cotangent{g, "g", 2}, values{data, "data", 1}, operand{x, "x", 2};
  const NamedBuffer values_gradient{dvalues, "the values' gradient", 1};
  const NamedBuffer operand_gradient{dx, "the operand's gradient", 2};
  JAXSPARSE_RETURN_IF_ERROR(CheckStructure(indices, indptr));
  for (const NamedBuffer* named :
       {&cotangent, &values, &operand, &values_gradient, &operand_gradient}) {
    JAXSPARSE_RETURN_IF_ERROR(CheckBuffer(*named, type, /*may_batch=*/false));
  }
  const int64_t m = indptr.dimensions()[0] - 1, nnz = indices.dimensions()[0];
  JAXSPARSE_RETURN_IF_ERROR(CheckAxis(cotangent, 0, m, "the rows of indptr, its length - 1"));
  JAXSPARSE_RETURN_IF_ERROR(CheckAxis(values, 0, nnz, "the length of indices"));
  JAXSPARSE_RETURN_IF_ERROR(CheckAxis(operand, 1, cotangent.Axis(1), "g's columns"));
  JAXSPARSE_RETURN_IF_ERROR(CheckAxis(values_gradient, 0, nnz, "the length of indices"));
  JAXSPARSE_RETURN_IF_ERROR(CheckAxis(operand_gradient, 0, operand.Axis(0), "x's rows"));
  return CheckAxis(operand_gradient, 1, cotangent.Axis(1), "g's columns");
}

ffi::Error CsrMatmulImpl(ffi::ThreadPool pool, ffi::AnyBuffer data, ffi::AnyBuffer x,
                         ffi::AnyBuffer indices, ffi::AnyBuffer indptr,
                         ffi::Result<ffi::AnyBuffer> out) {
  JAXSPARSE_RETURN_IF_ERROR(
      CheckProductBuffers(data, x, indices, indptr, *out, /*transposed=*/false));
  AdviseHugePages(out);
  return WithValueType(data.element_type(), "data", [&](auto value) {
    return WithIndexType(indices.element_type(), [&](auto index) {
      return Matmul<decltype(value), decltype(index)>(pool, data, x, indices, indptr, out);
    });
  });
}

ffi::Error CsrMatmulTImpl(ffi::ThreadPool pool, ffi::AnyBuffer data, ffi::AnyBuffer g,
                          ffi::AnyBuffer indices, ffi::AnyBuffer indptr,
                          ffi::Result<ffi::AnyBuffer> out) {
  JAXSPARSE_RETURN_IF_ERROR(
      CheckProductBuffers(data, g, indices, indptr, *out, /*transposed=*/true));
  AdviseHugePages(out);
  return WithValueType(data.element_type(), "data", [&](auto value) {
    return WithIndexType(indices.element_type(), [&](auto index) {
      return MatmulT<decltype(value), decltype(index)>(pool, data, g, indices, indptr, out);
    });
  });
}

ffi::Error CsrSddmmImpl(ffi::ThreadPool pool, ffi::AnyBuffer g, ffi::AnyBuffer x,
                        ffi::AnyBuffer indices, ffi::AnyBuffer indptr,
                        ffi::Result<ffi::AnyBuffer> out) {
  JAXSPARSE_RETURN_IF_ERROR(CheckSddmmBuffers(g, x, indices, indptr, *out));
  AdviseHugePages(out);
  return WithValueType(g.element_type(), "g", [&](auto value) {
    return WithIndexType(indices.element_type(), [&](auto index) {
      return Sddmm<decltype(value), decltype(index)>(pool, g, x, indices, indptr, out);
    });
  });
}

ffi::Error CsrMatmulPullbackImpl(ffi::ThreadPool pool, ffi::AnyBuffer g, ffi::AnyBuffer data,
                                 ffi::AnyBuffer x, ffi::AnyBuffer indices, ffi::AnyBuffer indptr,
                                 ffi::Result<ffi::AnyBuffer> dvalues,
                                 ffi::Result<ffi::AnyBuffer> dx) {
  JAXSPARSE_RETURN_IF_ERROR(CheckPullbackBuffers(g, data, x, indices, indptr, *dvalues, *dx));
  AdviseHugePages(dvalues);
  AdviseHugePages(dx);
  return WithValueType(data.element_type(), "data", [&](auto value) {
    return WithIndexType(indices.element_type(), [&](auto index) {
      return MatmulPullback<decltype(value), decltype(index)>(pool, g, data, x, indices, indptr,
                                                              dvalues, dx);
    });
  });
}

}  // namespace
}  // namespace jaxsparse

#define JAXSPARSE_CSR_BINDING      \
  xla::ffi::Ffi::Bind()            \
      .Ctx<xla::ffi::ThreadPool>() \
      .Arg<xla::ffi::AnyBuffer>()  \
      .Arg<xla::ffi::AnyBuffer>()  \
      .Arg<xla::ffi::AnyBuffer>()  \
      .Arg<xla::ffi::AnyBuffer>()  \
      .Ret<xla::ffi::AnyBuffer>()

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxsparseCsrMatmul, jaxsparse::CsrMatmulImpl, JAXSPARSE_CSR_BINDING);
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxsparseCsrMatmulT, jaxsparse::CsrMatmulTImpl,
                              JAXSPARSE_CSR_BINDING);
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxsparseCsrSddmm, jaxsparse::CsrSddmmImpl, JAXSPARSE_CSR_BINDING);
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxsparseCsrMatmulPullback, jaxsparse::CsrMatmulPullbackImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::ThreadPool>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>());
