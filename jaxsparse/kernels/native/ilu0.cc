// ILU(0) for CPU on a square CSR pattern: the numeric factorization in place and the
// preconditioner's application by forward and backward substitution, float32, float64,
// complex64 and complex128.
//
// The pattern is `indptr` (n + 1), `cols` (nnz) with each row's columns strictly
// increasing, and `diagonal` (n), the position of each row's diagonal entry, all int32.
// The factors share it: entries before a row's diagonal hold L (unit diagonal implied),
// the rest U. Rows depend on earlier rows (L) or later rows (U), so each sweep is one
// ordered pass; columns of a multi-column operand are split over the threads. Every index
// is checked where it is read (a bad pattern is an InvalidArgument error, never an
// out-of-bounds access); a zero pivot divides by zero (inf or nan, as in exact arithmetic).

#include <algorithm>
#include <atomic>
#include <complex>
#include <cstdint>
#include <string>
#include <vector>

#include "buffer_checks.h"
#include "dispatch.h"
#include "handlers.h"
#include "pages.h"
#include "parallel.h"

namespace jaxsparse {
namespace {

// The pattern's buffers, checked for type and rank, with n and nnz.
struct Pattern {
  const int32_t* cols;
  const int32_t* indptr;
  const int32_t* diagonal;
  int64_t n;
  int64_t nnz;
};

ffi::Error CheckPattern(const ffi::AnyBuffer& values, const char* values_name,
                        const ffi::AnyBuffer& cols, const ffi::AnyBuffer& indptr,
                        const ffi::AnyBuffer& diagonal, Pattern& pattern) {
  const NamedBuffer named_values{values, values_name, 1};
  const NamedBuffer named_cols{cols, "cols", 1};
  const NamedBuffer named_indptr{indptr, "indptr", 1};
  const NamedBuffer named_diagonal{diagonal, "diagonal", 1};
  JAXSPARSE_RETURN_IF_ERROR(CheckBuffer(named_cols, ffi::DataType::S32, false));
  JAXSPARSE_RETURN_IF_ERROR(CheckBuffer(named_indptr, ffi::DataType::S32, false));
  JAXSPARSE_RETURN_IF_ERROR(CheckBuffer(named_diagonal, ffi::DataType::S32, false));
  JAXSPARSE_RETURN_IF_ERROR(CheckBuffer(named_values, values.element_type(), false));
  const int64_t n = named_diagonal.Axis(0), nnz = named_cols.Axis(0);
  JAXSPARSE_RETURN_IF_ERROR(CheckAxis(named_indptr, 0, n + 1, "n + 1"));
  JAXSPARSE_RETURN_IF_ERROR(CheckAxis(named_values, 0, nnz, "nnz, the length of cols"));
  pattern = {Data<int32_t>(cols), Data<int32_t>(indptr), Data<int32_t>(diagonal), n, nnz};
  return ffi::Error::Success();
}

// Row `i`'s entries [start, end) and diagonal position `d` lie inside the pattern, its
// diagonal entry is at `d`, and its columns increase strictly.
bool RowValid(const Pattern& p, int64_t i, int64_t start, int64_t end, int64_t d) {
  if (start < 0 || end < start || end > p.nnz || d < start || d >= end) return false;
  if (p.cols[d] != i) return false;
  for (int64_t q = start; q < end; ++q) {
    const int64_t col = p.cols[q];
    if (col < 0 || col >= p.n || (q > start && col <= p.cols[q - 1])) return false;
  }
  return true;
}

ffi::Error BadPattern() {
  return ffi::Error::InvalidArgument(
      "ILU(0): invalid pattern (indptr, cols sorted within rows, diagonal positions)");
}

template <typename T>
ffi::Error Factor(const Pattern& p, const T* values, T* a) {
  std::copy(values, values + p.nnz, a);
  // where[j]: the position of column j in the current row, or -1.
  std::vector<int64_t> where(p.n, -1);
  for (int64_t i = 0; i < p.n; ++i) {
    const int64_t start = p.indptr[i], end = p.indptr[i + 1], d = p.diagonal[i];
    if (!RowValid(p, i, start, end, d)) return BadPattern();
    for (int64_t q = start; q < end; ++q) where[p.cols[q]] = q;
    // Eliminate the row's lower entries left to right, each by an earlier (finished) row.
    for (int64_t q = start; q < d; ++q) {
      const int64_t k = p.cols[q];
      const T multiplier = a[q] / a[p.diagonal[k]];
      a[q] = multiplier;
      for (int64_t r = p.diagonal[k] + 1; r < p.indptr[k + 1]; ++r) {
        const int64_t target = where[p.cols[r]];
        if (target >= 0) a[target] -= multiplier * a[r];
      }
    }
    for (int64_t q = start; q < end; ++q) where[p.cols[q]] = -1;
  }
  return ffi::Error::Success();
}

// x <- U^{-1} L^{-1} x (transpose false) or L^{-T} U^{-T} x (plain transposes), on the
// columns [c0, c1) of the row-major (n, k) array x. Returns false on a bad pattern.
template <typename T>
bool Apply(const Pattern& p, const T* a, T* x, int64_t k, int64_t c0, int64_t c1, bool transpose) {
  const int32_t* cols = p.cols;
  auto row_ok = [&](int64_t i) {
    const int64_t start = p.indptr[i], end = p.indptr[i + 1], d = p.diagonal[i];
    return start >= 0 && start <= d && d < end && end <= p.nnz;
  };
  auto lower_ok = [&](int64_t i, int64_t q) { return cols[q] >= 0 && cols[q] < i; };
  auto upper_ok = [&](int64_t i, int64_t q) { return cols[q] > i && cols[q] < p.n; };
  if (!transpose && c1 - c0 == 1) {
    // One column: each row's sum stays in a register, and the pivot's inverse is computed
    // off the chain of dependent rows (a division on it would stall every row).
    T* column = x + c0;
    for (int64_t i = 0; i < p.n; ++i) {
      if (!row_ok(i)) return false;
      T sum = column[i * k];
      for (int64_t q = p.indptr[i]; q < p.diagonal[i]; ++q) {
        if (!lower_ok(i, q)) return false;
        sum -= a[q] * column[cols[q] * k];
      }
      column[i * k] = sum;
    }
    for (int64_t i = p.n - 1; i >= 0; --i) {
      const T inverse = T(1) / a[p.diagonal[i]];
      T sum = column[i * k];
      for (int64_t q = p.diagonal[i] + 1; q < p.indptr[i + 1]; ++q) {
        if (!upper_ok(i, q)) return false;
        sum -= a[q] * column[cols[q] * k];
      }
      column[i * k] = sum * inverse;
    }
    return true;
  }
  for (int64_t i = 0; i < p.n; ++i) {
    if (!row_ok(i)) return false;
  }
  if (!transpose) {
    // L y = x: row i needs the earlier rows.
    for (int64_t i = 0; i < p.n; ++i) {
      for (int64_t q = p.indptr[i]; q < p.diagonal[i]; ++q) {
        if (!lower_ok(i, q)) return false;
        const T* source = x + cols[q] * k;
        for (int64_t c = c0; c < c1; ++c) x[i * k + c] -= a[q] * source[c];
      }
    }
    // U x = y: row i needs the later rows.
    for (int64_t i = p.n - 1; i >= 0; --i) {
      for (int64_t q = p.diagonal[i] + 1; q < p.indptr[i + 1]; ++q) {
        if (!upper_ok(i, q)) return false;
        const T* source = x + cols[q] * k;
        for (int64_t c = c0; c < c1; ++c) x[i * k + c] -= a[q] * source[c];
      }
      const T inverse = T(1) / a[p.diagonal[i]];
      for (int64_t c = c0; c < c1; ++c) x[i * k + c] *= inverse;
    }
    return true;
  }
  // U^T z = x: row i of U scatters into later rows once z[i] is known.
  for (int64_t i = 0; i < p.n; ++i) {
    const T pivot = a[p.diagonal[i]];
    for (int64_t c = c0; c < c1; ++c) x[i * k + c] /= pivot;
    for (int64_t q = p.diagonal[i] + 1; q < p.indptr[i + 1]; ++q) {
      if (!upper_ok(i, q)) return false;
      T* target = x + cols[q] * k;
      for (int64_t c = c0; c < c1; ++c) target[c] -= a[q] * x[i * k + c];
    }
  }
  // L^T x = z: row i of L scatters into earlier rows once x[i] is known.
  for (int64_t i = p.n - 1; i >= 0; --i) {
    for (int64_t q = p.indptr[i]; q < p.diagonal[i]; ++q) {
      if (!lower_ok(i, q)) return false;
      T* target = x + cols[q] * k;
      for (int64_t c = c0; c < c1; ++c) target[c] -= a[q] * x[i * k + c];
    }
  }
  return true;
}

ffi::Error Ilu0FactorImpl(ffi::AnyBuffer values, ffi::AnyBuffer cols, ffi::AnyBuffer indptr,
                          ffi::AnyBuffer diagonal, ffi::Result<ffi::AnyBuffer> factors) {
  Pattern p;
  JAXSPARSE_RETURN_IF_ERROR(CheckPattern(values, "values", cols, indptr, diagonal, p));
  const NamedBuffer named_factors{*factors, "factors", 1};
  JAXSPARSE_RETURN_IF_ERROR(CheckBuffer(named_factors, values.element_type(), false));
  JAXSPARSE_RETURN_IF_ERROR(CheckAxis(named_factors, 0, p.nnz, "nnz"));
  return WithValueType(values.element_type(), "ILU(0) values", [&](auto value) {
    using T = decltype(value);
    return Factor<T>(p, Data<T>(values), Data<T>(factors));
  });
}

ffi::Error Ilu0ApplyImpl(ffi::ThreadPool pool, ffi::AnyBuffer factors, ffi::AnyBuffer cols,
                         ffi::AnyBuffer indptr, ffi::AnyBuffer diagonal, ffi::AnyBuffer rhs,
                         ffi::Result<ffi::AnyBuffer> out, int64_t transpose) {
  Pattern p;
  JAXSPARSE_RETURN_IF_ERROR(CheckPattern(factors, "factors", cols, indptr, diagonal, p));
  const NamedBuffer named_rhs{rhs, "r", 2}, named_out{*out, "out", 2};
  JAXSPARSE_RETURN_IF_ERROR(CheckBuffer(named_rhs, factors.element_type(), false));
  JAXSPARSE_RETURN_IF_ERROR(CheckBuffer(named_out, factors.element_type(), false));
  JAXSPARSE_RETURN_IF_ERROR(CheckAxis(named_rhs, 0, p.n, "n"));
  JAXSPARSE_RETURN_IF_ERROR(CheckAxis(named_out, 0, p.n, "n"));
  const int64_t k = named_rhs.Axis(1);
  JAXSPARSE_RETURN_IF_ERROR(CheckAxis(named_out, 1, k, "r's columns"));
  if (transpose != 0 && transpose != 1) {
    return ffi::Error::InvalidArgument("ILU(0): transpose must be 0 or 1");
  }
  AdviseHugePages(out);
  return WithValueType(factors.element_type(), "ILU(0) factors", [&](auto value) {
    using T = decltype(value);
    T* x = Data<T>(out);
    std::copy(Data<T>(rhs), Data<T>(rhs) + p.n * k, x);
    const int64_t blocks = std::min<int64_t>(k, 8);
    const int64_t parts = NumParts(pool, 2 * p.nnz * k, blocks);
    std::atomic<bool> valid{true};
    ParallelFor(pool, parts, [&](int64_t part) {
      const int64_t c0 = PieceStart(k, parts, part), c1 = PieceStart(k, parts, part + 1);
      if (c1 > c0 && !Apply<T>(p, Data<T>(factors), x, k, c0, c1, transpose != 0)) {
        valid = false;
      }
    });
    return valid ? ffi::Error::Success() : BadPattern();
  });
}

}  // namespace
}  // namespace jaxsparse

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxsparseIlu0Factor, jaxsparse::Ilu0FactorImpl,
                              xla::ffi::Ffi::Bind()
                                  .Arg<xla::ffi::AnyBuffer>()    // values (nnz,)
                                  .Arg<xla::ffi::AnyBuffer>()    // cols (nnz,), int32
                                  .Arg<xla::ffi::AnyBuffer>()    // indptr (n + 1,), int32
                                  .Arg<xla::ffi::AnyBuffer>()    // diagonal (n,), int32
                                  .Ret<xla::ffi::AnyBuffer>());  // factors (nnz,)

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxsparseIlu0Apply, jaxsparse::Ilu0ApplyImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::ThreadPool>()
                                  .Arg<xla::ffi::AnyBuffer>()    // factors (nnz,)
                                  .Arg<xla::ffi::AnyBuffer>()    // cols (nnz,), int32
                                  .Arg<xla::ffi::AnyBuffer>()    // indptr (n + 1,), int32
                                  .Arg<xla::ffi::AnyBuffer>()    // diagonal (n,), int32
                                  .Arg<xla::ffi::AnyBuffer>()    // r (n, k)
                                  .Ret<xla::ffi::AnyBuffer>()    // out (n, k)
                                  .Attr<int64_t>("transpose"));  // 0: M r, 1: M^T r
