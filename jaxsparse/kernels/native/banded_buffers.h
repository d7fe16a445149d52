// The buffers of the banded solves' calls (banded_solve.cc, banded_factored.cc), checked
// before any is read: DIA data (..., ndiag, n), right-hand sides and unknowns (..., n, k),
// and the factors a solve keeps (banded_factored.h): u (..., n, kl + ku), lower (..., n,
// max(kl, ku) + 1), pivots (..., n) int32 and a status (...) int32 a matrix.

#ifndef JAXSPARSE_NATIVE_BANDED_BUFFERS_H_
#define JAXSPARSE_NATIVE_BANDED_BUFFERS_H_

#include <algorithm>
#include <cstdint>

#include "arrays.h"
#include "dispatch.h"

namespace jaxsparse {

// A call's sizes: `matrices` the DIA data's batch (1 or `batch`, b's).
struct BandedSizes {
  int64_t ndiag, n, k, batch, matrices;
};

inline ffi::Error CheckBandedSystem(const ffi::AnyBuffer& data, const ffi::AnyBuffer& rhs,
                                    const ffi::AnyBuffer& out, size_t noffsets,
                                    BandedSizes& sizes) {
  const auto dims = data.dimensions();
  const auto rhs_dims = rhs.dimensions();
  if (dims.size() < 2 || rhs_dims.size() < 2 || out.dimensions().size() != rhs_dims.size()) {
    return ffi::Error::InvalidArgument(
        "banded solve: DIA data must be (..., ndiag, n), b and x (..., n, k)");
  }
  const int64_t ndiag = dims[dims.size() - 2], n = dims.back(), k = rhs_dims.back();
  if (static_cast<size_t>(ndiag) != noffsets) {
    return ffi::Error::InvalidArgument("banded solve: DIA data and offsets disagree");
  }
  if (rhs_dims[rhs_dims.size() - 2] != n || Trailing(out, 2) != n || Trailing(out, 1) != k) {
    return ffi::Error::InvalidArgument("banded solve: b and x must be (..., n, k) for n rows");
  }
  if (rhs.element_type() != data.element_type() || out.element_type() != data.element_type()) {
    return ffi::Error::InvalidArgument("banded solve: DIA data, b and x must share a dtype");
  }
  const int64_t batch = LeadingSize(rhs, 2), matrices = LeadingSize(data, 2);
  if ((matrices != batch && matrices != 1) || LeadingSize(out, 2) != batch) {
    return ffi::Error::InvalidArgument("banded solve: DIA data's batch must be b's or 1");
  }
  sizes = BandedSizes{ndiag, n, k, batch, matrices};
  return ffi::Error::Success();
}

// The factors' buffers (the values' dtype `type`, pivots and status int32) for `matrices`
// matrices of n rows and bandwidths kl, ku.
struct FactorBuffers {
  const ffi::AnyBuffer& u;
  const ffi::AnyBuffer& lower;
  const ffi::AnyBuffer& pivots;
  const ffi::AnyBuffer& status;
};

inline ffi::Error CheckFactorBuffers(const FactorBuffers& f, ffi::DataType type, int64_t n,
                                     int64_t kl, int64_t ku, int64_t matrices) {
  if (f.u.element_type() != type || f.lower.element_type() != type ||
      f.pivots.element_type() != ffi::DataType::S32 ||
      f.status.element_type() != ffi::DataType::S32) {
    return ffi::Error::InvalidArgument(
        "banded solve: u and lower must be the values' dtype, pivots and status int32");
  }
  if (f.u.dimensions().size() < 2 || f.lower.dimensions().size() < 2 ||
      f.pivots.dimensions().size() < 1 || Trailing(f.u, 2) != n || Trailing(f.u, 1) != kl + ku ||
      Trailing(f.lower, 2) != n || Trailing(f.lower, 1) != std::max(kl, ku) + 1 ||
      Trailing(f.pivots, 1) != n) {
    return ffi::Error::InvalidArgument(
        "banded solve: u must be (..., n, kl + ku), lower (..., n, max(kl, ku) + 1) and pivots "
        "(..., n) for the offsets' bandwidths kl, ku");
  }
  if (LeadingSize(f.u, 2) != matrices || LeadingSize(f.lower, 2) != matrices ||
      LeadingSize(f.pivots, 1) != matrices || LeadingSize(f.status, 0) != matrices) {
    return ffi::Error::InvalidArgument("banded solve: the factors' batches differ");
  }
  return ffi::Error::Success();
}

}  // namespace jaxsparse

#endif  // JAXSPARSE_NATIVE_BANDED_BUFFERS_H_
