// The one-pass banded solve (banded_solve.h) split over two threads, SPIKE-style with a
// reversed second block: rows [0, m1) are eliminated top down and rows [m1, n) bottom up,
// at once. Entries of a block's rows in the other block's columns stay in the window as
// extra columns, so a block's last rows come out as affine functions of the other block's
// first unknowns; the kl + ku unknowns at the seam then solve a small dense system, and
// both blocks back-substitute at once. The blocks and the seam system are as well
// conditioned as the matrix when it is diagonally dominant by rows or by columns; the split
// is used only then (checked on the rows as they are read), otherwise, or when a block or
// the seam system meets a zero pivot, the caller solves the whole matrix in one pass.

#ifndef JAXSPARSE_NATIVE_BANDED_SPLIT_H_
#define JAXSPARSE_NATIVE_BANDED_SPLIT_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

#include "banded_solve.h"

namespace jaxsparse {
namespace banded {

// The unknowns of M's last `rows` rows as affine functions of its `ext` extra columns' ones:
// `constant` (rows, k) with the extra unknowns zero, and `response` (rows, ext), column q
// the change for a unit q-th extra unknown. Reads x's scaled right-hand sides and u.
template <typename T>
void SeamResponse(const Pass<T>& pass, int64_t kv, int64_t rows, int64_t ext,
                  std::vector<T>& constant, std::vector<T>& response) {
  const int64_t m = pass.block.m, k = pass.k, width = k + ext;
  // Local rows [m - rows, m + ext) with k + ext columns: right-hand sides, then units.
  std::vector<T> local((rows + ext) * width, T(0));
  for (int64_t i = 0; i < rows; ++i) {
    const T* source = pass.Row(m - rows + i);
    std::copy(source, source + k, local.begin() + i * width);
  }
  for (int64_t q = 0; q < ext; ++q) local[(rows + q) * width + k + q] = T(1);
  for (int64_t i = rows - 1; i >= 0; --i) {
    const int64_t j = m - rows + i;
    const T* uj = pass.u + j * kv;
    for (int64_t t = 1; t <= kv && j + t < m + ext; ++t) {
      for (int64_t c = 0; c < width; ++c) {
        local[i * width + c] -= uj[t - 1] * local[(i + t) * width + c];
      }
    }
  }
  constant.assign(rows * k, T(0));
  response.assign(rows * ext, T(0));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t c = 0; c < k; ++c) constant[i * k + c] = local[i * width + c];
    for (int64_t q = 0; q < ext; ++q) response[i * ext + q] = local[i * width + k + q];
  }
}

// Solves the dense s x s system `matrix` y = rhs (s, k) in place by LU with partial
// pivoting; false at a zero pivot.
template <typename T>
bool DenseSolve(std::vector<T>& matrix, std::vector<T>& rhs, int64_t s, int64_t k) {
  for (int64_t j = 0; j < s; ++j) {
    int64_t pivot = j;
    for (int64_t i = j + 1; i < s; ++i) {
      if (Magnitude(matrix[i * s + j]) > Magnitude(matrix[pivot * s + j])) pivot = i;
    }
    if (matrix[pivot * s + j] == T(0)) return false;
    if (pivot != j) {
      for (int64_t c = 0; c < s; ++c) std::swap(matrix[j * s + c], matrix[pivot * s + c]);
      for (int64_t c = 0; c < k; ++c) std::swap(rhs[j * k + c], rhs[pivot * k + c]);
    }
    for (int64_t i = j + 1; i < s; ++i) {
      const T l = matrix[i * s + j] / matrix[j * s + j];
      for (int64_t c = j; c < s; ++c) matrix[i * s + c] -= l * matrix[j * s + c];
      for (int64_t c = 0; c < k; ++c) rhs[i * k + c] -= l * rhs[j * k + c];
    }
  }
  for (int64_t j = s - 1; j >= 0; --j) {
    for (int64_t c = j + 1; c < s; ++c) {
      for (int64_t r = 0; r < k; ++r) rhs[j * k + r] -= matrix[j * s + c] * rhs[c * k + r];
    }
    for (int64_t r = 0; r < k; ++r) rhs[j * k + r] /= matrix[j * s + j];
  }
  return true;
}

// The two blocks of the split, their factors kept in `kept` (if it names buffers) in M's
// row order: the first block's rows, then the second's. The second block reversed has the
// bandwidths swapped; its extra columns are the first block's last kl unknowns, the first
// block's are the second's first ku.
template <typename T>
std::array<Pass<T>, 2> SplitPasses(const Diagonals<T>& a, int64_t kl, int64_t ku, const T* b, T* x,
                                   int64_t k, T* u, const Kept<T>& kept) {
  const int64_t n = a.n, kv = kl + ku, m1 = n / 2, m2 = n - m1;
  return {Pass<T>{a, Block{0, 1, m1}, kl, ku, b, x, k, u}.With(kept, 0),
          Pass<T>{a, Block{n - 1, -1, m2}, ku, kl, b, x, k, u + m1 * kv}.With(kept, m1)};
}

// After both blocks' forward passes: the seam system, then both back substitutions at once;
// false at a zero pivot of the seam system.
template <typename T, typename Parallel>
bool FinishSplit(const std::array<Pass<T>, 2>& passes, T* x, const Parallel& parallel) {
  const int64_t kl = passes[0].kl, ku = passes[0].ku, kv = kl + ku, k = passes[0].k;
  const int64_t m1 = passes[0].block.m;
  // Seam unknowns: s0 = x[m1 - kl, m1) (first block's last rows, its order), s1 = x[m1, m1 +
  // ku). First block: s0 = c0 + r0 s1. Second block, reversed: its last ku rows are x[m1 + ku
  // - 1 - t], its extra column q is x[m1 - 1 - q].
  std::vector<T> c0, r0, c1, r1;
  SeamResponse(passes[0], kv, kl, ku, c0, r0);
  SeamResponse(passes[1], kv, ku, kl, c1, r1);
  const int64_t s = kv;
  std::vector<T> matrix(s * s, T(0)), rhs(s * k);
  for (int64_t t = 0; t < kl; ++t) {
    matrix[t * s + t] = T(1);
    for (int64_t q = 0; q < ku; ++q) matrix[t * s + kl + q] = -r0[t * ku + q];
    for (int64_t c = 0; c < k; ++c) rhs[t * k + c] = c0[t * k + c];
  }
  for (int64_t t = 0; t < ku; ++t) {
    const int64_t row = kl + (ku - 1 - t);
    matrix[row * s + row] = T(1);
    for (int64_t q = 0; q < kl; ++q) matrix[row * s + (kl - 1 - q)] -= r1[t * kl + q];
    for (int64_t c = 0; c < k; ++c) rhs[row * k + c] = c1[t * k + c];
  }
  if (!DenseSolve(matrix, rhs, s, k)) return false;
  std::copy(rhs.begin(), rhs.end(), x + (m1 - kl) * k);
  parallel(2, [&](int64_t part) {
    const Pass<T>& pass = passes[part];
    const int64_t known = part == 0 ? kl : ku, ext = part == 0 ? ku : kl;
    BackwardAny(pass, kv, pass.block.m - known, pass.block.m + ext);
  });
  return true;
}

// The split solve: rows [0, m1) top down and [m1, n) bottom up, on two threads through
// `parallel(2, fn)`, keeping the factors in `kept` if it names buffers (SplitPasses). Returns
// false (x and the factors undefined) when the split cannot be trusted: the matrix is not
// diagonally dominant, or a block or the seam system has a zero pivot.
template <typename T, typename Parallel>
bool SolveSplit(const Diagonals<T>& a, int64_t kl, int64_t ku, const T* b, T* x, int64_t k, T* u,
                const Parallel& parallel, const Kept<T>& kept = {}) {
  const std::array<Pass<T>, 2> passes = SplitPasses(a, kl, ku, b, x, k, u, kept);
  std::atomic<bool> stop{false};
  ForwardResult results[2];
  parallel(2, [&](int64_t part) { results[part] = ForwardAny(passes[part], true, &stop); });
  const int dominant = results[0].dominant & results[1].dominant;
  if (results[0].info != 0 || results[1].info != 0 || stop.load() || dominant == 0) {
    return false;
  }
  return FinishSplit(passes, x, parallel);
}

}  // namespace banded
}  // namespace jaxsparse

#endif  // JAXSPARSE_NATIVE_BANDED_SPLIT_H_
