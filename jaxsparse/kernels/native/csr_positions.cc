// The CSR structure of a list of positions (rows[p], cols[p]) for CPU, repeated positions
// merged: a counting sort of the rows, then each row's columns sorted, O(L + m) plus the
// rows' sorts (one pass for a list already in order), for int32 or int64 index arrays, for
// one list or a batch of lists.
//
// Listed position p goes to slot slots[p] of the result, whose distinct positions are
// ordered by row, then column. indptr holds their row pointers, its last value the number
// of distinct positions found; indices holds the slots' columns, the slots from the last
// found up to the buffer's end column n - 1 (padding entries, as `csr_from_entries` places
// them). Slots at or past the buffer's length are counted but not written: the caller
// finds them from indptr and refuses the result. These are the arrays of the XLA path
// (`_csr_positions._by_sort`), bit for bit.
//
// A position outside the matrix fails the call with an error naming it, before anything of
// its list's structure is written.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "arrays.h"
#include "buffer_checks.h"
#include "csr_structure.h"
#include "dispatch.h"
#include "handlers.h"
#include "pages.h"
#include "parallel.h"

namespace jaxsparse {
namespace {

// One list of positions and the structure's buffers for it.
template <typename I>
struct Member {
  const I* rows;  // (length,)
  const I* cols;  // (length,)
  I* slots;       // (length,)
  I* indices;     // (nnz,)
  I* indptr;      // (m + 1,)
};

struct Sizes {
  int64_t m;
  int64_t n;
  int64_t length;
  int64_t nnz;
};

// A listed position's column and place in the list.
template <typename I>
struct Listed {
  I col;
  I entry;
};

// Rows up to this long are sorted by insertion, longer ones by a merge sort.
inline constexpr int64_t kShortRow = 32;

// Sorts a row's positions by column, stably: the counting sort left them in list order,
// which the repeats of a position keep.
template <typename I>
void SortRow(Listed<I>* begin, Listed<I>* end) {
  if (end - begin > kShortRow) {
    std::stable_sort(begin, end,
                     [](const Listed<I>& a, const Listed<I>& b) { return a.col < b.col; });
    return;
  }
  for (Listed<I>* next = begin + 1; next < end; ++next) {
    const Listed<I> item = *next;
    Listed<I>* place = next;
    for (; place > begin && item.col < place[-1].col; --place) *place = place[-1];
    *place = item;
  }
}

// The message naming listed position p, which lies outside the matrix.
template <typename I>
std::string OutsideProblem(const Member<I>& list, const Sizes& sizes, int64_t p) {
  return "position " + std::to_string(p) + " of the list, (" + std::to_string(list.rows[p]) + ", " +
         std::to_string(list.cols[p]) + "), is out of range for the " + std::to_string(sizes.m) +
         " x " + std::to_string(sizes.n) + " matrix";
}

// The structure of a list already ordered by row, then column, in one pass: a slot for
// each position that differs from the one before.
template <typename I>
void NumberOrdered(const Member<I>& list, const Sizes& sizes) {
  std::fill(list.indptr, list.indptr + sizes.m + 1, I(0));
  int64_t slot = -1;
  for (int64_t p = 0; p < sizes.length; ++p) {
    if (p == 0 || list.rows[p] != list.rows[p - 1] || list.cols[p] != list.cols[p - 1]) {
      ++list.indptr[static_cast<int64_t>(list.rows[p]) + 1];
      if (++slot < sizes.nnz) list.indices[slot] = list.cols[p];
    }
    list.slots[p] = static_cast<I>(slot);
  }
  std::partial_sum(list.indptr, list.indptr + sizes.m + 1, list.indptr);
}

// The structure of any list from `starts`, the first place of each row's positions in the
// list sorted by row (starts[m] = length): a stable counting sort of the rows, then each
// row's columns sorted. Its `parts` pieces of whole rows, with near-equal numbers of
// positions, sort and number their rows in parallel.
template <typename I>
void NumberBySort(ffi::ThreadPool& pool, int64_t parts, const Member<I>& list, const Sizes& sizes,
                  const std::vector<I>& starts) {
  std::unique_ptr<Listed<I>[]> listed(new Listed<I>[sizes.length]);
  AdviseHugePages(listed.get(), sizes.length * static_cast<int64_t>(sizeof(Listed<I>)));
  {
    std::vector<I> next(starts.begin(), starts.end() - 1);
    for (int64_t p = 0; p < sizes.length; ++p) {
      listed[next[list.rows[p]]++] = Listed<I>{list.cols[p], static_cast<I>(p)};
    }
  }
  std::vector<int64_t> first_row(parts + 1, sizes.m);
  for (int64_t part = 0; part < parts; ++part) {
    const I start = static_cast<I>(PieceStart(sizes.length, parts, part));
    first_row[part] = std::lower_bound(starts.begin(), starts.end() - 1, start) - starts.begin();
  }
  // A position starts a run of its repeats where its column differs from the one before.
  const auto starts_run = [&](int64_t place, int64_t row) {
    return place == starts[row] || listed[place].col != listed[place - 1].col;
  };
  list.indptr[0] = 0;
  ParallelFor(pool, parts, [&](int64_t part) {
    for (int64_t row = first_row[part]; row < first_row[part + 1]; ++row) {
      SortRow(listed.get() + starts[row], listed.get() + starts[row + 1]);
      I distinct = 0;
      for (int64_t place = starts[row]; place < starts[row + 1]; ++place) {
        distinct += starts_run(place, row);
      }
      list.indptr[row + 1] = distinct;
    }
  });
  std::partial_sum(list.indptr, list.indptr + sizes.m + 1, list.indptr);
  ParallelFor(pool, parts, [&](int64_t part) {
    for (int64_t row = first_row[part]; row < first_row[part + 1]; ++row) {
      int64_t slot = static_cast<int64_t>(list.indptr[row]) - 1;
      for (int64_t place = starts[row]; place < starts[row + 1]; ++place) {
        if (starts_run(place, row) && ++slot < sizes.nnz) list.indices[slot] = listed[place].col;
        list.slots[listed[place].entry] = static_cast<I>(slot);
      }
    }
  });
}

// The structure of one list; returns its first problem, or "" when it has none. A list
// already ordered by row, then column (a canonical matrix's entries) skips the sort.
template <typename I>
std::string Build(ffi::ThreadPool& pool, int64_t parts, const Member<I>& list, const Sizes& sizes) {
  // starts[r + 1] counts row r's listed positions, then starts[r] becomes the first place
  // of row r in the list sorted by row.
  std::vector<I> starts(sizes.m + 1, I(0));
  bool ordered = true;
  for (int64_t p = 0; p < sizes.length; ++p) {
    const I row = list.rows[p], col = list.cols[p];
    if (!Inside(row, sizes.m) || !Inside(col, sizes.n)) return OutsideProblem(list, sizes, p);
    ++starts[static_cast<int64_t>(row) + 1];
    if (p > 0) {
      const I last_row = list.rows[p - 1];
      ordered &= (row > last_row) | ((row == last_row) & (col >= list.cols[p - 1]));
    }
  }
  if (ordered) {
    NumberOrdered(list, sizes);
  } else {
    std::partial_sum(starts.begin(), starts.end(), starts.begin());
    NumberBySort(pool, parts, list, sizes, starts);
  }
  const int64_t found = list.indptr[sizes.m];
  std::fill(list.indices + std::min(found, sizes.nnz), list.indices + sizes.nnz,
            static_cast<I>(sizes.n - 1));
  return "";
}

// The five buffers hold one index type, all with a batch axis of one size or none; the
// slots have one value per listed position, the index pointer at least 2 (a matrix with
// rows); counts, positions and the matrix's rows and columns fit the index type.
ffi::Error CheckPositionBuffers(const ffi::AnyBuffer& rows, const ffi::AnyBuffer& cols,
                                const ffi::AnyBuffer& slots, const ffi::AnyBuffer& indices,
                                const ffi::AnyBuffer& indptr, int64_t num_cols) {
  const NamedBuffer named[] = {{rows, "rows", 1},
                               {cols, "cols", 1},
                               {slots, "the slots", 1},
                               {indices, "the indices", 1},
                               {indptr, "the indptr", 1}};
  JAXSPARSE_RETURN_IF_ERROR(CheckIndexBuffers(named));
  const int64_t length = named[0].Axis(0);
  JAXSPARSE_RETURN_IF_ERROR(CheckAxis(named[1], 0, length, "the length of rows"));
  JAXSPARSE_RETURN_IF_ERROR(CheckAxis(named[2], 0, length, "the length of rows"));
  if (named[4].Axis(0) < 2) {
    return ffi::Error::InvalidArgument("the indptr must hold m + 1 >= 2 values");
  }
  if (num_cols < 1) return ffi::Error::InvalidArgument("num_cols must be positive");
  return CheckFitsIndexType(rows.element_type(),
                            {length, named[3].Axis(0), named[4].Axis(0) - 1, num_cols - 1});
}

ffi::Error CsrPositionsImpl(ffi::ThreadPool pool, ffi::AnyBuffer rows, ffi::AnyBuffer cols,
                            int64_t num_cols, ffi::Result<ffi::AnyBuffer> slots,
                            ffi::Result<ffi::AnyBuffer> indices,
                            ffi::Result<ffi::AnyBuffer> indptr) {
  JAXSPARSE_RETURN_IF_ERROR(CheckPositionBuffers(rows, cols, *slots, *indices, *indptr, num_cols));
  AdviseHugePages(slots);
  AdviseHugePages(indices);
  AdviseHugePages(indptr);
  const Sizes sizes{Trailing(*indptr, 1) - 1, num_cols, Trailing(rows, 1), Trailing(*indices, 1)};
  const int64_t batch = LeadingSize(rows, 1);
  if (batch == 0) return ffi::Error::Success();
  return WithIndexType(rows.element_type(), [&](auto index) {
    using I = decltype(index);
    const auto member = [&](int64_t b) {
      return Member<I>{Data<I>(rows) + b * sizes.length, Data<I>(cols) + b * sizes.length,
                       Data<I>(slots) + b * sizes.length, Data<I>(indices) + b * sizes.nnz,
                       Data<I>(indptr) + b * (sizes.m + 1)};
    };
    const int64_t work = sizes.length + sizes.m;
    const std::string problem = BuildMembers(pool, batch, work, [&](int64_t parts, int64_t b) {
      return Build(pool, parts, member(b), sizes);
    });
    if (!problem.empty()) return ffi::Error::InvalidArgument("CSR from positions: " + problem);
    return ffi::Error::Success();
  });
}

}  // namespace
}  // namespace jaxsparse

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxsparseCsrPositions, jaxsparse::CsrPositionsImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::ThreadPool>()
                                  .Arg<xla::ffi::AnyBuffer>()  // rows (length,)
                                  .Arg<xla::ffi::AnyBuffer>()  // cols (length,)
                                  .Attr<int64_t>("num_cols")
                                  .Ret<xla::ffi::AnyBuffer>()  // slots (length,)
                                  .Ret<xla::ffi::AnyBuffer>()  // indices (nnz,)
                                  .Ret<xla::ffi::AnyBuffer>()  // indptr (m + 1,)
);
