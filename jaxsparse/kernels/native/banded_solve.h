// A banded system op(A) x = b solved in one pass from a DIA matrix's diagonals, with no
// stored factors: LU with partial pivoting (LAPACK's gbsv semantics), the elimination fused
// with the right-hand sides and the copy of b, then back substitution.
//
// The pass eliminates a block M of rows of op(A), M's row i being op(A)'s row base + dir * i
// (dir = -1 reads the block bottom up, the matrix reversed). A window holds the kl + 1 rows
// that can still be pivot rows, each as its kl + ku + 1 entries from the current column;
// each finished row of U is kept scaled by its inverse pivot (`u`, kl + ku values a row)
// and the right-hand side likewise (`x`, in place), so back substitution multiplies and
// adds only. A pass can also eliminate a block of rows, for the split over two threads
// (banded_split.h).

#ifndef JAXSPARSE_NATIVE_BANDED_SOLVE_H_
#define JAXSPARSE_NATIVE_BANDED_SOLVE_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <vector>

namespace jaxsparse {
namespace banded {

// Which system a solve answers: A, A^T or A^H.
enum class Op : int64_t { kPlain = 0, kTranspose = 1, kAdjoint = 2 };

// A's bandwidths kl, ku from the offsets of its diagonals, those wholly outside an n x n
// matrix dropped.
inline void Bandwidths(const int64_t* offsets, size_t count, int64_t n, int64_t& kl, int64_t& ku) {
  kl = ku = 0;
  for (size_t d = 0; d < count; ++d) {
    if (offsets[d] <= -n || offsets[d] >= n) continue;
    kl = std::max(kl, -offsets[d]);
    ku = std::max(ku, offsets[d]);
  }
}

// LAPACK's pivot magnitude: |re| + |im| for complex values (i?amax), |x| for real ones.
template <typename T>
double Magnitude(T value) {
  return std::abs(value);
}
template <typename R>
double Magnitude(std::complex<R> value) {
  return std::abs(value.real()) + std::abs(value.imag());
}

// A lower bound of |value| from Magnitude (which exceeds |z| by at most sqrt(2)): diagonal
// dominance is tested with Magnitude off the diagonal and this on it, which is sufficient.
template <typename T>
double LowerMagnitude(T value) {
  return Magnitude(value);
}
template <typename R>
double LowerMagnitude(std::complex<R> value) {
  return Magnitude(value) * 0.7071067811865475;
}

template <typename T>
T Conj(T value) {
  return value;
}
template <typename R>
std::complex<R> Conj(std::complex<R> value) {
  return std::conj(value);
}

// The rows and columns of op(A) from DIA values (ndiag, n): diagonal d holds op(A)(r, r +
// shift[d]) at data[d * n + r + index_shift[d]] (for A: shift = offset and the index the
// column; for A^T: shift = -offset and the index the row).
template <typename T>
struct Diagonals {
  const T* data;
  int64_t n, ndiag;
  const int64_t* shift;
  const int64_t* index_shift;
  bool conjugate;

  T Value(int64_t d, int64_t index) const {
    const T value = data[d * n + index];
    return conjugate ? Conj(value) : value;
  }
};

// A block of op(A)'s rows read as a matrix M: M(i, j) = op(A)(base + dir * i, base + dir * j)
// for rows i in [0, m). Columns past m are the other block's (extra columns).
struct Block {
  int64_t base, dir, m;
};

// The bandwidths of M, fixed at compile time for narrow bands (KL, KU >= 0) or read at run
// time (-1), and its window: kl + 1 rows of kl + ku + 1 entries.
template <typename T, int KL, int KU>
struct Window {
  static constexpr bool kFixed = KL >= 0 && KU >= 0;
  int64_t runtime_kl, runtime_ku;
  std::conditional_t<kFixed, std::array<T, (KL + 1) * (KL + KU + 1) + 1>, std::vector<T>> values;

  Window(int64_t kl_, int64_t ku_) : runtime_kl(kl_), runtime_ku(ku_) {
    if constexpr (!kFixed)
      values.assign((kl_ + 1) * (kl_ + ku_ + 1), T(0));
    else
      values.fill(T(0));
  }
  int64_t kl() const { return kFixed ? KL : runtime_kl; }
  int64_t ku() const { return kFixed ? KU : runtime_ku; }
  int64_t kv() const { return kl() + ku(); }
  T& at(int64_t r, int64_t p) { return values[r * (kv() + 1) + p]; }
};

// Dominance of one index of op(A), when checked: bit 0 its row's, bit 1 its column's.
inline constexpr int kRowDominant = 1, kColumnDominant = 2;

// What one forward pass found: `info` is 0 or the 1-based row of M of the first zero pivot;
// `dominant` the dominance bits that held for every index it read (when it checked).
struct ForwardResult {
  int64_t info = 0;
  int dominant = kRowDominant | kColumnDominant;
  bool stopped = false;  // stopped early: this block or the other is not dominant

  // At every 1024th column `j` of a checked pass: whether to stop, because this block or
  // the other thread's is not dominant (telling the other thread so).
  bool StopsAt(int64_t j, bool check, std::atomic<bool>* stop) {
    if (!check || (j & 1023) != 0) return false;
    if (dominant != 0 && !stop->load(std::memory_order_relaxed)) return false;
    stop->store(true, std::memory_order_relaxed);
    stopped = true;
    return true;
  }
};

// Where a pass keeps the factors beside u (see Pass), or nothing (lower null).
template <typename T>
struct Kept {
  T* lower = nullptr;
  int64_t lower_stride = 0;
  int32_t* pivot = nullptr;
};

// How a solve that kept its factors made them: a zero pivot met (the solve is nan), one pass
// over the whole matrix, or the two blocks of the split (banded_split.h).
enum Status : int32_t { kSingular = 0, kWhole = 1, kSplit = 2 };

// One forward pass's block and buffers; `x` holds op(A)'s unknowns (n, k).
template <typename T>
struct Pass {
  const Diagonals<T>& a;
  Block block;
  int64_t kl, ku;  // M's bandwidths
  const T* b;      // (n, k)
  T* x;            // (n, k)
  int64_t k;
  T* u;  // (m, kl + ku): row j of U past its diagonal, over its pivot
  // The rest of the factors, kept when `lower` is not null (banded_factored.h solves with
  // them): `lower` row j (stride lower_stride >= kl + 1) the inverse of row j's pivot, then
  // the multipliers of rows j + 1 ... j + kl; `pivot[j]` the row j + pivot[j] swapped with
  // row j first.
  T* lower = nullptr;
  int64_t lower_stride = 0;
  int32_t* pivot = nullptr;

  T* Row(int64_t i) const { return x + (block.base + block.dir * i) * k; }
  T* LowerRow(int64_t j) const { return lower == nullptr ? nullptr : lower + j * lower_stride; }
  // This pass keeping its factors in `kept` from M's row `first` on.
  Pass With(const Kept<T>& kept, int64_t first) const {
    Pass pass = *this;
    if (kept.lower != nullptr) {
      pass.lower = kept.lower + first * kept.lower_stride;
      pass.lower_stride = kept.lower_stride;
      pass.pivot = kept.pivot + first;
    }
    return pass;
  }
};

// Loads M's row i into window row r whose first entry is column `first`; with `check`,
// returns the dominance bits of op(A)'s row and column of that index.
template <typename T, typename W>
int LoadRow(const Pass<T>& pass, W& window, int64_t i, int64_t r, int64_t first, bool check) {
  const Diagonals<T>& a = pass.a;
  const int64_t kv = window.kv();
  for (int64_t p = 0; p <= kv; ++p) window.at(r, p) = T(0);
  const int64_t row = pass.block.base + pass.block.dir * i;
  double column_off = 0;
  for (int64_t d = 0; d < a.ndiag; ++d) {
    const int64_t column = row + a.shift[d];
    if (column >= 0 && column < a.n) {
      const int64_t p = pass.block.dir * a.shift[d] + i - first;  // M column - first
      window.at(r, p) += a.Value(d, row + a.index_shift[d]);
    }
    // op(A)(row - shift, row): the same index of the other kind, for column dominance (a
    // sum of magnitudes, never less than that of the entries summed).
    const int64_t other = row - a.shift[d];
    if (check && a.shift[d] != 0 && other >= 0 && other < a.n) {
      column_off += Magnitude(a.data[d * a.n + other + a.index_shift[d]]);
    }
  }
  if (!check) return kRowDominant | kColumnDominant;
  const int64_t main = i - first;  // the diagonal's position in the window row
  double off = 0;
  for (int64_t p = 0; p <= kv; ++p) {
    if (p != main) off += Magnitude(window.at(r, p));
  }
  const double diagonal = LowerMagnitude(window.at(r, main));
  return (off <= diagonal ? kRowDominant : 0) | (column_off <= diagonal ? kColumnDominant : 0);
}

// The forward pass over M's rows: elimination with partial pivoting fused with the
// right-hand sides (copied from b as rows enter the window). Entries in columns past m
// (the other block's unknowns) are kept like any other. With `check` set, stops soon
// after it reads an index where neither kind of dominance holds, or when `stop` turns true.
template <typename T, int KL, int KU>
ForwardResult Forward(const Pass<T>& pass, bool check, std::atomic<bool>* stop) {
  Window<T, KL, KU> window(pass.kl, pass.ku);
  const int64_t m = pass.block.m, kl = window.kl(), kv = window.kv(), k = pass.k;
  ForwardResult result;
  auto enter = [&](int64_t i, int64_t r, int64_t first) {
    if (i >= m) {
      for (int64_t p = 0; p <= kv; ++p) window.at(r, p) = T(0);
      return;
    }
    const T* source = pass.b + (pass.block.base + pass.block.dir * i) * k;
    std::copy(source, source + k, pass.Row(i));
    result.dominant &= LoadRow(pass, window, i, r, first, check);
  };
  for (int64_t r = 0; r <= kl; ++r) enter(r, r, 0);
  for (int64_t j = 0; j < m; ++j) {
    if (result.StopsAt(j, check, stop)) return result;
    const int64_t below = std::min(kl, m - 1 - j);
    int64_t pivot = 0;
    double largest = Magnitude(window.at(0, 0));
    for (int64_t t = 1; t <= below; ++t) {
      const double magnitude = Magnitude(window.at(t, 0));
      if (magnitude > largest) largest = magnitude, pivot = t;
    }
    T* xj = pass.Row(j);
    if (pivot != 0) {
      for (int64_t p = 0; p <= kv; ++p) std::swap(window.at(0, p), window.at(pivot, p));
      std::swap_ranges(xj, xj + k, pass.Row(j + pivot));
    }
    const T diagonal = window.at(0, 0);
    if (diagonal == T(0)) {
      result.info = j + 1;
      return result;
    }
    T* kept = pass.LowerRow(j);
    for (int64_t t = 1; t <= below; ++t) {
      const T l = window.at(t, 0) / diagonal;
      for (int64_t p = 1; p <= kv; ++p) window.at(t, p) -= l * window.at(0, p);
      T* xt = pass.Row(j + t);
      for (int64_t c = 0; c < k; ++c) xt[c] -= l * xj[c];
      if (kept != nullptr) kept[t] = l;
    }
    const T inverse = T(1) / diagonal;
    if (kept != nullptr) {
      std::fill(kept + below + 1, kept + kl + 1, T(0));
      kept[0] = inverse;
      pass.pivot[j] = static_cast<int32_t>(pivot);
    }
    T* uj = pass.u + j * kv;
    for (int64_t p = 1; p <= kv; ++p) uj[p - 1] = window.at(0, p) * inverse;
    for (int64_t c = 0; c < k; ++c) xj[c] *= inverse;
    for (int64_t r = 0; r < kl; ++r) {
      for (int64_t p = 0; p < kv; ++p) window.at(r, p) = window.at(r + 1, p + 1);
      window.at(r, kv) = T(0);
    }
    enter(j + kl + 1, kl, j + 1);
  }
  return result;
}

// Forward for fixed narrow bandwidths: the window and, for one right-hand side, its
// entries live in registers, every index known at compile time. Needs op(A)'s diagonals at
// distinct offsets (`position[p]`: the diagonal at window position p, or -1).
template <typename T, int KL, int KU, bool kVector>
ForwardResult ForwardFixed(const Pass<T>& pass, const int64_t* position, bool check,
                           std::atomic<bool>* stop) {
  constexpr int KV = KL + KU;
  const Diagonals<T>& a = pass.a;
  const int64_t m = pass.block.m, k = pass.k, dir = pass.block.dir, base = pass.block.base;
  const int64_t n = a.n;
  const T* source[KV + 1];
  const T* column_source[KV + 1];  // the same diagonal read along op(A)'s column
  int64_t margin = 0;
  for (int p = 0; p <= KV; ++p) {
    const int64_t d = position[p];
    source[p] = d < 0 ? nullptr : a.data + d * n + a.index_shift[d];
    column_source[p] = d < 0 ? nullptr : a.data + d * n + a.index_shift[d] - a.shift[d];
    if (d >= 0) margin = std::max<int64_t>(margin, 2 * std::abs(a.shift[d]));
  }
  ForwardResult result;
  // M's row i, its entries from column i - KL, and its right-hand side (one vector's).
  auto enter = [&](int64_t i, T* row, T& right) {
    for (int p = 0; p <= KV; ++p) row[p] = T(0);
    right = T(0);
    if (i >= m) return;
    const int64_t index = base + dir * i;
    if constexpr (kVector) {
      right = pass.b[index];
    } else {
      std::copy(pass.b + index * k, pass.b + index * k + k, pass.x + index * k);
    }
    if (index < margin || index >= n - margin) {  // edge rows: the general loader
      Window<T, KL, KU> one(KL, KU);
      result.dominant &= LoadRow(pass, one, i, 0, i - KL, check);
      for (int p = 0; p <= KV; ++p) row[p] = one.at(0, p);
      return;
    }
    for (int p = 0; p <= KV; ++p) {
      if (source[p] != nullptr) {
        row[p] = a.conjugate ? Conj(source[p][index]) : source[p][index];
      }
    }
    if (check) {
      double off = 0, column_off = 0;
      for (int p = 0; p <= KV; ++p) {
        if (p == KL) continue;
        off += Magnitude(row[p]);
        if (column_source[p] != nullptr) column_off += Magnitude(column_source[p][index]);
      }
      const double diagonal = LowerMagnitude(row[KL]);
      result.dominant &=
          (off <= diagonal ? kRowDominant : 0) | (column_off <= diagonal ? kColumnDominant : 0);
    }
  };
  T w[KL + 1][KV + 1];
  T rhs[KL + 1];
  for (int r = 0; r <= KL; ++r) {  // row r starts at column 0, KL - r left of where it enters
    T row[KV + 1];
    enter(r, row, rhs[r]);
    for (int p = 0; p <= KV; ++p) {
      const int q = p + KL - r;
      w[r][p] = q <= KV ? row[q] : T(0);
    }
  }
  for (int64_t j = 0; j < m; ++j) {
    if (result.StopsAt(j, check, stop)) return result;
    int pivot = 0;
    double largest = Magnitude(w[0][0]);
    for (int t = 1; t <= KL; ++t) {
      const double magnitude = Magnitude(w[t][0]);
      if (magnitude > largest) largest = magnitude, pivot = t;
    }
    T* xj = pass.Row(j);
    for (int t = 1; t <= KL; ++t) {
      if (pivot != t) continue;
      for (int p = 0; p <= KV; ++p) std::swap(w[0][p], w[t][p]);
      if constexpr (kVector)
        std::swap(rhs[0], rhs[t]);
      else
        std::swap_ranges(xj, xj + k, pass.Row(j + t));
    }
    const T diagonal = w[0][0];
    if (diagonal == T(0)) {
      result.info = j + 1;
      return result;
    }
    T* kept = pass.LowerRow(j);
    for (int t = 1; t <= KL; ++t) {
      const T l = w[t][0] / diagonal;
      for (int p = 1; p <= KV; ++p) w[t][p] -= l * w[0][p];
      if constexpr (kVector) {
        rhs[t] -= l * rhs[0];
      } else if (j + t < m) {
        T* xt = pass.Row(j + t);
        for (int64_t c = 0; c < k; ++c) xt[c] -= l * xj[c];
      }
      if (kept != nullptr) kept[t] = l;  // zero for rows past the block's end
    }
    const T inverse = T(1) / diagonal;
    if (kept != nullptr) {
      kept[0] = inverse;
      pass.pivot[j] = pivot;
    }
    T* uj = pass.u + j * KV;
    for (int p = 1; p <= KV; ++p) uj[p - 1] = w[0][p] * inverse;
    if constexpr (kVector) {
      *xj = rhs[0] * inverse;
    } else {
      for (int64_t c = 0; c < k; ++c) xj[c] *= inverse;
    }
    for (int r = 0; r < KL; ++r) {
      for (int p = 0; p < KV; ++p) w[r][p] = w[r + 1][p + 1];
      w[r][KV] = T(0);
      rhs[r] = rhs[r + 1];
    }
    if constexpr (KL > 0) {
      enter(j + KL + 1, w[KL], rhs[KL]);
    } else {
      enter(j + 1, w[0], rhs[0]);
    }
  }
  return result;
}

// Back substitution of M's rows [0, last) from the bottom, the unknowns of rows [last,
// limit) already in x (limit - m extra columns past the block).
template <typename T>
void Backward(const Pass<T>& pass, int64_t kv, int64_t last, int64_t limit) {
  const int64_t k = pass.k;
  for (int64_t j = last - 1; j >= 0; --j) {
    T* xj = pass.Row(j);
    const T* uj = pass.u + j * kv;
    const int64_t reach = std::min(kv, limit - 1 - j);
    for (int64_t t = 1; t <= reach; ++t) {
      const T coefficient = uj[t - 1];
      const T* xt = pass.Row(j + t);
      for (int64_t c = 0; c < k; ++c) xj[c] -= coefficient * xt[c];
    }
  }
}

// Back substitution for vectors (k = 1) with the coefficients in registers.
template <typename T, int KV>
void BackwardVector(const Pass<T>& pass, int64_t last, int64_t limit) {
  const int64_t dir = pass.block.dir;
  T* x = pass.Row(0);
  int64_t j = last - 1;
  for (; j >= 0 && j + KV >= limit; --j) {
    const T* uj = pass.u + j * KV;
    T value = x[dir * j];
    for (int64_t t = 1; t <= KV && j + t < limit; ++t) value -= uj[t - 1] * x[dir * (j + t)];
    x[dir * j] = value;
  }
  for (; j >= 0; --j) {
    const T* uj = pass.u + j * KV;
    T value = x[dir * j];
    for (int t = 1; t <= KV; ++t) value -= uj[t - 1] * x[dir * (j + t)];
    x[dir * j] = value;
  }
}

// Calls fn(std::integral_constant KL, KU) with M's bandwidths fixed for the narrow bands of
// tridiagonal and pentadiagonal systems and their one-sided kin, else -1 (run time).
template <typename F>
void WithBandwidths(int64_t kl, int64_t ku, const F& fn) {
  using std::integral_constant;
  if (kl == 1 && ku == 1) return fn(integral_constant<int, 1>{}, integral_constant<int, 1>{});
  if (kl == 2 && ku == 2) return fn(integral_constant<int, 2>{}, integral_constant<int, 2>{});
  if (kl == 1 && ku == 0) return fn(integral_constant<int, 1>{}, integral_constant<int, 0>{});
  if (kl == 0 && ku == 1) return fn(integral_constant<int, 0>{}, integral_constant<int, 1>{});
  fn(integral_constant<int, -1>{}, integral_constant<int, -1>{});
}

template <typename T>
void BackwardAny(const Pass<T>& pass, int64_t kv, int64_t last, int64_t limit) {
  if (pass.k == 1 && kv == 2) return BackwardVector<T, 2>(pass, last, limit);
  if (pass.k == 1 && kv == 4) return BackwardVector<T, 4>(pass, last, limit);
  if (pass.k == 1 && kv == 1) return BackwardVector<T, 1>(pass, last, limit);
  Backward(pass, kv, last, limit);
}

// The forward pass with the fastest code for M's bandwidths and k.
template <typename T>
ForwardResult ForwardAny(const Pass<T>& pass, bool check, std::atomic<bool>* stop) {
  // Window positions of op(A)'s diagonals in M (-1: none), when they are distinct.
  const int64_t kv = pass.kl + pass.ku;
  std::vector<int64_t> position(kv + 1, -1);
  bool distinct = true;
  for (int64_t d = 0; d < pass.a.ndiag; ++d) {
    const int64_t shift = pass.a.shift[d];
    if (shift <= -pass.a.n || shift >= pass.a.n) continue;
    const int64_t p = pass.block.dir * shift + pass.kl;
    if (position[p] >= 0) distinct = false;
    position[p] = d;
  }
  ForwardResult result;
  WithBandwidths(pass.kl, pass.ku, [&](auto kl, auto ku) {
    constexpr int KL = decltype(kl)::value, KU = decltype(ku)::value;
    if constexpr (KL >= 0 && KU >= 0) {
      if (distinct) {
        result = pass.k == 1 ? ForwardFixed<T, KL, KU, true>(pass, position.data(), check, stop)
                             : ForwardFixed<T, KL, KU, false>(pass, position.data(), check, stop);
        return;
      }
    }
    result = Forward<T, KL, KU>(pass, check, stop);
  });
  return result;
}

// The whole matrix in one pass, keeping the factors in `kept` if it names buffers; a zero
// pivot gives nan everywhere (kSingular).
template <typename T>
Status SolveWhole(const Diagonals<T>& a, int64_t kl, int64_t ku, const T* b, T* x, int64_t k, T* u,
                  const Kept<T>& kept = {}) {
  const int64_t n = a.n;
  const Pass<T> pass = Pass<T>{a, Block{0, 1, n}, kl, ku, b, x, k, u}.With(kept, 0);
  const ForwardResult result = ForwardAny(pass, false, nullptr);
  if (result.info != 0) {
    std::fill(x, x + n * k, T(std::numeric_limits<double>::quiet_NaN()));
    return kSingular;
  }
  BackwardAny(pass, kl + ku, n, n);
  return kWhole;
}

}  // namespace banded
}  // namespace jaxsparse

#endif  // JAXSPARSE_NATIVE_BANDED_SOLVE_H_
