// Solves with the factors that the one-pass banded solve keeps (banded_solve.h, `Pass`): with
// A for the tangent of x = A^{-1} b and with A^T for its adjoint, by multiply-add sweeps with
// no division and no search for pivots.
//
// The forward pass took a block M of rows to T M = D U: T its row interchanges and
// eliminations (`pivot`, and `lower`'s multipliers), D the pivots (`lower`'s first column,
// inverted) and U unit upper (`u`, with its entries in the block's extra columns). So
// M^{-1} = U^{-1} D^{-1} T and M^{-T} = T^T D^{-1} U^{-T} (LAPACK's gbtrs with trans).
//
// A^T with the split's two blocks (banded_split.h): block i's equations read M_i^T l_i +
// E_o^T l_o = g_i, E_o the other block's extra columns. As [M_i | E_i] = T^{-1} D [U_i | F_i],
// with F_i u's entries in the extra columns, E_i^T l_i = F_i^T z_i for z_i = D T^{-T} l_i =
// U_i^{-T} (g_i - E_o^T l_o): what a block passes to the other is F^T of its last kl + ku
// entries of z. So both blocks sweep with U^T at once; a seam system of kl + ku unknowns
// gives the couplings; each block corrects its last entries of z; both blocks sweep with
// T^T D^{-1} at once.

#ifndef JAXSPARSE_NATIVE_BANDED_FACTORED_H_
#define JAXSPARSE_NATIVE_BANDED_FACTORED_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "banded_solve.h"
#include "banded_split.h"

namespace jaxsparse {
namespace banded {

// Copies M's right-hand sides (b's rows) into its unknowns (x's rows).
template <typename T>
void CopyRightHandSides(const Pass<T>& pass) {
  const int64_t k = pass.k;
  for (int64_t i = 0; i < pass.block.m; ++i) {
    const T* source = pass.b + (pass.block.base + pass.block.dir * i) * k;
    std::copy(source, source + k, pass.Row(i));
  }
}

// x = D^{-1} T x over M's rows, from the top: the forward pass's work on the right-hand
// sides, from its factors.
template <typename T>
void SweepLower(const Pass<T>& pass) {
  const int64_t m = pass.block.m, k = pass.k;
  for (int64_t j = 0; j < m; ++j) {
    const T* lj = pass.LowerRow(j);
    T* xj = pass.Row(j);
    if (pass.pivot[j] != 0) std::swap_ranges(xj, xj + k, pass.Row(j + pass.pivot[j]));
    const int64_t reach = std::min(pass.kl, m - 1 - j);
    for (int64_t t = 1; t <= reach; ++t) {
      T* xt = pass.Row(j + t);
      for (int64_t c = 0; c < k; ++c) xt[c] -= lj[t] * xj[c];
    }
    for (int64_t c = 0; c < k; ++c) xj[c] *= lj[0];
  }
}

// z = U^{-T} g over M's rows, from the top: g's rows read from pass.b, z written to x.
template <typename T>
void SweepUpperTransposed(const Pass<T>& pass) {
  const int64_t m = pass.block.m, kv = pass.kl + pass.ku, k = pass.k;
  for (int64_t j = 0; j < m; ++j) {
    T* xj = pass.Row(j);
    const T* gj = pass.b + (pass.block.base + pass.block.dir * j) * k;
    std::copy(gj, gj + k, xj);
    const int64_t reach = std::min(kv, j);
    for (int64_t t = 1; t <= reach; ++t) {
      const T coefficient = pass.u[(j - t) * kv + t - 1];
      const T* xt = pass.Row(j - t);
      for (int64_t c = 0; c < k; ++c) xj[c] -= coefficient * xt[c];
    }
  }
}

// The same for vectors (k = 1), the last KV entries of z in registers.
template <typename T, int KV>
void SweepUpperTransposedVector(const Pass<T>& pass) {
  const int64_t m = pass.block.m, dir = pass.block.dir;
  T* x = pass.Row(0);
  const T* g = pass.b + pass.block.base;
  const int64_t head = std::min<int64_t>(KV, m);
  for (int64_t j = 0; j < head; ++j) {
    T value = g[dir * j];
    for (int64_t t = 1; t <= j; ++t) value -= pass.u[(j - t) * KV + t - 1] * x[dir * (j - t)];
    x[dir * j] = value;
  }
  T recent[KV + 1];  // recent[t]: z[j - t]
  for (int t = 1; t <= KV; ++t) recent[t] = head - t >= 0 ? x[dir * (head - t)] : T(0);
  for (int64_t j = head; j < m; ++j) {
    T value = g[dir * j];
    for (int t = 1; t <= KV; ++t) value -= pass.u[(j - t) * KV + t - 1] * recent[t];
    x[dir * j] = value;
    for (int t = KV; t > 1; --t) recent[t] = recent[t - 1];
    recent[1] = value;
  }
}

// l = T^T D^{-1} z over M's rows in place, from the bottom.
template <typename T>
void SweepLowerTransposed(const Pass<T>& pass) {
  const int64_t m = pass.block.m, k = pass.k;
  for (int64_t j = m - 1; j >= 0; --j) {
    const T* lj = pass.LowerRow(j);
    T* xj = pass.Row(j);
    for (int64_t c = 0; c < k; ++c) xj[c] *= lj[0];
    const int64_t reach = std::min(pass.kl, m - 1 - j);
    for (int64_t t = 1; t <= reach; ++t) {
      const T* xt = pass.Row(j + t);
      for (int64_t c = 0; c < k; ++c) xj[c] -= lj[t] * xt[c];
    }
    if (pass.pivot[j] != 0) std::swap_ranges(xj, xj + k, pass.Row(j + pass.pivot[j]));
  }
}

// The same for vectors (k = 1) with KL multipliers a row.
template <typename T, int KL>
void SweepLowerTransposedVector(const Pass<T>& pass) {
  const int64_t m = pass.block.m, dir = pass.block.dir;
  T* x = pass.Row(0);
  int64_t j = m - 1;
  for (; j >= 0 && j + KL >= m; --j) {
    const T* lj = pass.LowerRow(j);
    T value = x[dir * j] * lj[0];
    for (int64_t t = 1; j + t < m; ++t) value -= lj[t] * x[dir * (j + t)];
    x[dir * j] = value;
    if (pass.pivot[j] != 0) std::swap(x[dir * j], x[dir * (j + pass.pivot[j])]);
  }
  for (; j >= 0; --j) {
    const T* lj = pass.LowerRow(j);
    T value = x[dir * j] * lj[0];
    for (int t = 1; t <= KL; ++t) value -= lj[t] * x[dir * (j + t)];
    x[dir * j] = value;
    if (pass.pivot[j] != 0) std::swap(x[dir * j], x[dir * (j + pass.pivot[j])]);
  }
}

template <typename T>
void SweepUpperTransposedAny(const Pass<T>& pass) {
  const int64_t kv = pass.kl + pass.ku;
  if (pass.k == 1 && kv == 2) return SweepUpperTransposedVector<T, 2>(pass);
  if (pass.k == 1 && kv == 4) return SweepUpperTransposedVector<T, 4>(pass);
  if (pass.k == 1 && kv == 1) return SweepUpperTransposedVector<T, 1>(pass);
  SweepUpperTransposed(pass);
}

template <typename T>
void SweepLowerTransposedAny(const Pass<T>& pass) {
  if (pass.k == 1 && pass.kl == 1) return SweepLowerTransposedVector<T, 1>(pass);
  if (pass.k == 1 && pass.kl == 2) return SweepLowerTransposedVector<T, 2>(pass);
  if (pass.k == 1 && pass.kl == 0) return SweepLowerTransposedVector<T, 0>(pass);
  SweepLowerTransposed(pass);
}

// One transposed block's part of the seam (see the top), over its last kv rows, after its
// sweep with U^T: `response` (kv, other), column q the change of those rows of z for a unit
// coupling at M's row m - 1 - q; `couple` (ext, k) = F^T z and `gain` (ext, other) = F^T
// response, ext the block's extra columns and other the other block's.
template <typename T>
void TransposedSeam(const Pass<T>& pass, int64_t ext, int64_t other, std::vector<T>& response,
                    std::vector<T>& couple, std::vector<T>& gain) {
  const int64_t m = pass.block.m, kv = pass.kl + pass.ku, k = pass.k, first = m - kv;
  response.assign(kv * other, T(0));
  for (int64_t q = 0; q < other; ++q) response[(kv - 1 - q) * other + q] = T(1);
  for (int64_t i = 1; i < kv; ++i) {
    for (int64_t t = 1; t <= i; ++t) {
      const T coefficient = pass.u[(first + i - t) * kv + t - 1];
      for (int64_t q = 0; q < other; ++q) {
        response[i * other + q] -= coefficient * response[(i - t) * other + q];
      }
    }
  }
  couple.assign(ext * k, T(0));
  gain.assign(ext * other, T(0));
  for (int64_t i = 0; i < kv; ++i) {  // row first + i reaches extra columns q <= i
    const T* zi = pass.Row(first + i);
    for (int64_t q = 0; q <= std::min(i, ext - 1); ++q) {
      const T f = pass.u[(first + i) * kv + q + kv - i - 1];
      for (int64_t c = 0; c < k; ++c) couple[q * k + c] += f * zi[c];
      for (int64_t r = 0; r < other; ++r) gain[q * other + r] += f * response[i * other + r];
    }
  }
}

// A^T l = g with the split's factors (`passes`: g in b, l out in x) on two threads; false (l
// undefined) at a zero pivot of the seam system.
template <typename T, typename Parallel>
bool SolveSplitTransposed(const std::array<Pass<T>, 2>& passes, const Parallel& parallel) {
  parallel(2, [&](int64_t part) { SweepUpperTransposedAny(passes[part]); });
  const int64_t kl = passes[0].kl, ku = passes[0].ku, kv = kl + ku, k = passes[0].k;
  std::vector<T> response[2], couple[2], gain[2];
  TransposedSeam(passes[0], ku, kl, response[0], couple[0], gain[0]);
  TransposedSeam(passes[1], kl, ku, response[1], couple[1], gain[1]);
  // Unknowns: the first block's coupling c0 (kl), then the second's c1 (ku), with
  // c0 + gain1 c1 = couple1 and gain0 c0 + c1 = couple0.
  std::vector<T> matrix(kv * kv, T(0)), rhs(kv * k);
  for (int64_t t = 0; t < kl; ++t) {
    matrix[t * kv + t] = T(1);
    for (int64_t q = 0; q < ku; ++q) matrix[t * kv + kl + q] = gain[1][t * ku + q];
    for (int64_t c = 0; c < k; ++c) rhs[t * k + c] = couple[1][t * k + c];
  }
  for (int64_t t = 0; t < ku; ++t) {
    const int64_t row = kl + t;
    matrix[row * kv + row] = T(1);
    for (int64_t q = 0; q < kl; ++q) matrix[row * kv + q] = gain[0][t * kl + q];
    for (int64_t c = 0; c < k; ++c) rhs[row * k + c] = couple[0][t * k + c];
  }
  if (!DenseSolve(matrix, rhs, kv, k)) return false;
  parallel(2, [&](int64_t part) {
    const Pass<T>& pass = passes[part];
    const int64_t other = part == 0 ? kl : ku, start = part == 0 ? 0 : kl;
    const int64_t first = pass.block.m - kv;
    for (int64_t i = 0; i < kv; ++i) {
      T* zi = pass.Row(first + i);
      for (int64_t q = 0; q < other; ++q) {
        const T r = response[part][i * other + q];
        for (int64_t c = 0; c < k; ++c) zi[c] -= r * rhs[(start + q) * k + c];
      }
    }
    SweepLowerTransposedAny(pass);
  });
  return true;
}

// A x = b with the split's factors on two threads; false at a zero pivot of the seam system.
template <typename T, typename Parallel>
bool SolveSplitFactored(const std::array<Pass<T>, 2>& passes, T* x, const Parallel& parallel) {
  parallel(2, [&](int64_t part) {
    CopyRightHandSides(passes[part]);
    SweepLower(passes[part]);
  });
  return FinishSplit(passes, x, parallel);
}

// op(A) x = b (`transposed`: A^T) with the factors of one pass over the whole matrix.
template <typename T>
void SolveWholeFactored(const Pass<T>& pass, bool transposed) {
  if (transposed) {
    SweepUpperTransposedAny(pass);
    SweepLowerTransposedAny(pass);
    return;
  }
  CopyRightHandSides(pass);
  SweepLower(pass);
  BackwardAny(pass, pass.kl + pass.ku, pass.block.m, pass.block.m);
}

}  // namespace banded
}  // namespace jaxsparse

#endif  // JAXSPARSE_NATIVE_BANDED_FACTORED_H_
