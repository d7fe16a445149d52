// Shapes of a call's buffers, batched or not, and a dot product in a fixed order.

#ifndef JAXSPARSE_NATIVE_ARRAYS_H_
#define JAXSPARSE_NATIVE_ARRAYS_H_

#include <cstdint>

#include "xla/ffi/api/ffi.h"

#define JAXSPARSE_INLINE inline __attribute__((always_inline))

namespace jaxsparse {

// Elements per member of `buffer` if it has a leading batch axis (one more axis than its
// unbatched `rank`), else 0: the stride between members, 0 for an operand shared by the
// batch.
inline int64_t MemberStride(const xla::ffi::AnyBuffer& buffer, size_t rank) {
  const auto dims = buffer.dimensions();
  if (dims.size() != rank + 1) return 0;
  int64_t size = 1;
  for (size_t axis = 1; axis < dims.size(); ++axis) size *= dims[axis];
  return size;
}

// The batch size of a call from its result of unbatched rank `rank` (1 if unbatched).
inline int64_t BatchOf(const xla::ffi::AnyBuffer& out, size_t rank) {
  const auto dims = out.dimensions();
  return dims.size() == rank + 1 ? dims[0] : 1;
}

// The size of a trailing axis, counted from the end (1: the last).
inline int64_t Trailing(const xla::ffi::AnyBuffer& buffer, size_t from_end) {
  const auto dims = buffer.dimensions();
  return dims[dims.size() - from_end];
}

// sum of a[c] * b[c] over c in [0, k), in 8 interleaved partial sums added in a fixed
// order (so the products vectorize, and the result does not depend on the run).
template <typename T>
JAXSPARSE_INLINE T Dot(const T* a, const T* b, int64_t k) {
  constexpr int kLanes = 8;
  int64_t c = 0;
  T sum = T(0);
  if (k >= kLanes) {
    T lanes[kLanes] = {};
    for (; c + kLanes <= k; c += kLanes) {
      for (int lane = 0; lane < kLanes; ++lane) lanes[lane] += a[c + lane] * b[c + lane];
    }
    for (int lane = 0; lane < kLanes; ++lane) sum += lanes[lane];
  }
  for (; c < k; ++c) sum += a[c] * b[c];
  return sum;
}

}  // namespace jaxsparse

#endif  // JAXSPARSE_NATIVE_ARRAYS_H_
