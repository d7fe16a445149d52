// CSR kernels for CPU: the product A @ X, the transposed product A^T @ G and the sampled
// product (the gradient in the values), for float32/float64/complex64/complex128 values
// with int32 or int64 indices.
//
// Row i holds the entries p in [indptr[i], indptr[i + 1]). Work is split by stored
// entries, not rows (parallel.h), so a power-law row is shared by several threads: a row
// cut by a piece boundary gets each later piece's partial sum added in piece order after
// all pieces finish. Every kernel checks the structure it reads: the index pointer before
// use, each column index as it is read; a bad structure is an InvalidArgument error, and
// an out-of-range column is never read.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "dispatch.h"
#include "handlers.h"
#include "parallel.h"

namespace jaxsparse {
namespace {

// Checks indptr[0] == 0, indptr[m] == nnz and that indptr never decreases (in pieces over
// the pool: it is a pass over m + 1 values before the kernel may trust any of them).
template <typename I>
ffi::Error CheckIndptr(ffi::ThreadPool& pool, const I* indptr, int64_t m, int64_t nnz) {
  if (indptr[0] != 0) {
    return ffi::Error::InvalidArgument("CSR index pointer should start with 0, got indptr[0] = " +
                                       std::to_string(indptr[0]));
  }
  const int64_t parts = NumParts(pool, m);
  std::vector<int64_t> first_decrease(parts, m);
  ParallelFor(pool, parts, [&](int64_t part) {
    const int64_t end = PieceStart(m, parts, part + 1);
    for (int64_t row = PieceStart(m, parts, part); row < end; ++row) {
      if (indptr[row + 1] < indptr[row]) {
        first_decrease[part] = row;
        return;
      }
    }
  });
  const int64_t row = *std::min_element(first_decrease.begin(), first_decrease.end());
  if (row < m) {
    return ffi::Error::InvalidArgument(
        "CSR indptr must be a non-decreasing sequence: indptr[" + std::to_string(row + 1) +
        "] = " + std::to_string(indptr[row + 1]) + " < indptr[" + std::to_string(row) +
        "] = " + std::to_string(indptr[row]));
  }
  if (indptr[m] != nnz) {
    return ffi::Error::InvalidArgument("last value of CSR index pointer should be nnz = " +
                                       std::to_string(nnz) + ", got " +
                                       std::to_string(indptr[m]));
  }
  return ffi::Error::Success();
}

ffi::Error ColumnError(int64_t n) {
  return ffi::Error::InvalidArgument("CSR column index out of range: indices must lie in [0, " +
                                     std::to_string(n) + ")");
}

// The row holding entry p (the last row starting at or before p).
template <typename I>
int64_t RowOf(const I* indptr, int64_t m, int64_t p) {
  return std::upper_bound(indptr, indptr + m + 1, static_cast<I>(p)) - indptr - 1;
}

// The first row starting at or after entry p (m if none).
template <typename I>
int64_t FirstRowFrom(const I* indptr, int64_t m, int64_t p) {
  return std::lower_bound(indptr, indptr + m, static_cast<I>(p)) - indptr;
}

// Column `indices[p]`, and whether it is outside [0, n). An outside column reads column
// 0 instead (without a branch in the inner loop); the caller reports the error.
template <typename I>
inline __attribute__((always_inline)) int64_t CheckedColumn(const I* indices, int64_t p,
                                                             int64_t n, bool& bad) {
  const int64_t column = indices[p];
  const bool outside = static_cast<uint64_t>(column) >= static_cast<uint64_t>(n);
  bad |= outside;
  return outside ? 0 : column;
}

// out[0:k] = sum of values[p] * x[indices[p]] over p in [begin, end). Inlined: with a few
// entries per row, a call per row measured slower than the sums themselves.
template <typename T, typename I>
inline __attribute__((always_inline)) void RowSum(const T* values, const I* indices, const T* x,
                                                  int64_t n, int64_t k, int64_t begin, int64_t end,
                                                  T* out, bool& bad) {
  if (k == 1) {
    T sum = T(0);
    for (int64_t p = begin; p < end; ++p) sum += values[p] * x[CheckedColumn(indices, p, n, bad)];
    out[0] = sum;
    return;
  }
  std::fill(out, out + k, T(0));
  for (int64_t p = begin; p < end; ++p) {
    const T value = values[p];
    const T* row = x + CheckedColumn(indices, p, n, bad) * k;
    for (int64_t c = 0; c < k; ++c) out[c] += value * row[c];
  }
}

template <typename T, typename I>
ffi::Error Matmul(ffi::ThreadPool& pool, const ffi::AnyBuffer& data, const ffi::AnyBuffer& x,
                  const ffi::AnyBuffer& indices_buffer, const ffi::AnyBuffer& indptr_buffer,
                  ffi::Result<ffi::AnyBuffer>& out_buffer) {
  const int64_t n = x.dimensions()[0], k = x.dimensions()[1];
  const int64_t m = indptr_buffer.dimensions()[0] - 1, nnz = data.dimensions()[0];
  const I* indptr = Data<I>(indptr_buffer);
  if (ffi::Error error = CheckIndptr(pool, indptr, m, nnz); !error.success()) return error;
  const T* values = Data<T>(data);
  const I* indices = Data<I>(indices_buffer);
  const T* dense = Data<T>(x);
  T* out = Data<T>(out_buffer);
  if (k == 0 || m == 0) return ffi::Error::Success();

  const int64_t parts = NumParts(pool, (nnz + m) * k);
  // Piece t owns the rows starting in its entries; its leading entries belong to a row
  // an earlier piece started, and are summed into carry[t] (row carry_row[t]).
  std::vector<T> carry(parts * k, T(0));
  std::vector<int64_t> carry_row(parts, -1);
  std::atomic<bool> ok(true);
  ParallelFor(pool, parts, [&](int64_t part) {
    const int64_t begin = PieceStart(nnz, parts, part);
    const int64_t end = PieceStart(nnz, parts, part + 1);
    const int64_t first_row = part == 0 ? 0 : FirstRowFrom(indptr, m, begin);
    const int64_t last_row = part == parts - 1 ? m : FirstRowFrom(indptr, m, end);
    bool bad = false;
    const int64_t owned_start = first_row < m ? static_cast<int64_t>(indptr[first_row]) : nnz;
    if (first_row > 0 && begin < std::min(owned_start, end)) {
      carry_row[part] = first_row - 1;
      RowSum(values, indices, dense, n, k, begin, std::min(owned_start, end),
             carry.data() + part * k, bad);
    }
    if (k == 1) {  // the common SpMV, its row loop written out for the compiler
      for (int64_t row = first_row; row < last_row; ++row) {
        const int64_t row_end = std::min<int64_t>(indptr[row + 1], end);
        T sum = T(0);
        for (int64_t p = indptr[row]; p < row_end; ++p) {
          sum += values[p] * dense[CheckedColumn(indices, p, n, bad)];
        }
        out[row] = sum;
      }
    } else {
      for (int64_t row = first_row; row < last_row; ++row) {
        const int64_t row_end = std::min<int64_t>(indptr[row + 1], end);
        RowSum(values, indices, dense, n, k, indptr[row], row_end, out + row * k, bad);
      }
    }
    if (bad) ok = false;
  });
  for (int64_t part = 1; part < parts; ++part) {
    if (carry_row[part] < 0) continue;
    T* row = out + carry_row[part] * k;
    for (int64_t c = 0; c < k; ++c) row[c] += carry[part * k + c];
  }
  return ok ? ffi::Error::Success() : ColumnError(n);
}

template <typename T, typename I>
ffi::Error MatmulT(ffi::ThreadPool& pool, const ffi::AnyBuffer& data, const ffi::AnyBuffer& g,
                   const ffi::AnyBuffer& indices_buffer, const ffi::AnyBuffer& indptr_buffer,
                   ffi::Result<ffi::AnyBuffer>& out_buffer) {
  const int64_t m = g.dimensions()[0], k = g.dimensions()[1];
  const int64_t n = out_buffer->dimensions()[0], nnz = data.dimensions()[0];
  const I* indptr = Data<I>(indptr_buffer);
  if (ffi::Error error = CheckIndptr(pool, indptr, m, nnz); !error.success()) return error;
  const T* values = Data<T>(data);
  const I* indices = Data<I>(indices_buffer);
  const T* cotangent = Data<T>(g);
  T* out = Data<T>(out_buffer);
  std::fill(out, out + n * k, T(0));
  if (k == 0 || nnz == 0) return ffi::Error::Success();

  // Each piece scatters into its own (n, k) buffer (piece 0 into `out`), added in piece
  // order afterwards: deterministic, and no transposed structure to build. The number of
  // pieces is capped so the buffers stay within twice the entries.
  const int64_t max_parts = std::max<int64_t>(1, std::min<int64_t>(8, 1 + 2 * nnz / std::max<int64_t>(n, 1)));
  const int64_t parts = NumParts(pool, nnz * k, max_parts);
  std::vector<T> scratch((parts - 1) * n * k, T(0));
  std::atomic<bool> ok(true);
  ParallelFor(pool, parts, [&](int64_t part) {
    const int64_t begin = PieceStart(nnz, parts, part);
    const int64_t end = PieceStart(nnz, parts, part + 1);
    if (begin >= end) return;
    T* target = part == 0 ? out : scratch.data() + (part - 1) * n * k;
    bool bad = false;
    int64_t row = RowOf(indptr, m, begin);
    for (int64_t p = begin; p < end; ++p) {
      while (p >= indptr[row + 1]) ++row;
      const int64_t column = CheckedColumn(indices, p, n, bad);
      // An outside column adds nothing (value 0) where its read was redirected.
      const T value = static_cast<uint64_t>(indices[p]) < static_cast<uint64_t>(n) ? values[p] : T(0);
      const T* source = cotangent + row * k;
      T* destination = target + column * k;
      for (int64_t c = 0; c < k; ++c) destination[c] += value * source[c];
    }
    if (bad) ok = false;
  });
  if (parts > 1) {
    const int64_t reduce_parts = NumParts(pool, n * k * (parts - 1));
    ParallelFor(pool, reduce_parts, [&](int64_t piece) {
      const int64_t begin = PieceStart(n * k, reduce_parts, piece);
      const int64_t end = PieceStart(n * k, reduce_parts, piece + 1);
      for (int64_t part = 1; part < parts; ++part) {
        const T* partial = scratch.data() + (part - 1) * n * k;
        for (int64_t e = begin; e < end; ++e) out[e] += partial[e];
      }
    });
  }
  return ok ? ffi::Error::Success() : ColumnError(n);
}

template <typename T, typename I>
ffi::Error Sddmm(ffi::ThreadPool& pool, const ffi::AnyBuffer& g, const ffi::AnyBuffer& x,
                 const ffi::AnyBuffer& indices_buffer, const ffi::AnyBuffer& indptr_buffer,
                 ffi::Result<ffi::AnyBuffer>& out_buffer) {
  const int64_t m = g.dimensions()[0], k = g.dimensions()[1];
  const int64_t n = x.dimensions()[0], nnz = indices_buffer.dimensions()[0];
  const I* indptr = Data<I>(indptr_buffer);
  if (ffi::Error error = CheckIndptr(pool, indptr, m, nnz); !error.success()) return error;
  const I* indices = Data<I>(indices_buffer);
  const T* cotangent = Data<T>(g);
  const T* dense = Data<T>(x);
  T* out = Data<T>(out_buffer);
  if (nnz == 0) return ffi::Error::Success();

  const int64_t parts = NumParts(pool, nnz * std::max<int64_t>(k, 1));
  std::atomic<bool> ok(true);
  ParallelFor(pool, parts, [&](int64_t part) {
    const int64_t begin = PieceStart(nnz, parts, part);
    const int64_t end = PieceStart(nnz, parts, part + 1);
    if (begin >= end) return;
    bool bad = false;
    int64_t row = RowOf(indptr, m, begin);
    for (int64_t p = begin; p < end; ++p) {
      while (p >= indptr[row + 1]) ++row;
      const T* left = cotangent + row * k;
      const T* right = dense + CheckedColumn(indices, p, n, bad) * k;
      T sum = T(0);
      for (int64_t c = 0; c < k; ++c) sum += left[c] * right[c];
      out[p] = sum;
    }
    if (bad) ok = false;
  });
  return ok ? ffi::Error::Success() : ColumnError(n);
}

ffi::Error CsrMatmulImpl(ffi::ThreadPool pool, ffi::AnyBuffer data, ffi::AnyBuffer x,
                         ffi::AnyBuffer indices, ffi::AnyBuffer indptr,
                         ffi::Result<ffi::AnyBuffer> out) {
  return WithValueType(data.element_type(), "CSR values", [&](auto value) {
    return WithIndexType(indices.element_type(), [&](auto index) {
      return Matmul<decltype(value), decltype(index)>(pool, data, x, indices, indptr, out);
    });
  });
}

ffi::Error CsrMatmulTImpl(ffi::ThreadPool pool, ffi::AnyBuffer data, ffi::AnyBuffer g,
                          ffi::AnyBuffer indices, ffi::AnyBuffer indptr,
                          ffi::Result<ffi::AnyBuffer> out) {
  return WithValueType(data.element_type(), "CSR values", [&](auto value) {
    return WithIndexType(indices.element_type(), [&](auto index) {
      return MatmulT<decltype(value), decltype(index)>(pool, data, g, indices, indptr, out);
    });
  });
}

ffi::Error CsrSddmmImpl(ffi::ThreadPool pool, ffi::AnyBuffer g, ffi::AnyBuffer x,
                        ffi::AnyBuffer indices, ffi::AnyBuffer indptr,
                        ffi::Result<ffi::AnyBuffer> out) {
  return WithValueType(g.element_type(), "CSR operands", [&](auto value) {
    return WithIndexType(indices.element_type(), [&](auto index) {
      return Sddmm<decltype(value), decltype(index)>(pool, g, x, indices, indptr, out);
    });
  });
}

}  // namespace
}  // namespace jaxsparse

#define JAXSPARSE_CSR_BINDING                  \
  xla::ffi::Ffi::Bind()                             \
      .Ctx<xla::ffi::ThreadPool>()                  \
      .Arg<xla::ffi::AnyBuffer>()                   \
      .Arg<xla::ffi::AnyBuffer>()                   \
      .Arg<xla::ffi::AnyBuffer>()                   \
      .Arg<xla::ffi::AnyBuffer>()                   \
      .Ret<xla::ffi::AnyBuffer>()

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxsparseCsrMatmul, jaxsparse::CsrMatmulImpl, JAXSPARSE_CSR_BINDING);
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxsparseCsrMatmulT, jaxsparse::CsrMatmulTImpl, JAXSPARSE_CSR_BINDING);
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxsparseCsrSddmm, jaxsparse::CsrSddmmImpl, JAXSPARSE_CSR_BINDING);
