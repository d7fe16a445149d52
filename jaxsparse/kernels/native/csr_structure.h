// Checks of a CSR structure's index values that the structure kernels (csr_union.cc,
// csr_product.cc) share: they name the first problem, so a call fails with it instead of
// reading out of bounds.

#ifndef JAXSPARSE_NATIVE_CSR_STRUCTURE_H_
#define JAXSPARSE_NATIVE_CSR_STRUCTURE_H_

#include <cstdint>
#include <string>

#include "arrays.h"

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

}  // namespace jaxsparse

#endif  // JAXSPARSE_NATIVE_CSR_STRUCTURE_H_
