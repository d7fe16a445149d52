// Solves on CPU with the factors that the one-pass banded solve keeps (banded_solve.cc,
// `jaxsparse_dia_banded_solve_keeping`; the sweeps in banded_factored.h): A x = b or
// A^T x = b, and the adjoint of x = A^{-1} b, lambda = A^{-T} g with the values' cotangent
// -lambda[j - offsets[d]] . x[j] (dia_sddmm.h, negated) in the same call.
//
// Batches: every leading axis before b's last two is a batch axis; the factors are b's
// batch or one matrix's for all of it. Members are split over XLA's intra-op threads; a
// single member whose factors come from the split solves on two threads, as it was factored.

#include "banded_factored.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "arrays.h"
#include "banded_buffers.h"
#include "banded_solve.h"
#include "banded_split.h"
#include "buffer_checks.h"
#include "dia_sddmm.h"
#include "dispatch.h"
#include "handlers.h"
#include "pages.h"
#include "parallel.h"

namespace jaxsparse {
namespace {

// Whether every pivot of one member's factors stays inside its block: row j of a block of m
// rows with kl rows below its diagonal swaps with a row of [j, min(j + kl, m - 1)].
bool PivotsInside(const int32_t* pivot, int64_t m, int64_t kl) {
  for (int64_t j = 0; j < m; ++j) {
    if (pivot[j] < 0 || pivot[j] > std::min(kl, m - 1 - j)) return false;
  }
  return true;
}

// Every index in the factors: any caller can hand any buffers to the target, so an unknown
// status or a pivot past its block is an error, never a read out of bounds.
ffi::Error CheckFactorIndices(const FactorBuffers& f, int64_t matrices, int64_t n, int64_t kl,
                              int64_t ku) {
  const int32_t* status = Data<int32_t>(f.status);
  const int32_t* pivots = Data<int32_t>(f.pivots);
  const int64_t m1 = n / 2;
  for (int64_t member = 0; member < matrices; ++member) {
    const int32_t* pivot = pivots + member * n;
    bool inside = true;
    switch (status[member]) {
      case banded::kSingular:
        break;
      case banded::kWhole:
        inside = PivotsInside(pivot, n, kl);
        break;
      case banded::kSplit:
        inside =
            m1 > kl + ku && PivotsInside(pivot, m1, kl) && PivotsInside(pivot + m1, n - m1, ku);
        break;
      default:
        return ffi::Error::InvalidArgument("banded factored solve: status must be 0, 1 or 2");
    }
    if (!inside) {
      return ffi::Error::InvalidArgument(
          "banded factored solve: a pivot or the split does not fit the matrix");
    }
  }
  return ffi::Error::Success();
}

// op(A) x = b from the factors (`transposed`: A^T); a member whose matrix was singular, or
// whose seam system is, gives nan.
template <typename T>
ffi::Error SolveFactored(ffi::ThreadPool& pool, const FactorBuffers& f, const ffi::AnyBuffer& rhs,
                         ffi::Span<const int64_t> offsets, bool transposed,
                         ffi::Result<ffi::AnyBuffer>& out) {
  if (rhs.dimensions().size() < 2 || out->dimensions().size() != rhs.dimensions().size() ||
      rhs.element_type() != f.u.element_type() || out->element_type() != f.u.element_type()) {
    return ffi::Error::InvalidArgument(
        "banded factored solve: the right-hand sides (b, or the adjoint's g) and the result "
        "must be (..., n, k) of the factors' dtype");
  }
  const int64_t n = Trailing(rhs, 2), k = Trailing(rhs, 1), batch = LeadingSize(rhs, 2);
  if (Trailing(*out, 2) != n || Trailing(*out, 1) != k || LeadingSize(*out, 2) != batch) {
    return ffi::Error::InvalidArgument("banded factored solve: x must have b's shape");
  }
  int64_t kl, ku;
  banded::Bandwidths(offsets.begin(), offsets.size(), n, kl, ku);
  const int64_t matrices = f.pivots.dimensions().size() < 1 ? 0 : LeadingSize(f.pivots, 1);
  if (matrices != batch && matrices != 1) {
    return ffi::Error::InvalidArgument(
        "banded factored solve: the factors' batch must be b's or 1");
  }
  JAXSPARSE_RETURN_IF_ERROR(CheckFactorBuffers(f, rhs.element_type(), n, kl, ku, matrices));
  JAXSPARSE_RETURN_IF_ERROR(CheckFactorIndices(f, matrices, n, kl, ku));
  const int64_t kv = kl + ku, width = std::max(kl, ku) + 1;
  // The sweeps only read the factors; Pass holds them writable for the pass that keeps them.
  T* u = const_cast<T*>(Data<T>(f.u));
  T* lower = const_cast<T*>(Data<T>(f.lower));
  int32_t* pivots = const_cast<int32_t*>(Data<int32_t>(f.pivots));
  const int32_t* status = Data<int32_t>(f.status);
  const T* b = Data<T>(rhs);
  T* x = Data<T>(out);
  const banded::Diagonals<T> none{nullptr, n, 0, nullptr, nullptr, false};  // no values read
  auto solve = [&](int64_t member, const auto& parallel) {
    const int64_t m = matrices == 1 ? 0 : member;
    const banded::Kept<T> kept{lower + m * n * width, width, pivots + m * n};
    const T* bm = b + member * n * k;
    T* xm = x + member * n * k;
    bool solved = status[m] != banded::kSingular;
    if (status[m] == banded::kWhole) {
      const banded::Pass<T> pass =
          banded::Pass<T>{none, banded::Block{0, 1, n}, kl, ku, bm, xm, k, u + m * n * kv}.With(
              kept, 0);
      banded::SolveWholeFactored(pass, transposed);
    } else if (solved) {
      const auto passes = banded::SplitPasses(none, kl, ku, bm, xm, k, u + m * n * kv, kept);
      solved = transposed ? banded::SolveSplitTransposed(passes, parallel)
                          : banded::SolveSplitFactored(passes, xm, parallel);
    }
    if (!solved) std::fill(xm, xm + n * k, T(std::numeric_limits<double>::quiet_NaN()));
  };
  if (batch == 1) {
    solve(0, [&](int64_t parts, const auto& fn) { ParallelFor(pool, parts, fn); });
    return ffi::Error::Success();
  }
  auto serial = [](int64_t parts, const auto& fn) {
    for (int64_t part = 0; part < parts; ++part) fn(part);
  };
  const int64_t parts = NumParts(pool, batch * n * k * (kv + 1), batch);
  ParallelFor(pool, parts, [&](int64_t part) {
    for (int64_t m = PieceStart(batch, parts, part); m < PieceStart(batch, parts, part + 1); ++m) {
      solve(m, serial);
    }
  });
  return ffi::Error::Success();
}

ffi::Error BandedFactoredSolveImpl(ffi::ThreadPool pool, ffi::AnyBuffer u, ffi::AnyBuffer lower,
                                   ffi::AnyBuffer pivots, ffi::AnyBuffer status, ffi::AnyBuffer rhs,
                                   ffi::Result<ffi::AnyBuffer> out,
                                   ffi::Span<const int64_t> offsets, int64_t op) {
  if (op != 0 && op != 1) {
    return ffi::Error::InvalidArgument("banded factored solve: op must be 0 (A) or 1 (A^T)");
  }
  AdviseHugePages(out);
  const FactorBuffers factors{u, lower, pivots, status};
  return WithValueType(u.element_type(), "the factors", [&](auto value) {
    return SolveFactored<decltype(value)>(pool, factors, rhs, offsets, op == 1, out);
  });
}

// The adjoint of x = A^{-1} b from the kept factors: lambda = A^{-T} g by the sweeps, then
// the values' cotangent.
ffi::Error BandedFactoredAdjointImpl(ffi::ThreadPool pool, ffi::AnyBuffer u, ffi::AnyBuffer lower,
                                     ffi::AnyBuffer pivots, ffi::AnyBuffer status, ffi::AnyBuffer x,
                                     ffi::AnyBuffer g, ffi::Result<ffi::AnyBuffer> lambda,
                                     ffi::Result<ffi::AnyBuffer> dvalues,
                                     ffi::Span<const int64_t> offsets) {
  const FactorBuffers factors{u, lower, pivots, status};
  return AdjointThenValuesCotangent(
      pool, u.element_type(), x, lambda, dvalues, offsets, [&](auto value) {
        return SolveFactored<decltype(value)>(pool, factors, g, offsets, true, lambda);
      });
}

}  // namespace
}  // namespace jaxsparse

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxsparseDiaBandedFactoredSolve, jaxsparse::BandedFactoredSolveImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::ThreadPool>()
                                  .Arg<xla::ffi::AnyBuffer>()  // u (..., n, kl + ku)
                                  .Arg<xla::ffi::AnyBuffer>()  // lower (..., n, max + 1)
                                  .Arg<xla::ffi::AnyBuffer>()  // pivots (..., n) int32
                                  .Arg<xla::ffi::AnyBuffer>()  // status (...) int32
                                  .Arg<xla::ffi::AnyBuffer>()  // b (..., n, k)
                                  .Ret<xla::ffi::AnyBuffer>()  // x (..., n, k)
                                  .Attr<xla::ffi::Span<const int64_t>>("offsets")
                                  .Attr<int64_t>("op"));  // 0: A, 1: A^T

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxsparseDiaBandedFactoredAdjoint,
                              jaxsparse::BandedFactoredAdjointImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::ThreadPool>()
                                  .Arg<xla::ffi::AnyBuffer>()  // u (..., n, kl + ku)
                                  .Arg<xla::ffi::AnyBuffer>()  // lower (..., n, max + 1)
                                  .Arg<xla::ffi::AnyBuffer>()  // pivots (..., n) int32
                                  .Arg<xla::ffi::AnyBuffer>()  // status (...) int32
                                  .Arg<xla::ffi::AnyBuffer>()  // x (..., n, k)
                                  .Arg<xla::ffi::AnyBuffer>()  // g (..., n, k)
                                  .Ret<xla::ffi::AnyBuffer>()  // lambda = A^{-T} g
                                  .Ret<xla::ffi::AnyBuffer>()  // dA (..., ndiag, n)
                                  .Attr<xla::ffi::Span<const int64_t>>("offsets"));
