// The structure of a CSR matrix's transpose for CPU: a counting sort of the column indices,
// O(nnz + m + n), for int32 or int64 index arrays, for one matrix or a batch of structures.
//
// Entry q of A^T is entry order[q] of A, at column indices_t[q] (its row in A), and
// indptr_t holds n + 1 row pointers. Entries of one new row keep their order in A, so the
// result is a stable sort of the column indices: the XLA path's
// (`_csr_layout.transposed_structure`), bit for bit. An invalid structure gets the XLA
// path's answer too, not an error, because a transpose is only built: its order and row
// ids (positions outside the buffers dropped) by a comparison sort and marks, and an
// indptr_t of kInvalidTransposeIndptr throughout, which the products on A^T refuse as
// they would refuse A. Every read and write stays inside the buffers.

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include "arrays.h"
#include "buffer_checks.h"
#include "dispatch.h"
#include "handlers.h"
#include "pages.h"
#include "parallel.h"

namespace jaxsparse {
namespace {

// One matrix's structure and the transpose's buffers for it.
template <typename I>
struct Member {
  const I* indices;  // (nnz,)
  const I* indptr;   // (m + 1,)
  I* order;          // (nnz,)
  I* indices_t;      // (nnz,)
  I* indptr_t;       // (n + 1,)
};

struct Sizes {
  int64_t m;
  int64_t n;
  int64_t nnz;
};

// Whether indptr starts at 0, never decreases and ends at nnz.
template <typename I>
bool IndptrValid(const I* indptr, const Sizes& sizes) {
  if (indptr[0] != 0 || indptr[sizes.m] != sizes.nnz) return false;
  int decreases = 0;
  for (int64_t row = 0; row < sizes.m; ++row) decreases |= indptr[row + 1] < indptr[row];
  return decreases == 0;
}

// The counting sort of a structure whose index pointer is valid: returns false, with the
// results unfinished, at the first column outside [0, n), before anything is scattered.
template <typename I>
bool CountingSort(const Member<I>& a, const Sizes& sizes) {
  using U = std::make_unsigned_t<I>;
  const U n = static_cast<U>(sizes.n);
  // indptr_t[c + 1] counts column c, then becomes the next free slot of new row c, and
  // after the scatter the end of new row c.
  std::fill(a.indptr_t, a.indptr_t + sizes.n + 1, I(0));
  for (int64_t p = 0; p < sizes.nnz; ++p) {
    const U column = static_cast<U>(a.indices[p]);
    if (column >= n) return false;
    ++a.indptr_t[static_cast<int64_t>(column) + 1];
  }
  I start = 0;
  for (int64_t c = 1; c <= sizes.n; ++c) {
    const I count = a.indptr_t[c];
    a.indptr_t[c] = start;
    start += count;
  }
  for (int64_t row = 0; row < sizes.m; ++row) {
    for (I p = a.indptr[row]; p < a.indptr[row + 1]; ++p) {
      const I slot = a.indptr_t[static_cast<int64_t>(a.indices[p]) + 1]++;
      a.order[slot] = p;
      a.indices_t[slot] = static_cast<I>(row);
    }
  }
  return true;
}

// The XLA path's transpose of an invalid structure: the row ids of `row_ids` (a mark at each
// row start inside [0, nnz), summed), a stable comparison sort of the columns, and the
// index pointer that marks the transpose invalid. O(nnz log nnz).
template <typename I>
void SortInvalidStructure(const Member<I>& a, const Sizes& sizes) {
  std::vector<I> rows(sizes.nnz, I(0));
  for (int64_t row = 1; row < sizes.m; ++row) {
    const I start = a.indptr[row];
    if (start >= 0 && start < sizes.nnz) ++rows[start];
  }
  std::partial_sum(rows.begin(), rows.end(), rows.begin());
  std::iota(a.order, a.order + sizes.nnz, I(0));
  std::stable_sort(a.order, a.order + sizes.nnz,
                   [&](I p, I q) { return a.indices[p] < a.indices[q]; });
  for (int64_t slot = 0; slot < sizes.nnz; ++slot) a.indices_t[slot] = rows[a.order[slot]];
  std::fill(a.indptr_t, a.indptr_t + sizes.n + 1, static_cast<I>(kInvalidTransposeIndptr));
}

// The first row starting at or after entry p (m if none).
template <typename I>
int64_t FirstRowFrom(const I* indptr, int64_t m, int64_t p) {
  return std::lower_bound(indptr, indptr + m, static_cast<I>(p)) - indptr;
}

// CountingSort on `parts` pieces of whole rows, cut at near-equal numbers of entries, in
// parallel: each piece counts its columns apart, and new row c takes piece 0's entries of
// column c first, then piece 1's, and so on, which keeps them in A's order.
template <typename I>
bool ParallelCountingSort(ffi::ThreadPool& pool, int64_t parts, const Member<I>& a,
                          const Sizes& sizes) {
  using U = std::make_unsigned_t<I>;
  const int64_t n = sizes.n;
  std::vector<int64_t> first_row(parts + 1, sizes.m);
  for (int64_t part = 0; part < parts; ++part) {
    first_row[part] = FirstRowFrom(a.indptr, sizes.m, PieceStart(sizes.nnz, parts, part));
  }
  // cursors[part * (n + 1) + c + 1] counts column c in the piece, then becomes the piece's
  // next free slot in new row c.
  std::vector<I> cursors(parts * (n + 1), I(0));
  std::vector<char> in_range(parts, 1);
  ParallelFor(pool, parts, [&](int64_t part) {
    I* counts = cursors.data() + part * (n + 1);
    for (I p = a.indptr[first_row[part]]; p < a.indptr[first_row[part + 1]]; ++p) {
      const U column = static_cast<U>(a.indices[p]);
      if (column >= static_cast<U>(n)) {
        in_range[part] = 0;
        return;
      }
      ++counts[static_cast<int64_t>(column) + 1];
    }
  });
  if (std::count(in_range.begin(), in_range.end(), 0) > 0) return false;
  I start = 0;
  for (int64_t c = 0; c < n; ++c) {
    a.indptr_t[c] = start;
    for (int64_t part = 0; part < parts; ++part) {
      I& cursor = cursors[part * (n + 1) + c + 1];
      const I count = cursor;
      cursor = start;
      start += count;
    }
  }
  a.indptr_t[n] = start;
  ParallelFor(pool, parts, [&](int64_t part) {
    I* next = cursors.data() + part * (n + 1) + 1;
    for (int64_t row = first_row[part]; row < first_row[part + 1]; ++row) {
      for (I p = a.indptr[row]; p < a.indptr[row + 1]; ++p) {
        const I slot = next[a.indices[p]]++;
        a.order[slot] = p;
        a.indices_t[slot] = static_cast<I>(row);
      }
    }
  });
  return true;
}

template <typename I>
void Transpose(ffi::ThreadPool& pool, int64_t parts, const Member<I>& a, const Sizes& sizes) {
  if (IndptrValid(a.indptr, sizes)) {
    if (parts > 1 ? ParallelCountingSort(pool, parts, a, sizes) : CountingSort(a, sizes)) return;
  }
  SortInvalidStructure(a, sizes);
}

// The five buffers hold one index type, all with a batch axis of one size or none; the
// entries' buffers have nnz along their last axis and the index pointers at least one
// value; positions and rows fit the index type.
ffi::Error CheckTransposeBuffers(const ffi::AnyBuffer& indices, const ffi::AnyBuffer& indptr,
                                 const ffi::AnyBuffer& order, const ffi::AnyBuffer& indices_t,
                                 const ffi::AnyBuffer& indptr_t) {
  const NamedBuffer named[] = {{indices, "indices", 1},
                               {indptr, "indptr", 1},
                               {order, "the order", 1},
                               {indices_t, "the transposed indices", 1},
                               {indptr_t, "the transposed indptr", 1}};
  JAXSPARSE_RETURN_IF_ERROR(CheckIndexBuffers(named));
  const int64_t nnz = named[0].Axis(0);
  JAXSPARSE_RETURN_IF_ERROR(CheckAxis(named[2], 0, nnz, "the length of indices"));
  JAXSPARSE_RETURN_IF_ERROR(CheckAxis(named[3], 0, nnz, "the length of indices"));
  if (named[1].Axis(0) < 1 || named[4].Axis(0) < 1) {
    return ffi::Error::InvalidArgument(
        "indptr and the transposed indptr must hold at least 1 value");
  }
  return CheckFitsIndexType(indices.element_type(), {nnz, named[1].Axis(0) - 1});
}

ffi::Error CsrTransposeImpl(ffi::ThreadPool pool, ffi::AnyBuffer indices, ffi::AnyBuffer indptr,
                            ffi::Result<ffi::AnyBuffer> order,
                            ffi::Result<ffi::AnyBuffer> indices_t,
                            ffi::Result<ffi::AnyBuffer> indptr_t) {
  JAXSPARSE_RETURN_IF_ERROR(CheckTransposeBuffers(indices, indptr, *order, *indices_t, *indptr_t));
  AdviseHugePages(order);
  AdviseHugePages(indices_t);
  AdviseHugePages(indptr_t);
  const Sizes sizes{Trailing(indptr, 1) - 1, Trailing(*indptr_t, 1) - 1, Trailing(indices, 1)};
  const int64_t batch = LeadingSize(indices, 1);
  if (batch == 0) return ffi::Error::Success();
  return WithIndexType(indices.element_type(), [&](auto index) {
    using I = decltype(index);
    const auto member = [&](int64_t b) {
      return Member<I>{Data<I>(indices) + b * sizes.nnz, Data<I>(indptr) + b * (sizes.m + 1),
                       Data<I>(order) + b * sizes.nnz, Data<I>(indices_t) + b * sizes.nnz,
                       Data<I>(indptr_t) + b * (sizes.n + 1)};
    };
    // One matrix is cut into pieces of entries; a batch runs whole members side by side.
    if (batch == 1) {
      Transpose(pool, NumParts(pool, sizes.nnz + sizes.n), member(0), sizes);
      return ffi::Error::Success();
    }
    const int64_t parts = std::min(batch, NumParts(pool, batch * (sizes.nnz + sizes.n)));
    ParallelFor(pool, parts, [&](int64_t part) {
      for (int64_t b = PieceStart(batch, parts, part); b < PieceStart(batch, parts, part + 1);
           ++b) {
        Transpose(pool, 1, member(b), sizes);
      }
    });
    return ffi::Error::Success();
  });
}

}  // namespace
}  // namespace jaxsparse

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxsparseCsrTranspose, jaxsparse::CsrTransposeImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::ThreadPool>()
                                  .Arg<xla::ffi::AnyBuffer>()  // indices (nnz,)
                                  .Arg<xla::ffi::AnyBuffer>()  // indptr (m + 1,)
                                  .Ret<xla::ffi::AnyBuffer>()  // order (nnz,)
                                  .Ret<xla::ffi::AnyBuffer>()  // indices_t (nnz,)
                                  .Ret<xla::ffi::AnyBuffer>()  // indptr_t (n + 1,)
);
