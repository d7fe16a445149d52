// The structure of the product C = A @ B of two CSR matrices for CPU (sparse @ sparse with
// structures known on the host, `_spgemm.py`), in two calls like scipy's two phases:
//
// - counts: (a_indices, a_indptr, b_indices, b_indptr; num_cols) -> (indptr, pair_indptr):
//   C's row pointers, and the pointers of each row's pairs of entries A[i, j] B[j, c].
// - fill: (a_indices, a_indptr, b_indices, b_indptr, indptr, pair_indptr; num_cols) ->
//   (indices, left, right, slots): C's columns, increasing within rows, and for every pair
//   the entry `left` of A, the entry `right` of B and the slot of C that their product adds
//   to.
//
// Pairs are listed in the order of A's entries, then of B's entries within row j of B;
// slots count C's distinct positions in row-major order. Those are the arrays `_spgemm` finds
// with numpy, bit for bit. Repeated and unsorted columns are taken as they come. Rows are
// cut into pieces of near-equal pairs over XLA's threads; the results do not depend on it.
//
// Both calls check the structures first: an index pointer that does not start at 0,
// decreases or does not end at its entries, or a column of A outside B's rows or of B outside
// [0, num_cols), fails the call with an error naming it. `fill` also checks that `indptr` and
// `pair_indptr` count each row's positions and pairs before it writes the row.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <new>
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

// The two factors' structures: A is m x n, B is n x num_cols.
template <typename I>
struct Factors {
  const I* a_indices;  // (nnz_a,)
  const I* a_indptr;   // (m + 1,)
  const I* b_indices;  // (nnz_b,)
  const I* b_indptr;   // (n + 1,)
  int64_t m, n, num_cols, nnz_a, nnz_b;
};

template <typename I>
Factors<I> FactorsOf(const ffi::AnyBuffer& a_indices, const ffi::AnyBuffer& a_indptr,
                     const ffi::AnyBuffer& b_indices, const ffi::AnyBuffer& b_indptr,
                     int64_t num_cols) {
  return Factors<I>{Data<I>(a_indices), Data<I>(a_indptr),         Data<I>(b_indices),
                    Data<I>(b_indptr),  Trailing(a_indptr, 1) - 1, Trailing(b_indptr, 1) - 1,
                    num_cols,           Trailing(a_indices, 1),    Trailing(b_indices, 1)};
}

// The first problem of the factors' structures, or "" if they have none.
template <typename I>
std::string FactorsProblem(const Factors<I>& f) {
  std::string problem = IndptrProblem(f.a_indptr, f.m, f.nnz_a, "the first indptr");
  if (problem.empty()) problem = IndptrProblem(f.b_indptr, f.n, f.nnz_b, "the second indptr");
  if (!problem.empty()) return problem;
  for (int64_t p = 0; p < f.nnz_a; ++p) {
    if (!Inside(f.a_indices[p], f.n)) {
      return "a column index of the first matrix lies outside [0, " + std::to_string(f.n) + ")";
    }
  }
  for (int64_t q = 0; q < f.nnz_b; ++q) {
    if (!Inside(f.b_indices[q], f.num_cols)) {
      return "a column index of the second matrix lies outside [0, " + std::to_string(f.num_cols) +
             ")";
    }
  }
  return "";
}

// How many entries of A ahead the walk over B's rows asks for them: rows of B are met in
// random order, so each would otherwise wait for memory.
inline constexpr int64_t kPrefetchDistance = 8;

// Calls `fn(p, q, c)` for each pair of entries of row `row`: entry p of A, entry q of B,
// and c, its column of C.
template <typename I, typename F>
JAXSPARSE_INLINE void ForPairs(const Factors<I>& f, int64_t row, const F& fn) {
  for (I p = f.a_indptr[row]; p < f.a_indptr[row + 1]; ++p) {
    // The loads that form the addresses stay inside A and B: A's columns were checked to
    // lie in [0, n). A prefetch itself never faults.
    if (p + 2 * kPrefetchDistance < f.nnz_a) {
      __builtin_prefetch(f.b_indptr + f.a_indices[p + 2 * kPrefetchDistance]);
    }
    if (p + kPrefetchDistance < f.nnz_a) {
      __builtin_prefetch(f.b_indices + f.b_indptr[f.a_indices[p + kPrefetchDistance]]);
    }
    const I j = f.a_indices[p];
    for (I q = f.b_indptr[j]; q < f.b_indptr[j + 1]; ++q) fn(p, q, f.b_indices[q]);
  }
}

// The number of pairs of row `row` of a valid structure, or -1 past int64: counts that
// wrap around could match a wrong row pointer.
template <typename I>
int64_t PairsOfRow(const Factors<I>& f, int64_t row) {
  int64_t pairs = 0;
  for (I p = f.a_indptr[row]; p < f.a_indptr[row + 1]; ++p) {
    const I j = f.a_indices[p];
    if (__builtin_add_overflow(pairs, static_cast<int64_t>(f.b_indptr[j + 1]) - f.b_indptr[j],
                               &pairs)) {
      return -1;
    }
  }
  return pairs;
}

// Whether a piece of `rows` rows and `pairs` pairs finds its columns with a table over C's
// columns (one random access a pair) rather than by sorting each row's pairs: where the
// table, one a piece, is small next to the piece's pairs.
inline bool UseTable(int64_t num_cols, int64_t pairs, int64_t rows) {
  const int64_t spare = int64_t{1} << 16;
  return num_cols <= spare || (num_cols - spare) / 4 <= pairs ||
         (num_cols - spare) / 4 - pairs <= rows;
}

// The distinct columns of each row's pairs and the slot of each pair, for the rows of one
// piece taken in increasing order. With a table, an array over C's columns holds what each
// column was last given: counting, the last row that met it; filling, its slot (slots of
// earlier rows lie below a row's first). Without, each row's pairs are sorted by column, and
// no memory spans C's columns.
template <typename I>
class RowColumns {
 public:
  RowColumns(const Factors<I>& f, bool table) : f_(f), table_(table ? f.num_cols : 0, I(-1)) {}

  // The number of distinct columns of row `row`'s pairs, which must fit I.
  int64_t Count(int64_t row) {
    if (table_.empty()) {
      ListColumns(row, nullptr, nullptr);
      return SortPairs();
    }
    int64_t distinct = 0;
    ForPairs(f_, row, [&](I, I, I column) {
      distinct += table_[column] != row;
      table_[column] = static_cast<I>(row);
    });
    return distinct;
  }

  // Writes the entries of row `row`'s pairs to `lefts` and `rights`, one a pair (the row's
  // pairs must fit them); then, if the row has `expected` distinct columns, its columns,
  // increasing, to `columns` from `start` on, and the slot of its pair t to `slots[t]`.
  // Returns whether it has.
  bool Fill(int64_t row, I start, int64_t expected, I* columns, I* slots, I* lefts, I* rights) {
    ListColumns(row, lefts, rights);
    if (table_.empty()) {
      if (SortPairs() != expected) return false;
      I slot = start - 1;
      for (size_t t = 0; t < pairs_.size(); ++t) {
        if (t == 0 || pairs_[t].column != pairs_[t - 1].column) columns[++slot] = pairs_[t].column;
        slots[pairs_[t].place] = slot;
      }
      return true;
    }
    distinct_.clear();
    for (const I column : columns_) {
      if (table_[column] < start) {
        table_[column] = start;
        distinct_.push_back(column);
      }
    }
    if (static_cast<int64_t>(distinct_.size()) != expected) return false;
    std::sort(distinct_.begin(), distinct_.end());
    for (size_t t = 0; t < distinct_.size(); ++t) {
      table_[distinct_[t]] = start + static_cast<I>(t);
      columns[start + t] = distinct_[t];
    }
    for (size_t t = 0; t < columns_.size(); ++t) slots[t] = table_[columns_[t]];
    return true;
  }

 private:
  // A pair's column of C and its place among its row's pairs.
  struct RowPair {
    I column;
    I place;
  };

  // Lists the columns of row `row`'s pairs in `columns_`, in order, and their entries of A
  // and B in `lefts` and `rights` where given: B's rows are walked once.
  void ListColumns(int64_t row, I* lefts, I* rights) {
    columns_.clear();
    ForPairs(f_, row, [&](I p, I q, I column) {
      columns_.push_back(column);
      if (lefts != nullptr) {
        *lefts++ = p;
        *rights++ = q;
      }
    });
  }

  // Sorts the listed columns into `pairs_`; returns the number of distinct ones.
  int64_t SortPairs() {
    pairs_.clear();
    for (size_t t = 0; t < columns_.size(); ++t) pairs_.push_back({columns_[t], static_cast<I>(t)});
    std::sort(pairs_.begin(), pairs_.end(),
              [](const RowPair& x, const RowPair& y) { return x.column < y.column; });
    int64_t distinct = 0;
    for (size_t t = 0; t < pairs_.size(); ++t) {
      distinct += t == 0 || pairs_[t].column != pairs_[t - 1].column;
    }
    return distinct;
  }

  const Factors<I>& f_;
  std::vector<I> table_;
  std::vector<I> columns_;
  std::vector<I> distinct_;
  std::vector<RowPair> pairs_;
};

// The first row whose pairs start at or after `position` (m if none), by the valid
// `pair_indptr`.
template <typename I>
int64_t FirstRowFrom(const I* pair_indptr, int64_t m, int64_t position) {
  return std::lower_bound(pair_indptr, pair_indptr + m, position,
                          [](I start, int64_t p) { return static_cast<int64_t>(start) < p; }) -
         pair_indptr;
}

// Calls `fn(first, last)` on pieces of whole rows with near-equal numbers of pairs, over the
// pool; returns the pieces' first problems, "" where a piece had none. `pair_indptr` must be
// valid.
template <typename I, typename F>
std::vector<std::string> OverRowPieces(ffi::ThreadPool& pool, const I* pair_indptr, int64_t m,
                                       const F& fn) {
  const int64_t pairs = pair_indptr[m];
  const int64_t parts = NumParts(pool, pairs + m);
  std::vector<int64_t> first_row(parts + 1, m);
  for (int64_t part = 0; part < parts; ++part) {
    first_row[part] = FirstRowFrom(pair_indptr, m, PieceStart(pairs, parts, part));
  }
  std::vector<std::string> problems(parts);
  // An exception must not leave a pool task: running out of memory for a piece's scratch
  // is its problem.
  ParallelFor(pool, parts, [&](int64_t part) {
    try {
      problems[part] = fn(first_row[part], first_row[part + 1]);
    } catch (const std::bad_alloc&) {
      problems[part] = "out of memory for the scratch of its rows";
    }
  });
  return problems;
}

// The first non-empty problem among `problems`, as the call's error.
ffi::Error FirstProblem(const std::vector<std::string>& problems) {
  for (const std::string& problem : problems) {
    if (!problem.empty()) return ffi::Error::InvalidArgument("CSR product: " + problem);
  }
  return ffi::Error::Success();
}

// The factors' four index buffers hold one index type, with one axis each (one pair of
// matrices, no batch), and index pointers of at least one value.
ffi::Error CheckFactorBuffers(const ffi::AnyBuffer& a_indices, const ffi::AnyBuffer& a_indptr,
                              const ffi::AnyBuffer& b_indices, const ffi::AnyBuffer& b_indptr,
                              int64_t num_cols) {
  const NamedBuffer named[] = {{a_indices, "the first indices", 1},
                               {a_indptr, "the first indptr", 1},
                               {b_indices, "the second indices", 1},
                               {b_indptr, "the second indptr", 1}};
  JAXSPARSE_RETURN_IF_ERROR(CheckIndexBuffers(named));
  if (named[0].Batched()) {
    return ffi::Error::InvalidArgument("the CSR product structure takes one pair of matrices");
  }
  if (named[1].Axis(0) < 1 || named[3].Axis(0) < 1) {
    return ffi::Error::InvalidArgument("indptr must hold at least 1 value");
  }
  if (num_cols < 1) return ffi::Error::InvalidArgument("num_cols must be positive");
  return CheckFitsIndexType(a_indices.element_type(), {named[0].Axis(0), named[1].Axis(0),
                                                       named[2].Axis(0), named[3].Axis(0)});
}

// A buffer of the index type of `like`, one axis of `length` values.
ffi::Error CheckIndexVector(const ffi::AnyBuffer& like, const ffi::AnyBuffer& result,
                            const char* name, int64_t length, const char* what) {
  const NamedBuffer named{result, name, 1};
  JAXSPARSE_RETURN_IF_ERROR(CheckBuffer(named, like.element_type(), /*may_batch=*/false));
  return CheckAxis(named, 0, length, what);
}

ffi::Error CsrProductCountsImpl(ffi::ThreadPool pool, ffi::AnyBuffer a_indices,
                                ffi::AnyBuffer a_indptr, ffi::AnyBuffer b_indices,
                                ffi::AnyBuffer b_indptr, int64_t num_cols,
                                ffi::Result<ffi::AnyBuffer> indptr,
                                ffi::Result<ffi::AnyBuffer> pair_indptr) {
  JAXSPARSE_RETURN_IF_ERROR(CheckFactorBuffers(a_indices, a_indptr, b_indices, b_indptr, num_cols));
  const int64_t rows_plus_one = Trailing(a_indptr, 1);
  JAXSPARSE_RETURN_IF_ERROR(
      CheckIndexVector(a_indptr, *indptr, "the product's indptr", rows_plus_one, "m + 1"));
  JAXSPARSE_RETURN_IF_ERROR(
      CheckIndexVector(a_indptr, *pair_indptr, "the pairs' indptr", rows_plus_one, "m + 1"));
  return WithIndexType(a_indices.element_type(), [&](auto index) {
    using I = decltype(index);
    const Factors<I> f = FactorsOf<I>(a_indices, a_indptr, b_indices, b_indptr, num_cols);
    if (std::string problem = FactorsProblem(f); !problem.empty()) {
      return FirstProblem({problem});
    }
    I* row_pairs = Data<I>(pair_indptr);
    I* row_positions = Data<I>(indptr);
    // The pairs first, serially: their count bounds every value written below.
    int64_t pairs = 0;
    row_pairs[0] = 0;
    for (int64_t row = 0; row < f.m; ++row) {
      const int64_t row_pairs_count = PairsOfRow(f, row);
      if (row_pairs_count < 0 || __builtin_add_overflow(pairs, row_pairs_count, &pairs) ||
          pairs > std::numeric_limits<I>::max()) {
        return FirstProblem(
            {"its pairs of entries must fit the index type " + TypeName(a_indices.element_type())});
      }
      row_pairs[row + 1] = static_cast<I>(pairs);
    }
    const std::vector<std::string> problems =
        OverRowPieces(pool, row_pairs, f.m, [&](int64_t first, int64_t last) {
          RowColumns<I> rows(
              f, UseTable(f.num_cols, row_pairs[last] - row_pairs[first], last - first));
          for (int64_t row = first; row < last; ++row) {
            row_positions[row + 1] = static_cast<I>(rows.Count(row));
          }
          return std::string();
        });
    JAXSPARSE_RETURN_IF_ERROR(FirstProblem(problems));
    row_positions[0] = 0;
    for (int64_t row = 0; row < f.m; ++row) row_positions[row + 1] += row_positions[row];
    return ffi::Error::Success();
  });
}

ffi::Error CsrProductFillImpl(ffi::ThreadPool pool, ffi::AnyBuffer a_indices,
                              ffi::AnyBuffer a_indptr, ffi::AnyBuffer b_indices,
                              ffi::AnyBuffer b_indptr, ffi::AnyBuffer indptr,
                              ffi::AnyBuffer pair_indptr, int64_t num_cols,
                              ffi::Result<ffi::AnyBuffer> indices, ffi::Result<ffi::AnyBuffer> left,
                              ffi::Result<ffi::AnyBuffer> right,
                              ffi::Result<ffi::AnyBuffer> slots) {
  JAXSPARSE_RETURN_IF_ERROR(CheckFactorBuffers(a_indices, a_indptr, b_indices, b_indptr, num_cols));
  const int64_t rows_plus_one = Trailing(a_indptr, 1);
  JAXSPARSE_RETURN_IF_ERROR(
      CheckIndexVector(a_indptr, indptr, "the product's indptr", rows_plus_one, "m + 1"));
  JAXSPARSE_RETURN_IF_ERROR(
      CheckIndexVector(a_indptr, pair_indptr, "the pairs' indptr", rows_plus_one, "m + 1"));
  const NamedBuffer named_indices{*indices, "the product's indices", 1};
  const NamedBuffer named_slots{*slots, "the slots", 1};
  JAXSPARSE_RETURN_IF_ERROR(CheckBuffer(named_indices, a_indices.element_type(), false));
  JAXSPARSE_RETURN_IF_ERROR(CheckBuffer(named_slots, a_indices.element_type(), false));
  const int64_t nnz = named_indices.Axis(0), pairs = named_slots.Axis(0);
  JAXSPARSE_RETURN_IF_ERROR(
      CheckIndexVector(a_indptr, *left, "the left entries", pairs, "the pairs"));
  JAXSPARSE_RETURN_IF_ERROR(
      CheckIndexVector(a_indptr, *right, "the right entries", pairs, "the pairs"));
  JAXSPARSE_RETURN_IF_ERROR(CheckFitsIndexType(a_indices.element_type(), {nnz, pairs}));
  AdviseHugePages(indices);
  AdviseHugePages(left);
  AdviseHugePages(right);
  AdviseHugePages(slots);
  return WithIndexType(a_indices.element_type(), [&](auto index) {
    using I = decltype(index);
    const Factors<I> f = FactorsOf<I>(a_indices, a_indptr, b_indices, b_indptr, num_cols);
    const I* row_positions = Data<I>(indptr);
    const I* row_pairs = Data<I>(pair_indptr);
    std::string problem = FactorsProblem(f);
    if (problem.empty()) problem = IndptrProblem(row_positions, f.m, nnz, "the product's indptr");
    if (problem.empty()) problem = IndptrProblem(row_pairs, f.m, pairs, "the pairs' indptr");
    if (!problem.empty()) return FirstProblem({problem});
    I* columns = Data<I>(indices);
    I* lefts = Data<I>(left);
    I* rights = Data<I>(right);
    I* slot_of = Data<I>(slots);
    return FirstProblem(OverRowPieces(pool, row_pairs, f.m, [&](int64_t first, int64_t last) {
      RowColumns<I> rows(f, UseTable(f.num_cols, row_pairs[last] - row_pairs[first], last - first));
      for (int64_t row = first; row < last; ++row) {
        const I base = row_pairs[row], start = row_positions[row];
        if (PairsOfRow(f, row) != row_pairs[row + 1] - base) {
          return "the pairs' indptr does not count row " + std::to_string(row) + "'s pairs";
        }
        if (!rows.Fill(row, start, row_positions[row + 1] - start, columns, slot_of + base,
                       lefts + base, rights + base)) {
          return "the product's indptr does not count row " + std::to_string(row) + "'s columns";
        }
      }
      return std::string();
    }));
  });
}

}  // namespace
}  // namespace jaxsparse

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxsparseCsrProductCounts, jaxsparse::CsrProductCountsImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::ThreadPool>()
                                  .Arg<xla::ffi::AnyBuffer>()  // a_indices (nnz_a,)
                                  .Arg<xla::ffi::AnyBuffer>()  // a_indptr (m + 1,)
                                  .Arg<xla::ffi::AnyBuffer>()  // b_indices (nnz_b,)
                                  .Arg<xla::ffi::AnyBuffer>()  // b_indptr (n + 1,)
                                  .Attr<int64_t>("num_cols")
                                  .Ret<xla::ffi::AnyBuffer>()  // indptr (m + 1,)
                                  .Ret<xla::ffi::AnyBuffer>()  // pair_indptr (m + 1,)
);

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxsparseCsrProductFill, jaxsparse::CsrProductFillImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::ThreadPool>()
                                  .Arg<xla::ffi::AnyBuffer>()  // a_indices (nnz_a,)
                                  .Arg<xla::ffi::AnyBuffer>()  // a_indptr (m + 1,)
                                  .Arg<xla::ffi::AnyBuffer>()  // b_indices (nnz_b,)
                                  .Arg<xla::ffi::AnyBuffer>()  // b_indptr (n + 1,)
                                  .Arg<xla::ffi::AnyBuffer>()  // indptr (m + 1,)
                                  .Arg<xla::ffi::AnyBuffer>()  // pair_indptr (m + 1,)
                                  .Attr<int64_t>("num_cols")
                                  .Ret<xla::ffi::AnyBuffer>()  // indices (nnz,)
                                  .Ret<xla::ffi::AnyBuffer>()  // left (pairs,)
                                  .Ret<xla::ffi::AnyBuffer>()  // right (pairs,)
                                  .Ret<xla::ffi::AnyBuffer>()  // slots (pairs,)
);
