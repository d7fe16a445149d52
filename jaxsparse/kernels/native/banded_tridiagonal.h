// Tridiagonal solves for the derivatives of `spsolve` (banded_solve.cc): one pass of
// elimination without row interchanges keeps the inverse pivots alone (n values a matrix,
// where the general kept factors of banded_factored.h take 4n and the interchanges), and the
// tangent and adjoint solves sweep with them and the matrix's values by multiply-adds. It
// runs only where every row or every column of A is diagonally dominant, checked as the pass
// reads them, which keeps elimination without interchanges stable; the caller solves with
// pivoting otherwise.

#ifndef JAXSPARSE_NATIVE_BANDED_TRIDIAGONAL_H_
#define JAXSPARSE_NATIVE_BANDED_TRIDIAGONAL_H_

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "banded_solve.h"

namespace jaxsparse {
namespace tridiagonal {

// A's diagonals from DIA values (data[d, j] = A(j - offset[d], j)), an absent one as zeros:
// A(i, i - 1) = lower[i - 1], A(i, i) = diagonal[i], A(i, i + 1) = upper[i + 1]. The slots
// outside the matrix (upper[0], lower[n - 1]) are never read.
template <typename T>
struct Bands {
  const T* lower;
  const T* diagonal;
  const T* upper;
  int64_t n;
};

// `fn(k)` with `k` a compile-time 1 for one column, so that the sweeps' loops over columns
// vanish from their chains of dependent rows.
template <typename F>
void WithColumns(int64_t k, const F& fn) {
  if (k == 1) return fn(std::integral_constant<int64_t, 1>{});
  fn(k);
}

// U x = z in place (x holds z): U's diagonal the pivots, its superdiagonal A's.
template <typename T, typename Columns>
void BackSubstitute(const Bands<T>& a, const T* inverse, Columns k, T* x) {
  const int64_t n = a.n;
  for (int64_t c = 0; c < k; ++c) x[(n - 1) * k + c] *= inverse[n - 1];
  for (int64_t i = n - 2; i >= 0; --i) {
    const T upper = a.upper[i + 1];
    for (int64_t c = 0; c < k; ++c) {
      x[i * k + c] = (x[i * k + c] - upper * x[(i + 1) * k + c]) * inverse[i];
    }
  }
}

// A x = b (b and x (n, k)), keeping the inverse pivots `inverse` (n); false (x and inverse
// undefined) unless every row or every column is diagonally dominant and no pivot is zero.
template <typename T, typename Columns>
bool SolveKeeping(const Bands<T>& a, Columns k, const T* b, T* x, T* inverse) {
  using banded::LowerMagnitude, banded::Magnitude;
  const int64_t n = a.n;
  if (n == 0) return true;
  const T *lower = a.lower, *diagonal = a.diagonal, *upper = a.upper;
  // Row i's off-diagonal entries lower[i - 1], upper[i + 1]; column i's upper[i], lower[i].
  auto off_row = [&](int64_t i) {
    return (i > 0 ? Magnitude(lower[i - 1]) : 0.0) + (i + 1 < n ? Magnitude(upper[i + 1]) : 0.0);
  };
  auto off_column = [&](int64_t i) {
    return (i > 0 ? Magnitude(upper[i]) : 0.0) + (i + 1 < n ? Magnitude(lower[i]) : 0.0);
  };
  bool rows = true, columns = true, nonzero = true;
  T previous = T(0);  // the inverse pivot of the row before
  for (int64_t i = 0; i < n; ++i) {
    const double main = LowerMagnitude(diagonal[i]);
    rows &= main >= off_row(i);
    columns &= main >= off_column(i);
    const T multiplier = i > 0 ? lower[i - 1] * previous : T(0);
    const T pivot = diagonal[i] - (i > 0 ? multiplier * upper[i] : T(0));
    nonzero &= pivot != T(0);
    previous = T(1) / pivot;
    inverse[i] = previous;
    for (int64_t c = 0; c < k; ++c) {
      x[i * k + c] = b[i * k + c] - (i > 0 ? multiplier * x[(i - 1) * k + c] : T(0));
    }
  }
  if (!(rows || columns) || !nonzero) return false;
  BackSubstitute(a, inverse, k, x);
  return true;
}

// A x = b (`transposed`: A^T x = b, plain transposes) with the inverse pivots of
// SolveKeeping: A = L U with L(i, i - 1) = A(i, i - 1) / pivot(i - 1) and U's diagonal the
// pivots, its superdiagonal A's.
template <typename T, typename Columns>
void SolveKept(const Bands<T>& a, const T* inverse, Columns k, const T* b, T* x, bool transposed) {
  const int64_t n = a.n;
  const T *lower = a.lower, *upper = a.upper;
  if (n == 0) return;
  if (!transposed) {  // L z = b top down, then U x = z bottom up
    std::copy(b, b + k, x);
    for (int64_t i = 1; i < n; ++i) {
      const T l = lower[i - 1] * inverse[i - 1];
      for (int64_t c = 0; c < k; ++c) x[i * k + c] = b[i * k + c] - l * x[(i - 1) * k + c];
    }
    BackSubstitute(a, inverse, k, x);
    return;
  }
  // U^T w = b top down (U^T(i, i - 1) = A(i - 1, i) = upper[i]), then L^T x = w bottom up
  // (L^T(i, i + 1) = A(i + 1, i) / pivot(i) = lower[i] inverse[i]).
  for (int64_t c = 0; c < k; ++c) x[c] = b[c] * inverse[0];
  for (int64_t i = 1; i < n; ++i) {
    for (int64_t c = 0; c < k; ++c) {
      x[i * k + c] = (b[i * k + c] - upper[i] * x[(i - 1) * k + c]) * inverse[i];
    }
  }
  for (int64_t i = n - 2; i >= 0; --i) {
    const T l = lower[i] * inverse[i];
    for (int64_t c = 0; c < k; ++c) x[i * k + c] -= l * x[(i + 1) * k + c];
  }
}

}  // namespace tridiagonal
}  // namespace jaxsparse

#endif  // JAXSPARSE_NATIVE_BANDED_TRIDIAGONAL_H_
