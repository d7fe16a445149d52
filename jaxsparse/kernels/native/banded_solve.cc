// The one-pass banded solve of a square DIA matrix on CPU (`banded_solve.h`): what
// `spsolve` runs, with no factors kept, for float32, float64, complex64 and complex128.
//
// Batches: every leading axis before a buffer's last two is a batch axis; the DIA values
// are the right-hand sides' batch or one matrix for all of them. Members are split over
// XLA's intra-op threads; a single matrix large enough is split over two threads by rows
// where it is diagonally dominant (see banded_split.h).

#include "banded_solve.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "arrays.h"
#include "banded_split.h"
#include "dia_sddmm.h"
#include "dispatch.h"
#include "handlers.h"
#include "pages.h"
#include "parallel.h"

namespace jaxsparse {
namespace {

// Below this many rows a split's threads cost more than they save.
constexpr int64_t kMinSplitRows = 1 << 14;

template <typename T>
ffi::Error Solve(ffi::ThreadPool& pool, const ffi::AnyBuffer& data, const ffi::AnyBuffer& rhs,
                 ffi::Span<const int64_t> offsets, int64_t op, ffi::Result<ffi::AnyBuffer>& out) {
  const auto dims = data.dimensions();
  const auto rhs_dims = rhs.dimensions();
  if (dims.size() < 2 || rhs_dims.size() < 2 || out->dimensions().size() != rhs_dims.size()) {
    return ffi::Error::InvalidArgument(
        "banded solve: DIA data must be (..., ndiag, n), b and x (..., n, k)");
  }
  const int64_t ndiag = dims[dims.size() - 2], n = dims.back(), k = rhs_dims.back();
  if (static_cast<size_t>(ndiag) != offsets.size()) {
    return ffi::Error::InvalidArgument("banded solve: DIA data and offsets disagree");
  }
  if (rhs_dims[rhs_dims.size() - 2] != n || Trailing(*out, 2) != n || Trailing(*out, 1) != k) {
    return ffi::Error::InvalidArgument("banded solve: b and x must be (..., n, k) for n rows");
  }
  if (rhs.element_type() != data.element_type() || out->element_type() != data.element_type()) {
    return ffi::Error::InvalidArgument("banded solve: DIA data, b and x must share a dtype");
  }
  if (op < 0 || op > 2) return ffi::Error::InvalidArgument("banded solve: op must be 0, 1 or 2");
  const int64_t batch = LeadingSize(rhs, 2), matrices = LeadingSize(data, 2);
  if ((matrices != batch && matrices != 1) || LeadingSize(*out, 2) != batch) {
    return ffi::Error::InvalidArgument("banded solve: DIA data's batch must be b's or 1");
  }
  // op(A)'s diagonal d: op(A)(r, r + shift[d]) at data[d, r + index_shift[d]].
  const bool transposed = op != 0;
  std::vector<int64_t> shift(ndiag), index_shift(ndiag);
  int64_t kl = 0, ku = 0;
  for (int64_t d = 0; d < ndiag; ++d) {
    shift[d] = transposed ? -offsets[d] : offsets[d];
    index_shift[d] = transposed ? 0 : offsets[d];
    if (shift[d] <= -n || shift[d] >= n) continue;
    kl = std::max(kl, -shift[d]);
    ku = std::max(ku, shift[d]);
  }
  const int64_t kv = kl + ku;
  const T* values = Data<T>(data);
  const T* b = Data<T>(rhs);
  T* x = Data<T>(out);
  auto matrix = [&](int64_t member) {
    const int64_t f = matrices == 1 ? 0 : member;
    return banded::Diagonals<T>{values + f * ndiag * n, n,      ndiag, shift.data(),
                                index_shift.data(),     op == 2};
  };
  const bool split =
      batch == 1 && pool.num_threads() >= 2 && n >= kMinSplitRows && n >= 8 * (kv + 1);
  if (split) {
    std::unique_ptr<T[]> u(new T[std::max<int64_t>(1, n * kv)]);
    auto parallel = [&](int64_t parts, const auto& fn) { ParallelFor(pool, parts, fn); };
    const banded::Diagonals<T> a = matrix(0);
    if (!banded::SolveSplit(a, kl, ku, b, x, k, u.get(), parallel)) {
      banded::SolveWhole(a, kl, ku, b, x, k, u.get());
    }
    return ffi::Error::Success();
  }
  const int64_t parts = NumParts(pool, batch * n * k * (kv + 1) * (kl + 1), batch);
  ParallelFor(pool, parts, [&](int64_t part) {
    std::unique_ptr<T[]> u(new T[std::max<int64_t>(1, n * kv)]);
    for (int64_t m = PieceStart(batch, parts, part); m < PieceStart(batch, parts, part + 1); ++m) {
      banded::SolveWhole(matrix(m), kl, ku, b + m * n * k, x + m * n * k, k, u.get());
    }
  });
  return ffi::Error::Success();
}

ffi::Error BandedSolveImpl(ffi::ThreadPool pool, ffi::AnyBuffer data, ffi::AnyBuffer rhs,
                           ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> offsets,
                           int64_t op) {
  AdviseHugePages(out);
  return WithValueType(data.element_type(), "DIA values", [&](auto value) {
    return Solve<decltype(value)>(pool, data, rhs, offsets, op, out);
  });
}

// The adjoint of x = A^{-1} b for a cotangent g: lambda = A^{-T} g, and the values'
// cotangent -lambda[j - offsets[d]] . x[j] (Sddmm negated) in the same call.
ffi::Error BandedAdjointImpl(ffi::ThreadPool pool, ffi::AnyBuffer data, ffi::AnyBuffer x,
                             ffi::AnyBuffer g, ffi::Result<ffi::AnyBuffer> lambda,
                             ffi::Result<ffi::AnyBuffer> dvalues,
                             ffi::Span<const int64_t> offsets) {
  // Solve checks data, g and lambda; these the gradient's buffers, lambda as its g.
  JAXSPARSE_RETURN_IF_ERROR(CheckSddmmBuffers(*lambda, x, *dvalues));
  AdviseHugePages(lambda);
  AdviseHugePages(dvalues);
  return WithValueType(data.element_type(), "DIA values", [&](auto value) {
    using T = decltype(value);
    JAXSPARSE_RETURN_IF_ERROR(Solve<T>(pool, data, g, offsets, 1, lambda));
    return Sddmm<T, /*Negate=*/true>(pool, *lambda, x, offsets, dvalues);
  });
}

}  // namespace
}  // namespace jaxsparse

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxsparseDiaBandedSolve, jaxsparse::BandedSolveImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::ThreadPool>()
                                  .Arg<xla::ffi::AnyBuffer>()  // DIA data (..., ndiag, n)
                                  .Arg<xla::ffi::AnyBuffer>()  // b (..., n, k)
                                  .Ret<xla::ffi::AnyBuffer>()  // x (..., n, k)
                                  .Attr<xla::ffi::Span<const int64_t>>("offsets")
                                  .Attr<int64_t>("op"));  // 0: A, 1: A^T, 2: A^H

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxsparseDiaBandedAdjoint, jaxsparse::BandedAdjointImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::ThreadPool>()
                                  .Arg<xla::ffi::AnyBuffer>()  // DIA data (..., ndiag, n)
                                  .Arg<xla::ffi::AnyBuffer>()  // x (..., n, k)
                                  .Arg<xla::ffi::AnyBuffer>()  // g (..., n, k)
                                  .Ret<xla::ffi::AnyBuffer>()  // lambda = A^{-T} g
                                  .Ret<xla::ffi::AnyBuffer>()  // dA (..., ndiag, n)
                                  .Attr<xla::ffi::Span<const int64_t>>("offsets"));
