// The CPU DIA kernels' row blocks and the gradient in the diagonals, shared by
// dia_kernels.cc (the products and `dia_sddmm`) and banded_solve.cc (the banded solve's
// adjoint, which returns the negated gradient of x = A^{-1} b in the values).
//
// data[d, j] == A[j - offsets[d], j]; slots whose row falls outside [0, m) get a zero
// gradient.

#ifndef JAXSPARSE_NATIVE_DIA_SDDMM_H_
#define JAXSPARSE_NATIVE_DIA_SDDMM_H_

#include <algorithm>
#include <cstdint>
#include <string>

#include "arrays.h"
#include "buffer_checks.h"
#include "dispatch.h"
#include "pages.h"
#include "parallel.h"

namespace jaxsparse {

// Output values per block: 4 KiB of float32 (8 KiB of float64 / complex64), small enough
// that a block's output stays in the L1 cache while every diagonal adds into it.
inline constexpr int64_t kBlockValues = 1024;

inline ffi::Error CheckDiagonals(int64_t ndiag, size_t noffsets) {
  if (static_cast<size_t>(ndiag) != noffsets) {
    return ffi::Error::InvalidArgument("DIA data has " + std::to_string(ndiag) +
                                       " diagonals but offsets has " + std::to_string(noffsets) +
                                       " entries");
  }
  return ffi::Error::Success();
}

// Rows of k columns in a block whose output stays in the L1 cache.
inline int64_t L1BlockRows(int64_t k) {
  return std::max<int64_t>(1, kBlockValues / std::max<int64_t>(k, 1));
}

// Calls block(b, first, stop) for consecutive blocks of rows [first, stop) of each member
// b of a batch of `batch`, covering [0, rows) for every member, spread over the pool with
// the members one after another (each member's diagonals are read as long streams), each
// block at most block_rows rows.
template <typename F>
void ForRowBlocks(ffi::ThreadPool& pool, int64_t batch, int64_t rows, int64_t block_rows,
                  int64_t work, const F& block) {
  const int64_t parts = NumParts(pool, work);
  const int64_t total = batch * rows;
  ParallelFor(pool, parts, [&](int64_t part) {
    const int64_t begin = PieceStart(total, parts, part);
    const int64_t end = PieceStart(total, parts, part + 1);
    for (int64_t b = begin / std::max<int64_t>(rows, 1); b * rows < end; ++b) {
      const int64_t stop = std::min(rows, end - b * rows);
      for (int64_t first = std::max<int64_t>(0, begin - b * rows); first < stop;
           first += block_rows) {
        block(b, first, std::min(stop, first + block_rows));
      }
    }
  });
}

// The gradient in the diagonals, out[d, j] = g[j - offsets[d]] . x[j] (plain products,
// JAX's transpose convention for complex values), negated with `Negate`.
template <typename T, bool Negate = false>
ffi::Error Sddmm(ffi::ThreadPool& pool, const ffi::AnyBuffer& g, const ffi::AnyBuffer& x,
                 ffi::Span<const int64_t> offsets, ffi::Result<ffi::AnyBuffer>& out_buffer) {
  const int64_t ndiag = Trailing(*out_buffer, 2), n = Trailing(*out_buffer, 1);
  if (ffi::Error error = CheckDiagonals(ndiag, offsets.size()); !error.success()) return error;
  const int64_t m = Trailing(g, 2), k = Trailing(g, 1);
  const int64_t batch = BatchOf(*out_buffer, 2);
  const int64_t g_stride = MemberStride(g, 2), x_stride = MemberStride(x, 2);
  const T* cotangent = Data<T>(g);
  const T* operand = Data<T>(x);
  T* out = Data<T>(out_buffer);
  const T sign = Negate ? T(-1) : T(1);
  const int64_t work = batch * ndiag * n * std::max<int64_t>(k, 1);
  ForRowBlocks(pool, batch, n, L1BlockRows(k), work, [&](int64_t b, int64_t first, int64_t stop) {
    const T* member_x = operand + b * x_stride;
    for (int64_t d = 0; d < ndiag; ++d) {
      const int64_t off = offsets[d];
      T* row = out + (b * ndiag + d) * n;
      // Column j is inside the matrix when its row j - off lies in [0, m).
      const int64_t lo = std::clamp<int64_t>(off, first, stop);
      const int64_t hi = std::clamp<int64_t>(m + off, lo, stop);
      std::fill(row + first, row + lo, T(0));
      std::fill(row + hi, row + stop, T(0));
      const T* shifted = cotangent + b * g_stride - off * k;
      if (k == 1) {
        for (int64_t j = lo; j < hi; ++j) row[j] = sign * (shifted[j] * member_x[j]);
        continue;
      }
      // Block by block of columns, each a dot product of compile-time width for every
      // slot of the row block (the same sums, in the same order, as Dot), eight slots at
      // a time (EightFixedDots), which shares the shuffles of the final adds. The first
      // block writes the slots, later ones add.
      if (k == 0) std::fill(row + lo, row + hi, T(0));
      ForColumnBlocks<T>(k, 0, [&](auto width, int64_t c0) {
        constexpr int W = decltype(width)::value;
        int64_t j = lo;
        for (; j + 8 <= hi; j += 8) {
          const T* lefts[8];
          const T* rights[8];
          for (int s = 0; s < 8; ++s) {
            lefts[s] = shifted + (j + s) * k + c0;
            rights[s] = member_x + (j + s) * k + c0;
          }
          T dots[8];
          EightFixedDots<W>(lefts, rights, dots);
          for (int s = 0; s < 8; ++s)
            row[j + s] = c0 == 0 ? sign * dots[s] : row[j + s] + sign * dots[s];
        }
        for (; j < hi; ++j) {
          const T dot = FixedDot<W>(shifted + j * k + c0, member_x + j * k + c0);
          row[j] = c0 == 0 ? sign * dot : row[j] + sign * dot;
        }
      });
    }
  });
  return ffi::Error::Success();
}

// The buffers of the values' gradient: g `(m, k)` and x `(n, k)`, each with a batch axis or
// shared; the result `(ndiag, n)`, batched where an input is.
inline ffi::Error CheckSddmmBuffers(const ffi::AnyBuffer& g, const ffi::AnyBuffer& x,
                                    const ffi::AnyBuffer& out) {
  const ffi::DataType type = g.element_type();
  const NamedBuffer cotangent{g, "g", 2}, operand{x, "x", 2}, result{out, "the result", 2};
  JAXSPARSE_RETURN_IF_ERROR(CheckBuffer(cotangent, type, /*may_batch=*/true));
  JAXSPARSE_RETURN_IF_ERROR(CheckBuffer(operand, type, /*may_batch=*/true));
  JAXSPARSE_RETURN_IF_ERROR(CheckBuffer(result, type, /*may_batch=*/true));
  JAXSPARSE_RETURN_IF_ERROR(CheckAxis(operand, 0, result.Axis(1), "the result's columns, n"));
  JAXSPARSE_RETURN_IF_ERROR(CheckAxis(operand, 1, cotangent.Axis(1), "g's columns"));
  JAXSPARSE_RETURN_IF_ERROR(CheckBatch(cotangent, result));
  return CheckBatch(operand, result);
}

// The adjoint of x = A^{-1} b for a cotangent g in one call: `solve(T{})` writes lambda =
// A^{-T} g (checking its own buffers), then the values' cotangent -lambda[j - offsets[d]]
// . x[j] (Sddmm negated), after the checks of the gradient's buffers.
template <typename F>
ffi::Error AdjointThenValuesCotangent(ffi::ThreadPool& pool, ffi::DataType type,
                                      const ffi::AnyBuffer& x, ffi::Result<ffi::AnyBuffer>& lambda,
                                      ffi::Result<ffi::AnyBuffer>& dvalues,
                                      ffi::Span<const int64_t> offsets, const F& solve) {
  JAXSPARSE_RETURN_IF_ERROR(CheckSddmmBuffers(*lambda, x, *dvalues));
  AdviseHugePages(lambda);
  AdviseHugePages(dvalues);
  return WithValueType(type, "DIA values", [&](auto value) {
    using T = decltype(value);
    JAXSPARSE_RETURN_IF_ERROR(solve(value));
    return Sddmm<T, /*Negate=*/true>(pool, *lambda, x, offsets, dvalues);
  });
}

}  // namespace jaxsparse

#endif  // JAXSPARSE_NATIVE_DIA_SDDMM_H_
