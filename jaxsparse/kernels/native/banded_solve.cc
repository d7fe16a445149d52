// The one-pass banded solve of a square DIA matrix on CPU (`banded_solve.h`): what
// `spsolve` runs, for float32, float64, complex64 and complex128, with no factors kept, or
// keeping them for the solves of its derivatives (banded_factored.h); for a tridiagonal
// band, keeping its inverse pivots alone (banded_tridiagonal.h), with the one-pass solve as
// the fallback of those solves.
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
#include "banded_buffers.h"
#include "banded_split.h"
#include "banded_tridiagonal.h"
#include "buffer_checks.h"
#include "dia_sddmm.h"
#include "dispatch.h"
#include "handlers.h"
#include "pages.h"
#include "parallel.h"

namespace jaxsparse {
namespace {

// Below this many rows a split's threads cost more than they save.
constexpr int64_t kMinSplitRows = 1 << 14;

// The buffers a solve keeps A's factors in (banded_buffers.h), a member each.
struct KeptBuffers {
  ffi::Result<ffi::AnyBuffer>& u;
  ffi::Result<ffi::AnyBuffer>& lower;
  ffi::Result<ffi::AnyBuffer>& pivots;
  ffi::Result<ffi::AnyBuffer>& status;
};

// op(A) x = b in one pass; with `kept`, A's factors too (op must be 0, and the DIA data
// batched as b).
// `rhs_values`: b's values where not in `rhs` (a copy, for a b that x overwrites).
template <typename T>
ffi::Error Solve(ffi::ThreadPool& pool, const ffi::AnyBuffer& data, const ffi::AnyBuffer& rhs,
                 ffi::Span<const int64_t> offsets, int64_t op, ffi::Result<ffi::AnyBuffer>& out,
                 const KeptBuffers* kept = nullptr, const T* rhs_values = nullptr) {
  BandedSizes sizes;
  JAXSPARSE_RETURN_IF_ERROR(CheckBandedSystem(data, rhs, *out, offsets.size(), sizes));
  const int64_t ndiag = sizes.ndiag, n = sizes.n, k = sizes.k, batch = sizes.batch;
  const int64_t matrices = sizes.matrices;
  if (op < 0 || op > 2) return ffi::Error::InvalidArgument("banded solve: op must be 0, 1 or 2");
  if (kept != nullptr && (op != 0 || matrices != batch)) {
    return ffi::Error::InvalidArgument("banded solve: factors are kept for A, one per b");
  }
  // op(A)'s diagonal d: op(A)(r, r + shift[d]) at data[d, r + index_shift[d]].
  const bool transposed = op != 0;
  std::vector<int64_t> shift(ndiag), index_shift(ndiag);
  for (int64_t d = 0; d < ndiag; ++d) {
    shift[d] = transposed ? -offsets[d] : offsets[d];
    index_shift[d] = transposed ? 0 : offsets[d];
  }
  int64_t kl, ku;
  banded::Bandwidths(shift.data(), shift.size(), n, kl, ku);
  const int64_t kv = kl + ku, lower_stride = std::max(kl, ku) + 1;
  if (kept != nullptr) {
    const FactorBuffers buffers{*kept->u, *kept->lower, *kept->pivots, *kept->status};
    JAXSPARSE_RETURN_IF_ERROR(
        CheckFactorBuffers(buffers, data.element_type(), n, kl, ku, matrices));
  }
  const T* values = Data<T>(data);
  const T* b = rhs_values != nullptr ? rhs_values : Data<T>(rhs);
  T* x = Data<T>(out);
  auto matrix = [&](int64_t member) {
    const int64_t f = matrices == 1 ? 0 : member;
    return banded::Diagonals<T>{values + f * ndiag * n, n,      ndiag, shift.data(),
                                index_shift.data(),     op == 2};
  };
  // Member m's factors to keep (none without `kept`), its u (kept, or `scratch`) and status.
  auto factors = [&](int64_t m) {
    if (kept == nullptr) return banded::Kept<T>{};
    return banded::Kept<T>{Data<T>(kept->lower) + m * n * lower_stride, lower_stride,
                           Data<int32_t>(kept->pivots) + m * n};
  };
  auto upper = [&](int64_t m, T* scratch) {
    return kept == nullptr ? scratch : Data<T>(kept->u) + m * n * kv;
  };
  auto record = [&](int64_t m, banded::Status status) {
    if (kept != nullptr) Data<int32_t>(kept->status)[m] = status;
  };
  const bool split =
      batch == 1 && pool.num_threads() >= 2 && n >= kMinSplitRows && n >= 8 * (kv + 1);
  if (split) {
    std::unique_ptr<T[]> scratch(kept == nullptr ? new T[std::max<int64_t>(1, n * kv)] : nullptr);
    auto parallel = [&](int64_t parts, const auto& fn) { ParallelFor(pool, parts, fn); };
    const banded::Diagonals<T> a = matrix(0);
    T* u = upper(0, scratch.get());
    if (banded::SolveSplit(a, kl, ku, b, x, k, u, parallel, factors(0))) {
      record(0, banded::kSplit);
    } else {
      record(0, banded::SolveWhole(a, kl, ku, b, x, k, u, factors(0)));
    }
    return ffi::Error::Success();
  }
  const int64_t parts = NumParts(pool, batch * n * k * (kv + 1) * (kl + 1), batch);
  ParallelFor(pool, parts, [&](int64_t part) {
    std::unique_ptr<T[]> scratch(kept == nullptr ? new T[std::max<int64_t>(1, n * kv)] : nullptr);
    for (int64_t m = PieceStart(batch, parts, part); m < PieceStart(batch, parts, part + 1); ++m) {
      record(m, banded::SolveWhole(matrix(m), kl, ku, b + m * n * k, x + m * n * k, k,
                                   upper(m, scratch.get()), factors(m)));
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

// The same for A, keeping A's factors for the tangent and adjoint solves (banded_factored.cc).
ffi::Error BandedSolveKeepingImpl(ffi::ThreadPool pool, ffi::AnyBuffer data, ffi::AnyBuffer rhs,
                                  ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> u,
                                  ffi::Result<ffi::AnyBuffer> lower,
                                  ffi::Result<ffi::AnyBuffer> pivots,
                                  ffi::Result<ffi::AnyBuffer> status,
                                  ffi::Span<const int64_t> offsets) {
  AdviseHugePages(out);
  AdviseHugePages(u);
  AdviseHugePages(lower);
  const KeptBuffers kept{u, lower, pivots, status};
  return WithValueType(data.element_type(), "DIA values", [&](auto value) {
    return Solve<decltype(value)>(pool, data, rhs, offsets, 0, out, &kept);
  });
}

// The adjoint of x = A^{-1} b from the values, for solves that kept no factors: lambda =
// A^{-T} g in one pass, then the values' cotangent.
ffi::Error BandedAdjointImpl(ffi::ThreadPool pool, ffi::AnyBuffer data, ffi::AnyBuffer x,
                             ffi::AnyBuffer g, ffi::Result<ffi::AnyBuffer> lambda,
                             ffi::Result<ffi::AnyBuffer> dvalues,
                             ffi::Span<const int64_t> offsets) {
  return AdjointThenValuesCotangent(
      pool, data.element_type(), x, lambda, dvalues, offsets,
      [&](auto value) { return Solve<decltype(value)>(pool, data, g, offsets, 1, lambda); });
}

// Each matrix's bands (offsets within [-1, 1]; those wholly outside the matrix are dropped)
// of DIA data (..., ndiag, n) with `matrices` members; an absent band reads `zeros`.
template <typename T>
ffi::Error TridiagonalBands(const ffi::AnyBuffer& data, ffi::Span<const int64_t> offsets, int64_t n,
                            int64_t matrices, std::vector<T>& zeros,
                            std::vector<tridiagonal::Bands<T>>& bands) {
  std::array<int64_t, 3> band_of{-1, -1, -1};  // offset + 1 -> its diagonal
  for (size_t d = 0; d < offsets.size(); ++d) {
    if (offsets[d] <= -n || offsets[d] >= n) continue;
    if (offsets[d] < -1 || offsets[d] > 1) {
      return ffi::Error::InvalidArgument("tridiagonal solve: offsets must lie in [-1, 1]");
    }
    if (band_of[offsets[d] + 1] >= 0) {
      return ffi::Error::InvalidArgument("tridiagonal solve: repeated offsets");
    }
    band_of[offsets[d] + 1] = static_cast<int64_t>(d);
  }
  if (*std::min_element(band_of.begin(), band_of.end()) < 0) zeros.assign(n, T(0));
  const int64_t ndiag = static_cast<int64_t>(offsets.size());
  bands.resize(matrices);
  for (int64_t m = 0; m < matrices; ++m) {
    const T* values = Data<T>(data) + m * ndiag * n;
    auto band = [&](int64_t offset) {
      const int64_t d = band_of[offset + 1];
      return d < 0 ? zeros.data() : values + d * n;
    };
    bands[m] = tridiagonal::Bands<T>{band(-1), band(0), band(1), n};
  }
  return ffi::Error::Success();
}

// The inverse pivots (the values' dtype, (..., n)) and status (int32, (...)) of tridiagonal
// matrices of n rows: one per member of a batch of `batch`, or (`may_share`) one for all.
inline ffi::Error CheckInversePivots(const ffi::AnyBuffer& inverse, const ffi::AnyBuffer& status,
                                     ffi::DataType type, int64_t n, int64_t batch, bool may_share) {
  if (inverse.element_type() != type || status.element_type() != ffi::DataType::S32) {
    return ffi::Error::InvalidArgument(
        "tridiagonal solve: the inverse pivots must be the values' dtype, the status int32");
  }
  const int64_t members = inverse.dimensions().size() < 1 ? -1 : LeadingSize(inverse, 1);
  if (members < 0 || Trailing(inverse, 1) != n || LeadingSize(status, 0) != members ||
      (members != batch && !(may_share && members == 1))) {
    return ffi::Error::InvalidArgument(
        "tridiagonal solve: the inverse pivots must be (..., n) and the status (...), one per "
        "member of b's batch or one for all");
  }
  return ffi::Error::Success();
}

// Statuses of the tridiagonal keeping pass: the inverse pivots are kept, or (at a matrix
// neither row nor column dominant, or singular) the pass solved with pivoting and the
// derivatives' solves factor from the values.
constexpr int32_t kPivotsKept = 1, kFromValues = 0;

// A x = b for tridiagonal A, keeping the inverse pivots where every matrix of the batch
// allows (banded_tridiagonal.h); otherwise the one-pass solve with pivoting for all.
template <typename T>
ffi::Error SolveTridiagonalKeeping(ffi::ThreadPool& pool, const ffi::AnyBuffer& data,
                                   const ffi::AnyBuffer& rhs, ffi::Span<const int64_t> offsets,
                                   ffi::Result<ffi::AnyBuffer>& out,
                                   ffi::Result<ffi::AnyBuffer>& inverse,
                                   ffi::Result<ffi::AnyBuffer>& status) {
  BandedSizes sizes;
  JAXSPARSE_RETURN_IF_ERROR(CheckBandedSystem(data, rhs, *out, offsets.size(), sizes));
  const int64_t n = sizes.n, k = sizes.k, batch = sizes.batch;
  if (sizes.matrices != batch) {
    return ffi::Error::InvalidArgument("tridiagonal solve: pivots are kept for A, one per b");
  }
  JAXSPARSE_RETURN_IF_ERROR(
      CheckInversePivots(*inverse, *status, data.element_type(), n, batch, false));
  std::vector<T> zeros;
  std::vector<tridiagonal::Bands<T>> bands;
  JAXSPARSE_RETURN_IF_ERROR(TridiagonalBands(data, offsets, n, batch, zeros, bands));
  std::atomic<bool> kept{true};
  const int64_t parts = NumParts(pool, batch * n * (k + 2), batch);
  ParallelFor(pool, parts, [&](int64_t part) {
    for (int64_t m = PieceStart(batch, parts, part); m < PieceStart(batch, parts, part + 1); ++m) {
      tridiagonal::WithColumns(k, [&](auto columns) {
        if (!tridiagonal::SolveKeeping(bands[m], columns, Data<T>(rhs) + m * n * k,
                                       Data<T>(out) + m * n * k, Data<T>(inverse) + m * n)) {
          kept = false;
        }
      });
    }
  });
  std::fill_n(Data<int32_t>(status), batch, kept ? kPivotsKept : kFromValues);
  return kept ? ffi::Error::Success() : Solve<T>(pool, data, rhs, offsets, 0, out);
}

// op(A) x = b (op 0: A, 1: A^T) from the inverse pivots that SolveTridiagonalKeeping kept,
// or from the values (the one-pass solve) where it kept none.
template <typename T>
ffi::Error SolveTridiagonalKept(ffi::ThreadPool& pool, const ffi::AnyBuffer& data,
                                const ffi::AnyBuffer& inverse, const ffi::AnyBuffer& status,
                                const ffi::AnyBuffer& rhs, ffi::Span<const int64_t> offsets,
                                int64_t op, ffi::Result<ffi::AnyBuffer>& out) {
  if (op != 0 && op != 1) {
    return ffi::Error::InvalidArgument("tridiagonal solve: op must be 0 (A) or 1 (A^T)");
  }
  BandedSizes sizes;
  JAXSPARSE_RETURN_IF_ERROR(CheckBandedSystem(data, rhs, *out, offsets.size(), sizes));
  const int64_t n = sizes.n, k = sizes.k, batch = sizes.batch, matrices = sizes.matrices;
  JAXSPARSE_RETURN_IF_ERROR(
      CheckInversePivots(inverse, status, data.element_type(), n, batch, true));
  const int64_t kept = LeadingSize(status, 0);
  const int32_t* statuses = Data<int32_t>(status);
  if (std::any_of(statuses, statuses + kept, [](int32_t s) { return s != kPivotsKept; })) {
    // The one-pass solve may read b again after writing x (a split that fails and starts
    // over): b that x overwrites (the adjoint's g, aliased to lambda) goes in a copy.
    if (Data<T>(rhs) != Data<T>(out)) return Solve<T>(pool, data, rhs, offsets, op, out);
    const std::vector<T> copy(Data<T>(rhs), Data<T>(rhs) + batch * n * k);
    return Solve<T>(pool, data, rhs, offsets, op, out, nullptr, copy.data());
  }
  std::vector<T> zeros;
  std::vector<tridiagonal::Bands<T>> bands;
  JAXSPARSE_RETURN_IF_ERROR(TridiagonalBands(data, offsets, n, matrices, zeros, bands));
  const int64_t parts = NumParts(pool, batch * n * (k + 2), batch);
  ParallelFor(pool, parts, [&](int64_t part) {
    for (int64_t m = PieceStart(batch, parts, part); m < PieceStart(batch, parts, part + 1); ++m) {
      const T* pivots = Data<T>(inverse) + (kept == 1 ? 0 : m) * n;
      tridiagonal::WithColumns(k, [&](auto columns) {
        tridiagonal::SolveKept(bands[matrices == 1 ? 0 : m], pivots, columns,
                               Data<T>(rhs) + m * n * k, Data<T>(out) + m * n * k, op == 1);
      });
    }
  });
  return ffi::Error::Success();
}

ffi::Error TridiagonalSolveKeepingImpl(ffi::ThreadPool pool, ffi::AnyBuffer data,
                                       ffi::AnyBuffer rhs, ffi::Result<ffi::AnyBuffer> out,
                                       ffi::Result<ffi::AnyBuffer> inverse,
                                       ffi::Result<ffi::AnyBuffer> status,
                                       ffi::Span<const int64_t> offsets) {
  AdviseHugePages(out);
  AdviseHugePages(inverse);
  return WithValueType(data.element_type(), "DIA values", [&](auto value) {
    return SolveTridiagonalKeeping<decltype(value)>(pool, data, rhs, offsets, out, inverse, status);
  });
}

ffi::Error TridiagonalKeptSolveImpl(ffi::ThreadPool pool, ffi::AnyBuffer data,
                                    ffi::AnyBuffer inverse, ffi::AnyBuffer status,
                                    ffi::AnyBuffer rhs, ffi::Result<ffi::AnyBuffer> out,
                                    ffi::Span<const int64_t> offsets, int64_t op) {
  AdviseHugePages(out);
  return WithValueType(data.element_type(), "DIA values", [&](auto value) {
    return SolveTridiagonalKept<decltype(value)>(pool, data, inverse, status, rhs, offsets, op,
                                                 out);
  });
}

// The adjoint of x = A^{-1} b for tridiagonal A: lambda = A^{-T} g from the kept inverse
// pivots (or the values), then the values' cotangent. lambda may be g's buffer (the sweeps
// read each row of g before they write it).
ffi::Error TridiagonalKeptAdjointImpl(ffi::ThreadPool pool, ffi::AnyBuffer data,
                                      ffi::AnyBuffer inverse, ffi::AnyBuffer status,
                                      ffi::AnyBuffer x, ffi::AnyBuffer g,
                                      ffi::Result<ffi::AnyBuffer> lambda,
                                      ffi::Result<ffi::AnyBuffer> dvalues,
                                      ffi::Span<const int64_t> offsets) {
  return AdjointThenValuesCotangent(pool, data.element_type(), x, lambda, dvalues, offsets,
                                    [&](auto value) {
                                      return SolveTridiagonalKept<decltype(value)>(
                                          pool, data, inverse, status, g, offsets, 1, lambda);
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

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxsparseDiaBandedSolveKeeping, jaxsparse::BandedSolveKeepingImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::ThreadPool>()
                                  .Arg<xla::ffi::AnyBuffer>()  // DIA data (..., ndiag, n)
                                  .Arg<xla::ffi::AnyBuffer>()  // b (..., n, k)
                                  .Ret<xla::ffi::AnyBuffer>()  // x (..., n, k)
                                  .Ret<xla::ffi::AnyBuffer>()  // u (..., n, kl + ku)
                                  .Ret<xla::ffi::AnyBuffer>()  // lower (..., n, max + 1)
                                  .Ret<xla::ffi::AnyBuffer>()  // pivots (..., n) int32
                                  .Ret<xla::ffi::AnyBuffer>()  // status (...) int32
                                  .Attr<xla::ffi::Span<const int64_t>>("offsets"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxsparseDiaBandedAdjoint, jaxsparse::BandedAdjointImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::ThreadPool>()
                                  .Arg<xla::ffi::AnyBuffer>()  // DIA data (..., ndiag, n)
                                  .Arg<xla::ffi::AnyBuffer>()  // x (..., n, k)
                                  .Arg<xla::ffi::AnyBuffer>()  // g (..., n, k)
                                  .Ret<xla::ffi::AnyBuffer>()  // lambda = A^{-T} g
                                  .Ret<xla::ffi::AnyBuffer>()  // dA (..., ndiag, n)
                                  .Attr<xla::ffi::Span<const int64_t>>("offsets"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxsparseDiaTridiagonalSolveKeeping,
                              jaxsparse::TridiagonalSolveKeepingImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::ThreadPool>()
                                  .Arg<xla::ffi::AnyBuffer>()  // DIA data (..., ndiag, n)
                                  .Arg<xla::ffi::AnyBuffer>()  // b (..., n, k)
                                  .Ret<xla::ffi::AnyBuffer>()  // x (..., n, k)
                                  .Ret<xla::ffi::AnyBuffer>()  // inverse pivots (..., n)
                                  .Ret<xla::ffi::AnyBuffer>()  // status (...) int32
                                  .Attr<xla::ffi::Span<const int64_t>>("offsets"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxsparseDiaTridiagonalKeptSolve, jaxsparse::TridiagonalKeptSolveImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::ThreadPool>()
                                  .Arg<xla::ffi::AnyBuffer>()  // DIA data (..., ndiag, n)
                                  .Arg<xla::ffi::AnyBuffer>()  // inverse pivots (..., n)
                                  .Arg<xla::ffi::AnyBuffer>()  // status (...) int32
                                  .Arg<xla::ffi::AnyBuffer>()  // b (..., n, k)
                                  .Ret<xla::ffi::AnyBuffer>()  // x (..., n, k)
                                  .Attr<xla::ffi::Span<const int64_t>>("offsets")
                                  .Attr<int64_t>("op"));  // 0: A, 1: A^T

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxsparseDiaTridiagonalKeptAdjoint,
                              jaxsparse::TridiagonalKeptAdjointImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::ThreadPool>()
                                  .Arg<xla::ffi::AnyBuffer>()  // DIA data (..., ndiag, n)
                                  .Arg<xla::ffi::AnyBuffer>()  // inverse pivots (..., n)
                                  .Arg<xla::ffi::AnyBuffer>()  // status (...) int32
                                  .Arg<xla::ffi::AnyBuffer>()  // x (..., n, k)
                                  .Arg<xla::ffi::AnyBuffer>()  // g (..., n, k)
                                  .Ret<xla::ffi::AnyBuffer>()  // lambda = A^{-T} g
                                  .Ret<xla::ffi::AnyBuffer>()  // dA (..., ndiag, n)
                                  .Attr<xla::ffi::Span<const int64_t>>("offsets"));
