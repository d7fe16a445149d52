// DIA kernels for CPU: the product A @ X, the transposed product A^T @ G and the gradient
// in the diagonals, for float32/float64/complex64/complex128 values.
//
// data[d, j] == A[j - offsets[d], j]; slots whose row falls outside [0, m) are never read
// and get a zero gradient. The offsets arrive as an array attribute, so one compiled
// kernel serves any number of diagonals. Rows are split evenly over the pool's threads.
// Products with up to kRowWiseMaxColumns columns walk a thread's rows in blocks small
// enough that the block's output stays in the L1 cache while every diagonal adds into it,
// so the output is written to memory once however many diagonals there are: with one
// column one diagonal after another, with 2 to kRowWiseMaxColumns each row summed over a
// group of diagonals in registers. Wider products sum each output row over every diagonal
// in registers, row after row, and write it past the cache (SumWideRows), as long as
// there are at most kWideMaxDiagonals diagonals; with more, they take groups of
// diagonals in blocks too.
//
// Batches (the contract of `_primitive.py`): values `(B, ndiag, n)`, dense operands
// `(B, rows, k)`, results `(B, ...)`; an operand without the leading axis is shared by
// the batch. The members' rows are walked one member after another, in the same row
// blocks.

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "arrays.h"
#include "buffer_checks.h"
#include "dia_sddmm.h"
#include "dispatch.h"
#include "handlers.h"
#include "pages.h"
#include "parallel.h"

namespace jaxsparse {
namespace {

// Products with 2 to kRowWiseMaxColumns columns sum each output row over kDiagonalGroup
// diagonals at a time, in registers, so the output row is loaded and stored once a group
// rather than once a diagonal. Each diagonal in a group is a stream of memory: four
// streams keep the prefetchers busy without thrashing them.
constexpr int64_t kDiagonalGroup = 4;
constexpr int64_t kRowWiseMaxColumns = 32;

// Products with more than kRowWiseMaxColumns columns and at most this many diagonals sum
// whole output rows at once (SumWideRows): a wide row's sums fill the registers, so each
// output row is written once, past the cache. Narrower rows pay more for the walk than
// they save, and more diagonals than this spill the running sums.
constexpr int64_t kWideMaxDiagonals = 32;

// One diagonal as an output row sees it: output row r in [lo, hi) takes values[r] times
// operand row `source + r * k`.
template <typename T>
struct ShiftedDiagonal {
  const T* values;
  const T* source;
  int64_t lo, hi;
};

// out[i] += diagonal[i] * operand[i] for rows i in [lo, hi) of a one-column product.
template <typename T>
void AddShiftedProducts(const T* diagonal, const T* operand, int64_t lo, int64_t hi, T* out) {
  for (int64_t i = lo; i < hi; ++i) out[i] += diagonal[i] * operand[i];
}

// out[i] += the four diagonals' products for rows i in [first, stop) (k = 1), added in
// the group's order: in one pass over the rows all four cover, one diagonal at a time
// elsewhere, so the output is read and written once for four diagonals. Each row gets the
// same sums in the same order as four single diagonals.
template <typename T>
void AddFourDiagonals(const ShiftedDiagonal<T> (&group)[4], int64_t first, int64_t stop, T* out) {
  int64_t lo = first, hi = stop;
  for (const ShiftedDiagonal<T>& diagonal : group) {
    lo = std::max(lo, diagonal.lo);
    hi = std::min(hi, diagonal.hi);
  }
  hi = std::max(lo, hi);
  for (const ShiftedDiagonal<T>& diagonal : group) {
    const int64_t below = std::max(first, diagonal.lo), above = std::min(stop, diagonal.hi);
    if (std::min(above, lo) > below) {
      AddShiftedProducts(diagonal.values, diagonal.source, below, std::min(above, lo), out);
    }
    if (above > std::max(below, hi)) {
      AddShiftedProducts(diagonal.values, diagonal.source, std::max(below, hi), above, out);
    }
  }
  for (int64_t i = lo; i < hi; ++i) {
    out[i] = (((out[i] + group[0].values[i] * group[0].source[i]) +
               group[1].values[i] * group[1].source[i]) +
              group[2].values[i] * group[2].source[i]) +
             group[3].values[i] * group[3].source[i];
  }
}

// out[r, c0:c0 + W] (+)= sum over the diagonals, in order, of values[r] * source[r, c0:c0 + W]
// for rows r in [first, stop), the W sums in registers: `Accumulate` adds to what `out`
// holds, else overwrites it; with `Checked`, a diagonal adds only to the rows of its
// [lo, hi); with `Stream`, sums of a cache line or more are written past the cache
// (the caller ends with StreamFence()).
template <int W, bool Checked, bool Accumulate, bool Stream, typename T>
JAXSPARSE_INLINE void SumDiagonalRows(const ShiftedDiagonal<T>* diagonals, int64_t ndiag, int64_t k,
                                      int64_t c0, int64_t first, int64_t stop, T* out) {
  for (int64_t r = first; r < stop; ++r) {
    T* out_row = out + r * k + c0;
    RowAccumulator<W, T> sums;
    if (Accumulate) sums.Load(out_row);
    for (int64_t d = 0; d < ndiag; ++d) {
      const ShiftedDiagonal<T>& diagonal = diagonals[d];
      if (Checked && (r < diagonal.lo || r >= diagonal.hi)) continue;
      sums.Add(diagonal.values[r], diagonal.source + r * k + c0);
    }
    if constexpr (Stream && W * sizeof(T) >= 64) {
      T block[W];
      sums.CopyTo(block);
      StreamStore<W>(out_row, block);
    } else {
      sums.CopyTo(out_row);
    }
  }
}

// The rows [inner_lo, inner_hi) of [first, stop) where every one of the diagonals lies
// inside the matrix; the rows before and after need bounds tests.
template <typename T>
std::pair<int64_t, int64_t> InnerRows(const ShiftedDiagonal<T>* diagonals, int64_t ndiag,
                                      int64_t first, int64_t stop) {
  int64_t inner_lo = first, inner_hi = stop;
  for (int64_t d = 0; d < ndiag; ++d) {
    inner_lo = std::max(inner_lo, diagonals[d].lo);
    inner_hi = std::min(inner_hi, diagonals[d].hi);
  }
  inner_lo = std::min(inner_lo, stop);
  return {inner_lo, std::clamp(inner_hi, inner_lo, stop)};
}

// Rows [first, stop) of `out` (k >= 2) from `ndiag` diagonals, row by row, each row's sums
// in registers: `accumulate` adds to `out`, else overwrites it. Rows where every diagonal
// lies inside the matrix take the loop without bounds tests.
template <bool Accumulate, typename T>
void SumDiagonalsRowWise(const ShiftedDiagonal<T>* diagonals, int64_t ndiag, int64_t k,
                         int64_t first, int64_t stop, T* out) {
  const auto [inner_lo, inner_hi] = InnerRows(diagonals, ndiag, first, stop);
  ForColumnBlocks<T>(k, 0, [&](auto width, int64_t c0) {
    constexpr int W = decltype(width)::value;
    SumDiagonalRows<W, true, Accumulate, false>(diagonals, ndiag, k, c0, first, inner_lo, out);
    SumDiagonalRows<W, false, Accumulate, false>(diagonals, ndiag, k, c0, inner_lo, inner_hi, out);
    SumDiagonalRows<W, true, Accumulate, false>(diagonals, ndiag, k, c0, inner_hi, stop, out);
  });
}

// Rows [first, stop) of `out` (k > kRowWiseMaxColumns) from all `ndiag` diagonals: each
// row whole, one block of columns after another, its sums in registers and written past
// the cache, so the operand rows are read as a few streams of memory and nothing of `out`
// is read. Ends with StreamFence().
template <typename T>
void SumWideRows(const ShiftedDiagonal<T>* diagonals, int64_t ndiag, int64_t k, int64_t first,
                 int64_t stop, T* out) {
  const auto [inner_lo, inner_hi] = InnerRows(diagonals, ndiag, first, stop);
  auto rows = [&](auto checked, int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      ForColumnBlocks<T>(k, 0, [&](auto width, int64_t c0) {
        SumDiagonalRows<decltype(width)::value, decltype(checked)::value, false, true>(
            diagonals, ndiag, k, c0, r, r + 1, out);
      });
    }
  };
  rows(std::true_type(), first, inner_lo);
  rows(std::false_type(), inner_lo, inner_hi);
  rows(std::true_type(), inner_hi, stop);
  StreamFence();
}

// `out = A @ x` (transposed = false: out rows i read data[d, i + off], x[i + off]) or
// `out = A^T @ x` (transposed = true: out rows j read data[d, j], x[j - off]).
template <typename T>
ffi::Error Product(ffi::ThreadPool& pool, const ffi::AnyBuffer& data, const ffi::AnyBuffer& x,
                   ffi::Span<const int64_t> offsets, ffi::Result<ffi::AnyBuffer>& out_buffer,
                   bool transposed) {
  const int64_t ndiag = Trailing(data, 2), n = Trailing(data, 1);
  if (ffi::Error error = CheckDiagonals(ndiag, offsets.size()); !error.success()) return error;
  const int64_t k = Trailing(x, 1);
  const int64_t operand_rows = Trailing(x, 2), out_rows = Trailing(*out_buffer, 2);
  const int64_t m = transposed ? operand_rows : out_rows;
  const int64_t batch = BatchOf(*out_buffer, 2);
  const int64_t values_stride = MemberStride(data, 2), x_stride = MemberStride(x, 2);
  const T* values = Data<T>(data);
  const T* operand = Data<T>(x);
  T* out = Data<T>(out_buffer);
  const int64_t work = batch * ndiag * out_rows * k;
  // Output row r pairs with stored column `column(r)` and operand row `source(r)`:
  // A @ x: column = source = r + off, r in [max(0, -off), min(m, n - off)).
  // A^T @ x: column = r, source = r - off, r in [max(0, off), min(n, m + off)).
  auto shifted = [&](int64_t b, int64_t d) {
    const int64_t off = offsets[d];
    const int64_t lo = transposed ? std::max<int64_t>(0, off) : std::max<int64_t>(0, -off);
    const int64_t hi = transposed ? std::min(n, m + off) : std::min(m, n - off);
    return ShiftedDiagonal<T>{values + b * values_stride + d * n + (transposed ? 0 : off),
                              operand + b * x_stride + (transposed ? -off : off) * k, lo,
                              std::max(lo, hi)};
  };
  if (k < 2) {
    // Diagonal by diagonal into a block of the output small enough to stay in L1.
    auto block = [&](int64_t b, int64_t first, int64_t stop) {
      T* member_out = out + b * out_rows * k;
      std::fill(member_out + first * k, member_out + stop * k, T(0));
      if (k == 0) return;
      int64_t d = 0;
      for (; d + 4 <= ndiag; d += 4) {
        const ShiftedDiagonal<T> group[4] = {shifted(b, d), shifted(b, d + 1), shifted(b, d + 2),
                                             shifted(b, d + 3)};
        AddFourDiagonals(group, first, stop, member_out);
      }
      for (; d < ndiag; ++d) {
        const ShiftedDiagonal<T> diagonal = shifted(b, d);
        const int64_t lo = std::max(first, diagonal.lo), hi = std::min(stop, diagonal.hi);
        if (hi > lo) AddShiftedProducts(diagonal.values, diagonal.source, lo, hi, member_out);
      }
    };
    ForRowBlocks(pool, batch, out_rows, L1BlockRows(k), work, block);
    return ffi::Error::Success();
  }
  if (k > kRowWiseMaxColumns && ndiag <= kWideMaxDiagonals) {
    // Whole rows from every diagonal, each thread's rows of a member in one walk.
    auto rows = [&](int64_t b, int64_t first, int64_t stop) {
      ShiftedDiagonal<T> diagonals[kWideMaxDiagonals];
      for (int64_t d = 0; d < ndiag; ++d) diagonals[d] = shifted(b, d);
      SumWideRows(diagonals, ndiag, k, first, stop, out + b * out_rows * k);
    };
    ForRowBlocks(pool, batch, out_rows, std::max<int64_t>(out_rows, 1), work, rows);
    return ffi::Error::Success();
  }
  // Row by row over groups of kDiagonalGroup diagonals: the first group writes the block
  // of rows (zeros, with no diagonal at all), later ones add to it while it is in the L1
  // cache. A group reads its diagonals and operand rows as a few streams of memory.
  auto block = [&](int64_t b, int64_t first, int64_t stop) {
    T* member_out = out + b * out_rows * k;
    ShiftedDiagonal<T> group[kDiagonalGroup];
    for (int64_t d0 = 0; d0 < std::max<int64_t>(ndiag, 1); d0 += kDiagonalGroup) {
      const int64_t count = std::min(kDiagonalGroup, ndiag - d0);
      for (int64_t d = 0; d < count; ++d) group[d] = shifted(b, d0 + d);
      if (d0 == 0) {
        SumDiagonalsRowWise<false>(group, count, k, first, stop, member_out);
      } else {
        SumDiagonalsRowWise<true>(group, count, k, first, stop, member_out);
      }
    }
  };
  ForRowBlocks(pool, batch, out_rows, L1BlockRows(k), work, block);
  return ffi::Error::Success();
}

// The buffers of `A @ x` (transposed: `A^T @ g`): data `(ndiag, n)` and the dense operand
// `(rows, k)`, each with a batch axis or shared; the result `(rows, k)`, batched where an
// input is. The product's operand has n rows, the transposed product's result.
ffi::Error CheckProductBuffers(const ffi::AnyBuffer& data, const ffi::AnyBuffer& dense,
                               const ffi::AnyBuffer& out, bool transposed) {
  const ffi::DataType type = data.element_type();
  const NamedBuffer values{data, "data", 2}, operand{dense, transposed ? "g" : "x", 2};
  const NamedBuffer result{out, "the result", 2};
  JAXSPARSE_RETURN_IF_ERROR(CheckBuffer(values, type, /*may_batch=*/true));
  JAXSPARSE_RETURN_IF_ERROR(CheckBuffer(operand, type, /*may_batch=*/true));
  JAXSPARSE_RETURN_IF_ERROR(CheckBuffer(result, type, /*may_batch=*/true));
  JAXSPARSE_RETURN_IF_ERROR(
      CheckAxis(transposed ? result : operand, 0, values.Axis(1), "data's columns, n"));
  JAXSPARSE_RETURN_IF_ERROR(CheckAxis(result, 1, operand.Axis(1), "the operand's columns"));
  JAXSPARSE_RETURN_IF_ERROR(CheckBatch(values, result));
  return CheckBatch(operand, result);
}

ffi::Error DiaMatmulImpl(ffi::ThreadPool pool, ffi::AnyBuffer data, ffi::AnyBuffer x,
                         ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> offsets) {
  JAXSPARSE_RETURN_IF_ERROR(CheckProductBuffers(data, x, *out, /*transposed=*/false));
  AdviseHugePages(out);
  return WithValueType(data.element_type(), "data", [&](auto value) {
    return Product<decltype(value)>(pool, data, x, offsets, out, /*transposed=*/false);
  });
}

ffi::Error DiaMatmulTImpl(ffi::ThreadPool pool, ffi::AnyBuffer data, ffi::AnyBuffer g,
                          ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> offsets) {
  JAXSPARSE_RETURN_IF_ERROR(CheckProductBuffers(data, g, *out, /*transposed=*/true));
  AdviseHugePages(out);
  return WithValueType(data.element_type(), "data", [&](auto value) {
    return Product<decltype(value)>(pool, data, g, offsets, out, /*transposed=*/true);
  });
}

ffi::Error DiaSddmmImpl(ffi::ThreadPool pool, ffi::AnyBuffer g, ffi::AnyBuffer x,
                        ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> offsets) {
  JAXSPARSE_RETURN_IF_ERROR(CheckSddmmBuffers(g, x, *out));
  AdviseHugePages(out);
  return WithValueType(g.element_type(), "g", [&](auto value) {
    return Sddmm<decltype(value)>(pool, g, x, offsets, out);
  });
}

}  // namespace
}  // namespace jaxsparse

#define JAXSPARSE_DIA_BINDING      \
  xla::ffi::Ffi::Bind()            \
      .Ctx<xla::ffi::ThreadPool>() \
      .Arg<xla::ffi::AnyBuffer>()  \
      .Arg<xla::ffi::AnyBuffer>()  \
      .Ret<xla::ffi::AnyBuffer>()  \
      .Attr<xla::ffi::Span<const int64_t>>("offsets")

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxsparseDiaMatmul, jaxsparse::DiaMatmulImpl, JAXSPARSE_DIA_BINDING);
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxsparseDiaMatmulT, jaxsparse::DiaMatmulTImpl,
                              JAXSPARSE_DIA_BINDING);
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxsparseDiaSddmm, jaxsparse::DiaSddmmImpl, JAXSPARSE_DIA_BINDING);
