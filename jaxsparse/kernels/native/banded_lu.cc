// Banded LU with partial pivoting for CPU (LAPACK's gbtrf/gbtrs semantics), float32,
// float64, complex64 and complex128, built from a DIA matrix's diagonals.
//
// The factors use LAPACK's band layout in LAPACK's memory order, a row-major
// `(n, 2 * kl + ku + 1)` array whose row j is LAPACK's column j: band[j, kv + i - j] ==
// A[i, j] with kv = kl + ku, the first kl entries of a row room for the fill-in that row
// interchanges bring; after the factorization entries [0, kv] of row j hold U's column j
// and entries (kv, kv + kl] the multipliers of L, and pivots[j] is the row swapped with
// row j. A column of the band is then contiguous, which the factorization's updates and
// the solves' sweeps walk along. A zero pivot sets `info` to its 1-based column (LAPACK's rule),
// and a solve with such factors divides by zero: inf or nan, never an error.
//
// Batches: every leading axis before a buffer's last two (last one for pivots and info) is
// a batch axis; the batch is their product and the members are split over XLA's intra-op
// threads. A solve's factors may also be shared by every member of its right-hand sides
// (a batch of one). One member's columns of right-hand sides are split over the threads
// when there are many, since each column's sweeps are independent.

#include <algorithm>
#include <complex>
#include <cstdint>
#include <string>

#include "arrays.h"
#include "banded_solve.h"
#include "dispatch.h"
#include "handlers.h"
#include "pages.h"
#include "parallel.h"

namespace jaxsparse {
namespace {

using banded::Conj;
using banded::Magnitude;
using banded::Op;

// One matrix's band: row-major (n, rows), band(j, kv + i - j) == A[i, j]. KL and KU are
// the bandwidths when known at compile time (narrow bands: loops of fixed length that the
// compiler unrolls), -1 when they are read from `kl` and `ku`.
template <typename T, int KL = -1, int KU = -1>
struct Band {
  T* values;
  int64_t n, runtime_kl, runtime_ku;
  int64_t kl() const { return KL >= 0 ? KL : runtime_kl; }
  int64_t ku() const { return KU >= 0 ? KU : runtime_ku; }
  int64_t kv() const { return kl() + ku(); }
  int64_t rows() const { return 2 * kl() + ku() + 1; }
  T& at(int64_t i, int64_t j) const { return values[j * rows() + kv() + i - j]; }
};

// gbtf2: the unblocked LU of one band, in place; returns LAPACK's info.
template <typename T, int KL, int KU>
int32_t FactorBand(const Band<T, KL, KU>& a, int32_t* pivots) {
  const int64_t n = a.n;
  int32_t info = 0;
  int64_t last_column = 0;  // the rightmost column any row interchange has reached so far
  for (int64_t j = 0; j < n; ++j) {
    const int64_t below = std::min(a.kl(), n - 1 - j);
    int64_t pivot = 0;
    double largest = Magnitude(a.at(j, j));
    for (int64_t t = 1; t <= below; ++t) {
      const double magnitude = Magnitude(a.at(j + t, j));
      if (magnitude > largest) largest = magnitude, pivot = t;
    }
    pivots[j] = static_cast<int32_t>(j + pivot);
    if (a.at(j + pivot, j) == T(0)) {
      if (info == 0) info = static_cast<int32_t>(j + 1);
      continue;
    }
    last_column = std::max(last_column, std::min(j + a.ku() + pivot, n - 1));
    if (pivot != 0) {
      for (int64_t c = j; c <= last_column; ++c) std::swap(a.at(j, c), a.at(j + pivot, c));
    }
    if (below == 0) continue;
    const T inverse = T(1) / a.at(j, j);
    for (int64_t t = 1; t <= below; ++t) a.at(j + t, j) *= inverse;
    for (int64_t c = j + 1; c <= last_column; ++c) {
      const T u = a.at(j, c);
      for (int64_t t = 1; t <= below; ++t) a.at(j + t, c) -= a.at(j + t, j) * u;
    }
  }
  return info;
}

// gbtrs on columns [c0, c1) of one member's right-hand sides x (n, k), in place. W is the
// number of columns when it is known at compile time (1 or 2: loops the compiler unrolls),
// else 0.
template <int W, typename T, int KL, int KU>
void SolveBand(const Band<const T, KL, KU>& a, const int32_t* pivots, Op op, T* x, int64_t k,
               int64_t c0, int64_t c1) {
  const int64_t n = a.n, kv = a.kv();
  if constexpr (W > 0) c1 = c0 + W;
  auto row = [&](int64_t i) { return x + i * k; };
  auto entry = [&](int64_t i, int64_t j) {
    const T value = a.at(i, j);
    return op == Op::kAdjoint ? Conj(value) : value;
  };
  if (op == Op::kPlain) {
    for (int64_t j = 0; j + 1 < n; ++j) {  // L y = P b, interchanges as they were made
      const int64_t below = std::min(a.kl(), n - 1 - j);
      T* xj = row(j);
      if (pivots[j] != j) std::swap_ranges(xj + c0, xj + c1, row(pivots[j]) + c0);
      for (int64_t t = 1; t <= below; ++t) {
        const T l = a.at(j + t, j);
        T* xt = row(j + t);
        for (int64_t c = c0; c < c1; ++c) xt[c] -= l * xj[c];
      }
    }
    for (int64_t j = n - 1; j >= 0; --j) {  // U x = y, column by column from the right
      T* xj = row(j);
      const T inverse = T(1) / a.at(j, j);
      for (int64_t c = c0; c < c1; ++c) xj[c] *= inverse;
      for (int64_t i = std::max<int64_t>(0, j - kv); i < j; ++i) {
        const T u = a.at(i, j);
        T* xi = row(i);
        for (int64_t c = c0; c < c1; ++c) xi[c] -= u * xj[c];
      }
    }
    return;
  }
  for (int64_t j = 0; j < n; ++j) {  // U^T y = b, row by row from the top
    T* xj = row(j);
    for (int64_t i = std::max<int64_t>(0, j - kv); i < j; ++i) {
      const T u = entry(i, j);
      const T* xi = row(i);
      for (int64_t c = c0; c < c1; ++c) xj[c] -= u * xi[c];
    }
    const T inverse = T(1) / entry(j, j);
    for (int64_t c = c0; c < c1; ++c) xj[c] *= inverse;
  }
  for (int64_t j = n - 2; j >= 0; --j) {  // L^T P^T x = y, interchanges undone in reverse
    const int64_t below = std::min(a.kl(), n - 1 - j);
    T* xj = row(j);
    for (int64_t t = 1; t <= below; ++t) {
      const T l = entry(j + t, j);
      const T* xt = row(j + t);
      for (int64_t c = c0; c < c1; ++c) xj[c] -= l * xt[c];
    }
    if (pivots[j] != j) std::swap_ranges(xj + c0, xj + c1, row(pivots[j]) + c0);
  }
}

// gbtrs on columns [c0, c1). A wide band (bandwidths known at run time) solves a few
// columns in pairs, each pair's sweeps reading the band once with the columns' loops
// unrolled; a narrow band, or many columns, all at once.
template <typename T, int KL, int KU>
void SolveColumns(const Band<const T, KL, KU>& a, const int32_t* pivots, Op op, T* x, int64_t k,
                  int64_t c0, int64_t c1) {
  if (c1 - c0 == 1) return SolveBand<1>(a, pivots, op, x, k, c0, c1);
  if constexpr (KL < 0) {
    if (c1 - c0 < 8) {
      int64_t c = c0;
      for (; c + 2 <= c1; c += 2) SolveBand<2>(a, pivots, op, x, k, c, c + 2);
      if (c < c1) SolveBand<1>(a, pivots, op, x, k, c, c + 1);
      return;
    }
  }
  SolveBand<0>(a, pivots, op, x, k, c0, c1);
}

// Calls fn(Band<T, KL, KU>) with the bandwidths as compile-time constants for the narrow
// bands of tridiagonal and pentadiagonal systems and their one-sided kin, else at run time.
template <typename T, typename F>
void WithBand(T* values, int64_t n, int64_t kl, int64_t ku, const F& fn) {
  if (kl == 1 && ku == 1) return fn(Band<T, 1, 1>{values, n, kl, ku});
  if (kl == 2 && ku == 2) return fn(Band<T, 2, 2>{values, n, kl, ku});
  if (kl == 1 && ku == 0) return fn(Band<T, 1, 0>{values, n, kl, ku});
  if (kl == 0 && ku == 1) return fn(Band<T, 0, 1>{values, n, kl, ku});
  fn(Band<T>{values, n, kl, ku});
}

template <typename T>
ffi::Error Factor(ffi::ThreadPool& pool, const ffi::AnyBuffer& data,
                  ffi::Span<const int64_t> offsets, ffi::Result<ffi::AnyBuffer>& band,
                  ffi::Result<ffi::AnyBuffer>& pivots, ffi::Result<ffi::AnyBuffer>& info) {
  const auto dims = data.dimensions();
  const auto band_dims = band->dimensions();
  if (dims.size() < 2 || band_dims.size() != dims.size()) {
    return ffi::Error::InvalidArgument("banded LU: DIA data must be (..., ndiag, n)");
  }
  const int64_t ndiag = dims[dims.size() - 2], n = dims.back();
  if (static_cast<size_t>(ndiag) != offsets.size()) {
    return ffi::Error::InvalidArgument("banded LU: DIA data and offsets disagree");
  }
  int64_t kl, ku;
  banded::Bandwidths(offsets.begin(), offsets.size(), n, kl, ku);
  const int64_t rows = 2 * kl + ku + 1;
  if (band_dims[band_dims.size() - 2] != n || band_dims.back() != rows) {
    return ffi::Error::InvalidArgument("banded LU: the band must be (..., " + std::to_string(n) +
                                       ", " + std::to_string(rows) + ")");
  }
  if (band->element_type() != data.element_type()) {
    return ffi::Error::InvalidArgument("banded LU: the band must have the values' dtype");
  }
  if (pivots->element_type() != ffi::DataType::S32 || info->element_type() != ffi::DataType::S32) {
    return ffi::Error::InvalidArgument("banded LU: pivots and info must be int32");
  }
  const int64_t batch = LeadingSize(data, 2);
  if (LeadingSize(*band, 2) != batch || LeadingSize(*pivots, 1) != batch ||
      Trailing(*pivots, 1) != n || LeadingSize(*info, 0) != batch) {
    return ffi::Error::InvalidArgument("banded LU: results disagree with the batch of DIA data");
  }
  const T* values = Data<T>(data);
  T* bands = Data<T>(band);
  int32_t* all_pivots = Data<int32_t>(pivots);
  int32_t* all_info = Data<int32_t>(info);
  const int64_t kv = kl + ku;
  const int64_t parts = NumParts(pool, batch * n * (kl + 1) * (kv + 1), batch);
  ParallelFor(pool, parts, [&](int64_t part) {
    for (int64_t b = PieceStart(batch, parts, part); b < PieceStart(batch, parts, part + 1); ++b) {
      T* band_values = bands + b * rows * n;
      std::fill(band_values, band_values + rows * n, T(0));
      const T* member = values + b * ndiag * n;
      for (int64_t d = 0; d < ndiag; ++d) {
        const int64_t offset = offsets[d];
        if (offset <= -n || offset >= n) continue;
        // data[d, j] == A[j - offset, j], inside the matrix for 0 <= j - offset < n.
        const int64_t lo = std::max<int64_t>(0, offset), hi = std::min(n, n + offset);
        for (int64_t j = lo; j < hi; ++j) band_values[j * rows + kv - offset] = member[d * n + j];
      }
      WithBand(band_values, n, kl, ku,
               [&](auto a) { all_info[b] = FactorBand(a, all_pivots + b * n); });
    }
  });
  return ffi::Error::Success();
}

template <typename T>
ffi::Error Solve(ffi::ThreadPool& pool, const ffi::AnyBuffer& band, const ffi::AnyBuffer& pivots,
                 const ffi::AnyBuffer& rhs, int64_t kl, int64_t ku, int64_t op,
                 ffi::Result<ffi::AnyBuffer>& out) {
  const auto band_dims = band.dimensions();
  const auto rhs_dims = rhs.dimensions();
  if (band_dims.size() < 2 || rhs_dims.size() < 2) {
    return ffi::Error::InvalidArgument("banded solve: band (..., rows, n) and b (..., n, k)");
  }
  const int64_t n = band_dims[band_dims.size() - 2], k = rhs_dims.back(), rows = 2 * kl + ku + 1;
  if (band_dims.back() != rows || rhs_dims[rhs_dims.size() - 2] != n) {
    return ffi::Error::InvalidArgument("banded solve: band and b disagree with kl, ku and n");
  }
  if (pivots.element_type() != ffi::DataType::S32 || Trailing(pivots, 1) != n) {
    return ffi::Error::InvalidArgument("banded solve: pivots must be int32 (..., n)");
  }
  if (rhs.element_type() != band.element_type() || out->element_type() != band.element_type()) {
    return ffi::Error::InvalidArgument("banded solve: band, b and x must share a dtype");
  }
  if (op < 0 || op > 2) return ffi::Error::InvalidArgument("banded solve: op must be 0, 1 or 2");
  const int64_t batch = LeadingSize(rhs, 2), factor_batch = LeadingSize(band, 2);
  if ((factor_batch != batch && factor_batch != 1) || LeadingSize(pivots, 1) != factor_batch ||
      LeadingSize(*out, 2) != batch) {
    return ffi::Error::InvalidArgument("banded solve: the factors' batch must be b's or 1");
  }
  const T* bands = Data<T>(band);
  const int32_t* all_pivots = reinterpret_cast<const int32_t*>(pivots.untyped_data());
  // The sweeps swap row j with row pivots[j]: factors that did not come from `Factor` (a
  // pytree edited by hand) must not move a row from outside the matrix or the band.
  for (const int32_t* member = all_pivots; member < all_pivots + factor_batch * n; member += n) {
    for (int64_t j = 0; j < n; ++j) {
      if (member[j] < j || member[j] > std::min(n - 1, j + kl)) {
        return ffi::Error::InvalidArgument("banded solve: pivots[j] must lie in [j, j + kl]");
      }
    }
  }
  T* x = Data<T>(out);
  std::copy(Data<T>(rhs), Data<T>(rhs) + batch * n * k, x);
  // Each thread takes whole members, or blocks of one member's columns when there are
  // fewer members than threads: a column's two sweeps touch nothing else. A block has at
  // least kMinBlockColumns columns: with fewer, a sweep is bound by reading the band, which
  // every block reads again.
  constexpr int64_t kMinBlockColumns = 8;
  const int64_t work = batch * n * k * (2 * kl + ku + 2);
  const int64_t column_blocks =
      batch >= pool.num_threads() ? 1 : std::clamp<int64_t>(k / kMinBlockColumns, 1, 8);
  const int64_t items = batch * column_blocks;
  const int64_t parts = NumParts(pool, work, items);
  ParallelFor(pool, parts, [&](int64_t part) {
    for (int64_t item = PieceStart(items, parts, part); item < PieceStart(items, parts, part + 1);
         ++item) {
      const int64_t b = item / column_blocks, block = item % column_blocks;
      const int64_t f = factor_batch == 1 ? 0 : b;
      const int64_t c0 = PieceStart(k, column_blocks, block);
      const int64_t c1 = PieceStart(k, column_blocks, block + 1);
      WithBand(bands + f * rows * n, n, kl, ku, [&](auto a) {
        SolveColumns(a, all_pivots + f * n, static_cast<Op>(op), x + b * n * k, k, c0, c1);
      });
    }
  });
  return ffi::Error::Success();
}

ffi::Error BandedLuImpl(ffi::ThreadPool pool, ffi::AnyBuffer data, ffi::Result<ffi::AnyBuffer> band,
                        ffi::Result<ffi::AnyBuffer> pivots, ffi::Result<ffi::AnyBuffer> info,
                        ffi::Span<const int64_t> offsets) {
  AdviseHugePages(band);
  return WithValueType(data.element_type(), "DIA values", [&](auto value) {
    return Factor<decltype(value)>(pool, data, offsets, band, pivots, info);
  });
}

ffi::Error BandedLuSolveImpl(ffi::ThreadPool pool, ffi::AnyBuffer band, ffi::AnyBuffer pivots,
                             ffi::AnyBuffer rhs, ffi::Result<ffi::AnyBuffer> out, int64_t kl,
                             int64_t ku, int64_t op) {
  AdviseHugePages(out);
  return WithValueType(band.element_type(), "banded factors", [&](auto value) {
    return Solve<decltype(value)>(pool, band, pivots, rhs, kl, ku, op, out);
  });
}

}  // namespace
}  // namespace jaxsparse

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxsparseDiaBandedLu, jaxsparse::BandedLuImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::ThreadPool>()
                                  .Arg<xla::ffi::AnyBuffer>()  // DIA data (..., ndiag, n)
                                  .Ret<xla::ffi::AnyBuffer>()  // band (..., n, 2kl+ku+1)
                                  .Ret<xla::ffi::AnyBuffer>()  // pivots (..., n), int32
                                  .Ret<xla::ffi::AnyBuffer>()  // info (...), int32
                                  .Attr<xla::ffi::Span<const int64_t>>("offsets"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxsparseBandedLuSolve, jaxsparse::BandedLuSolveImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::ThreadPool>()
                                  .Arg<xla::ffi::AnyBuffer>()  // band (..., n, 2kl+ku+1)
                                  .Arg<xla::ffi::AnyBuffer>()  // pivots (..., n), int32
                                  .Arg<xla::ffi::AnyBuffer>()  // b (..., n, k)
                                  .Ret<xla::ffi::AnyBuffer>()  // x (..., n, k)
                                  .Attr<int64_t>("kl")         // subdiagonals
                                  .Attr<int64_t>("ku")         // superdiagonals
                                  .Attr<int64_t>("op"));       // 0: A, 1: A^T, 2: A^H
