// The structure of the sum of two CSR matrices of one shape for CPU, when the columns of
// both strictly increase within rows: each row of the sum is the merge of the two rows,
// O(m + nnz_a + nnz_b), for int32 or int64 index arrays, for one pair or a batch of pairs.
//
// Slot s of the sum holds entry a_source[s] of A and entry b_source[s] of B, nnz_a and nnz_b
// where it holds none of that matrix, so its value is two gathers and an add. indptr holds
// the sum's row pointers, its last value the number of distinct positions found; indices
// holds the slots' columns. The slots from the last found up to the buffers' end hold
// neither matrix's entry and column n - 1 (padding entries, as `csr_from_entries` places
// them). Slots at or past the buffers' length are counted but not written: the caller
// finds them from indptr and refuses the result. These are the arrays of the XLA path
// (`_csr_union._union_by_search`), bit for bit.
//
// Only a valid structure is merged: an index pointer that does not start at 0, decreases or
// does not end at its entries, or a column outside [0, n), fails the call with an error
// naming it. Rows whose columns do not increase are merged as they come, inside the
// buffers; the caller sends them to a sort instead.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
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

// What each slot of the sum holds: its entry of A and of B (nnz_a, nnz_b for none) and its
// column.
template <typename I>
struct Slots {
  I* a_source;
  I* b_source;
  I* indices;
};

// One pair of structures and the sum's buffers for it.
template <typename I>
struct Pair {
  const I* a_indices;  // (nnz_a,)
  const I* a_indptr;   // (m + 1,)
  const I* b_indices;  // (nnz_b,)
  const I* b_indptr;   // (m + 1,)
  Slots<I> sum;        // (nnz,) each
  I* indptr;           // (m + 1,)
};

struct Sizes {
  int64_t m;
  int64_t n;
  int64_t nnz_a;
  int64_t nnz_b;
  int64_t nnz;
};

// The first row whose entries of both matrices start at or after `position` of the
// nnz_a + nnz_b entries (m if none).
template <typename I>
int64_t FirstRowFrom(const Pair<I>& pair, int64_t m, int64_t position) {
  int64_t low = 0, high = m;
  while (low < high) {
    const int64_t middle = low + (high - low) / 2;
    if (static_cast<int64_t>(pair.a_indptr[middle]) + pair.b_indptr[middle] < position) {
      low = middle + 1;
    } else {
      high = middle;
    }
  }
  return low;
}

// Merges rows [first, last): writes their row pointers counted from slot 0, and each slot
// s below `limit` to `to`; returns the slots used, or -1 at a column outside [0, n).
// Where both rows have entries left, each step takes the smaller column (both on a tie)
// through all-ones or all-zero masks, not branches or conditional expressions (which
// compilers may turn into branches): random columns would make a branch on which one it
// took unpredictable.
template <typename I>
int64_t MergeRows(const Pair<I>& pair, int64_t first, int64_t last, const Sizes& sizes,
                  const Slots<I>& to, int64_t limit) {
  const I a_none = static_cast<I>(sizes.nnz_a), b_none = static_cast<I>(sizes.nnz_b);
  int64_t slot = 0;
  bool outside = false;
  for (int64_t row = first; row < last; ++row) {
    pair.indptr[row] = static_cast<I>(slot);
    I p = pair.a_indptr[row], q = pair.b_indptr[row];
    const I p_end = pair.a_indptr[row + 1], q_end = pair.b_indptr[row + 1];
    for (; p < p_end && q < q_end; ++slot) {
      const I a = pair.a_indices[p], b = pair.b_indices[q];
      outside |= !Inside(a, sizes.n) | !Inside(b, sizes.n);
      const I take_a = -static_cast<I>(a <= b), take_b = -static_cast<I>(b <= a);
      if (slot < limit) {
        to.a_source[slot] = (p & take_a) | (a_none & ~take_a);
        to.b_source[slot] = (q & take_b) | (b_none & ~take_b);
        to.indices[slot] = (a & take_a) | (b & ~take_a);
      }
      p -= take_a;
      q -= take_b;
    }
    for (; p < p_end; ++p, ++slot) {
      outside |= !Inside(pair.a_indices[p], sizes.n);
      if (slot < limit) {
        to.a_source[slot] = p;
        to.b_source[slot] = b_none;
        to.indices[slot] = pair.a_indices[p];
      }
    }
    for (; q < q_end; ++q, ++slot) {
      outside |= !Inside(pair.b_indices[q], sizes.n);
      if (slot < limit) {
        to.a_source[slot] = a_none;
        to.b_source[slot] = q;
        to.indices[slot] = pair.b_indices[q];
      }
    }
    if (outside) return -1;
  }
  return slot;
}

// Merges one pair of valid index pointers, on `parts` pieces of whole rows cut at
// near-equal numbers of entries. The first piece merges into the sum; each other one
// apart, from slot 0, into scratch from where its first row's entries start (a piece
// finds no more positions than it has entries), and then its row pointers move past the
// positions the pieces before it found and its slots are copied there (a slot's sources
// do not depend on where it lies). Returns false at a column outside [0, n).
template <typename I>
bool Merge(ffi::ThreadPool& pool, int64_t parts, const Pair<I>& pair, const Sizes& sizes) {
  int64_t found = 0;
  if (parts == 1) {
    found = MergeRows(pair, 0, sizes.m, sizes, pair.sum, sizes.nnz);
    if (found < 0) return false;
  } else {
    const auto entries_before = [&](int64_t row) {
      return static_cast<int64_t>(pair.a_indptr[row]) + pair.b_indptr[row];
    };
    std::vector<int64_t> first_row(parts + 1, sizes.m);
    for (int64_t part = 0; part < parts; ++part) {
      first_row[part] =
          FirstRowFrom(pair, sizes.m, PieceStart(sizes.nnz_a + sizes.nnz_b, parts, part));
    }
    // Uninitialized: every slot read below was written by its piece.
    const int64_t skipped = entries_before(first_row[1]);
    const int64_t scratch_size = sizes.nnz_a + sizes.nnz_b - skipped;
    std::unique_ptr<I[]> scratch(new I[3 * scratch_size]);
    AdviseHugePages(scratch.get(), 3 * scratch_size * static_cast<int64_t>(sizeof(I)));
    const auto scratch_of = [&](int64_t part) {
      I* start = scratch.get() + entries_before(first_row[part]) - skipped;
      return Slots<I>{start, start + scratch_size, start + 2 * scratch_size};
    };
    std::vector<int64_t> bases(parts + 1, 0);
    ParallelFor(pool, parts, [&](int64_t part) {
      const bool direct = part == 0;
      bases[part + 1] = MergeRows(pair, first_row[part], first_row[part + 1], sizes,
                                  direct ? pair.sum : scratch_of(part),
                                  direct ? sizes.nnz : std::numeric_limits<int64_t>::max());
    });
    for (int64_t part = 0; part < parts; ++part) {
      if (bases[part + 1] < 0) return false;
      bases[part + 1] += bases[part];
    }
    found = bases[parts];
    ParallelFor(pool, parts - 1, [&](int64_t piece) {
      const int64_t part = piece + 1, base = bases[part];
      for (int64_t row = first_row[part]; row < first_row[part + 1]; ++row) {
        pair.indptr[row] += static_cast<I>(base);
      }
      const int64_t kept = std::min(bases[part + 1], sizes.nnz) - base;
      if (kept <= 0) return;
      const Slots<I> from = scratch_of(part);
      std::copy(from.a_source, from.a_source + kept, pair.sum.a_source + base);
      std::copy(from.b_source, from.b_source + kept, pair.sum.b_source + base);
      std::copy(from.indices, from.indices + kept, pair.sum.indices + base);
    });
  }
  pair.indptr[sizes.m] = static_cast<I>(found);
  const int64_t padding = std::min(found, sizes.nnz);
  const Slots<I>& sum = pair.sum;
  std::fill(sum.a_source + padding, sum.a_source + sizes.nnz, static_cast<I>(sizes.nnz_a));
  std::fill(sum.b_source + padding, sum.b_source + sizes.nnz, static_cast<I>(sizes.nnz_b));
  std::fill(sum.indices + padding, sum.indices + sizes.nnz, static_cast<I>(sizes.n - 1));
  return true;
}

// Merges one pair; returns its first problem, or "" when there is none.
template <typename I>
std::string MergePair(ffi::ThreadPool& pool, int64_t parts, const Pair<I>& pair,
                      const Sizes& sizes) {
  std::string problem = IndptrProblem(pair.a_indptr, sizes.m, sizes.nnz_a, "the first indptr");
  if (problem.empty()) {
    problem = IndptrProblem(pair.b_indptr, sizes.m, sizes.nnz_b, "the second indptr");
  }
  if (problem.empty() && !Merge(pool, parts, pair, sizes)) {
    problem = "a column index lies outside [0, " + std::to_string(sizes.n) + ")";
  }
  return problem;
}

// The eight buffers hold one index type, all with a batch axis of one size or none; the
// index pointers have m + 1 values, the sources as many as the sum's indices; the entries
// of both matrices (the positions counted), the sum's and the rows fit the index type.
ffi::Error CheckUnionBuffers(const ffi::AnyBuffer& a_indices, const ffi::AnyBuffer& a_indptr,
                             const ffi::AnyBuffer& b_indices, const ffi::AnyBuffer& b_indptr,
                             const ffi::AnyBuffer& a_source, const ffi::AnyBuffer& b_source,
                             const ffi::AnyBuffer& indices, const ffi::AnyBuffer& indptr) {
  const NamedBuffer named[] = {
      {a_indices, "the first indices", 1},  {a_indptr, "the first indptr", 1},
      {b_indices, "the second indices", 1}, {b_indptr, "the second indptr", 1},
      {a_source, "the first sources", 1},   {b_source, "the second sources", 1},
      {indices, "the sum's indices", 1},    {indptr, "the sum's indptr", 1}};
  JAXSPARSE_RETURN_IF_ERROR(CheckIndexBuffers(named));
  const int64_t rows_plus_one = named[1].Axis(0);
  if (rows_plus_one < 1) return ffi::Error::InvalidArgument("indptr must hold at least 1 value");
  JAXSPARSE_RETURN_IF_ERROR(CheckAxis(named[3], 0, rows_plus_one, "the first indptr's length"));
  JAXSPARSE_RETURN_IF_ERROR(CheckAxis(named[7], 0, rows_plus_one, "the first indptr's length"));
  const int64_t nnz = named[6].Axis(0);
  JAXSPARSE_RETURN_IF_ERROR(CheckAxis(named[4], 0, nnz, "the sum's entries"));
  JAXSPARSE_RETURN_IF_ERROR(CheckAxis(named[5], 0, nnz, "the sum's entries"));
  return CheckFitsIndexType(a_indices.element_type(),
                            {named[0].Axis(0) + named[2].Axis(0), nnz, rows_plus_one - 1});
}

ffi::Error CsrUnionImpl(ffi::ThreadPool pool, ffi::AnyBuffer a_indices, ffi::AnyBuffer a_indptr,
                        ffi::AnyBuffer b_indices, ffi::AnyBuffer b_indptr, int64_t num_cols,
                        ffi::Result<ffi::AnyBuffer> a_source, ffi::Result<ffi::AnyBuffer> b_source,
                        ffi::Result<ffi::AnyBuffer> indices, ffi::Result<ffi::AnyBuffer> indptr) {
  JAXSPARSE_RETURN_IF_ERROR(CheckUnionBuffers(a_indices, a_indptr, b_indices, b_indptr, *a_source,
                                              *b_source, *indices, *indptr));
  if (num_cols < 1) return ffi::Error::InvalidArgument("num_cols must be positive");
  AdviseHugePages(a_source);
  AdviseHugePages(b_source);
  AdviseHugePages(indices);
  AdviseHugePages(indptr);
  const Sizes sizes{Trailing(a_indptr, 1) - 1, num_cols, Trailing(a_indices, 1),
                    Trailing(b_indices, 1), Trailing(*indices, 1)};
  const int64_t batch = LeadingSize(a_indices, 1);
  if (batch == 0) return ffi::Error::Success();
  return WithIndexType(a_indices.element_type(), [&](auto index) {
    using I = decltype(index);
    const auto pair = [&](int64_t b) {
      const int64_t rows = sizes.m + 1;
      return Pair<I>{Data<I>(a_indices) + b * sizes.nnz_a,
                     Data<I>(a_indptr) + b * rows,
                     Data<I>(b_indices) + b * sizes.nnz_b,
                     Data<I>(b_indptr) + b * rows,
                     {Data<I>(a_source) + b * sizes.nnz, Data<I>(b_source) + b * sizes.nnz,
                      Data<I>(indices) + b * sizes.nnz},
                     Data<I>(indptr) + b * rows};
    };
    const int64_t work = sizes.nnz_a + sizes.nnz_b + sizes.m;
    const std::string problem = BuildMembers(pool, batch, work, [&](int64_t parts, int64_t b) {
      return MergePair(pool, parts, pair(b), sizes);
    });
    if (!problem.empty()) return ffi::Error::InvalidArgument("CSR sum: " + problem);
    return ffi::Error::Success();
  });
}

}  // namespace
}  // namespace jaxsparse

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxsparseCsrUnion, jaxsparse::CsrUnionImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::ThreadPool>()
                                  .Arg<xla::ffi::AnyBuffer>()  // a_indices (nnz_a,)
                                  .Arg<xla::ffi::AnyBuffer>()  // a_indptr (m + 1,)
                                  .Arg<xla::ffi::AnyBuffer>()  // b_indices (nnz_b,)
                                  .Arg<xla::ffi::AnyBuffer>()  // b_indptr (m + 1,)
                                  .Attr<int64_t>("num_cols")
                                  .Ret<xla::ffi::AnyBuffer>()  // a_source (nnz,)
                                  .Ret<xla::ffi::AnyBuffer>()  // b_source (nnz,)
                                  .Ret<xla::ffi::AnyBuffer>()  // indices (nnz,)
                                  .Ret<xla::ffi::AnyBuffer>()  // indptr (m + 1,)
);
