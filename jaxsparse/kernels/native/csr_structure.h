// What the structure kernels (csr_union.cc, csr_product.cc, csr_positions.cc) share: checks
// of a structure's index values, which name the first problem, so a call fails with it
// instead of reading out of bounds, and the loop over a batch's members.

#ifndef JAXSPARSE_NATIVE_CSR_STRUCTURE_H_
#define JAXSPARSE_NATIVE_CSR_STRUCTURE_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "arrays.h"
#include "parallel.h"

namespace jaxsparse {

// The first problem of an index pointer of `m` rows over `entries` entries, or "" if it has
// none.
template <typename I>
std::string IndptrProblem(const I* indptr, int64_t m, int64_t entries, const char* name) {
  if (indptr[0] != 0) {
    return std::string(name) + " should start with 0, got " + std::to_string(indptr[0]);
  }
  for (int64_t row = 0; row < m; ++row) {
    if (indptr[row + 1] < indptr[row]) {
      return std::string(name) + " must be a non-decreasing sequence: " + name + "[" +
             std::to_string(row + 1) + "] = " + std::to_string(indptr[row + 1]) + " < " +
             std::to_string(indptr[row]);
    }
  }
  if (indptr[m] != entries) {
    return std::string(name) + " should end with the number of entries " + std::to_string(entries) +
           ", got " + std::to_string(indptr[m]);
  }
  return "";
}

// Whether `column` lies in [0, n), one unsigned comparison.
template <typename I>
JAXSPARSE_INLINE bool Inside(I column, int64_t n) {
  return static_cast<uint64_t>(static_cast<int64_t>(column)) < static_cast<uint64_t>(n);
}

// Runs `build(parts, b)` for every member b of a batch of `batch`, each `work` long, and
// returns the first problem it names, or "" if none: one member is cut into pieces over the
// pool; a batch runs whole members side by side, and a piece stops at its first problem.
template <typename F>
std::string BuildMembers(xla::ffi::ThreadPool& pool, int64_t batch, int64_t work, const F& build) {
  if (batch == 1) return build(NumParts(pool, work), int64_t{0});
  const int64_t parts = std::min(batch, NumParts(pool, batch * work));
  std::vector<std::string> problems(parts);
  ParallelFor(pool, parts, [&](int64_t part) {
    for (int64_t b = PieceStart(batch, parts, part);
         b < PieceStart(batch, parts, part + 1) && problems[part].empty(); ++b) {
      problems[part] = build(int64_t{1}, b);
    }
  });
  for (const std::string& problem : problems) {
    if (!problem.empty()) return problem;
  }
  return "";
}

}  // namespace jaxsparse

#endif  // JAXSPARSE_NATIVE_CSR_STRUCTURE_H_
