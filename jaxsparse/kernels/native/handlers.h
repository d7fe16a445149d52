// The XLA FFI handlers of the native CPU kernels, registered by module.cc.

#ifndef JAXSPARSE_NATIVE_HANDLERS_H_
#define JAXSPARSE_NATIVE_HANDLERS_H_

#include <cstdint>

#include "xla/ffi/api/c_api.h"

extern "C" {

// (data, x, indices, indptr) -> A @ x
XLA_FFI_Error* JaxsparseCsrMatmul(XLA_FFI_CallFrame* call_frame);
// (data, g, indices, indptr) -> A^T @ g
XLA_FFI_Error* JaxsparseCsrMatmulT(XLA_FFI_CallFrame* call_frame);
// (g, x, indices, indptr) -> out[p] = g[row(p)] . x[indices[p]]
XLA_FFI_Error* JaxsparseCsrSddmm(XLA_FFI_CallFrame* call_frame);
// (g, data, x, indices, indptr) -> (sddmm(g, x), A^T @ g): the gradient step of A @ x
XLA_FFI_Error* JaxsparseCsrMatmulPullback(XLA_FFI_CallFrame* call_frame);
// (indices, indptr) -> (order, indices_t, indptr_t): the structure of A^T, a stable sort
XLA_FFI_Error* JaxsparseCsrTranspose(XLA_FFI_CallFrame* call_frame);
// (a_indices, a_indptr, b_indices, b_indptr; num_cols) -> (slots, indices, indptr): the
// structure of A + B, rows merged
XLA_FFI_Error* JaxsparseCsrUnion(XLA_FFI_CallFrame* call_frame);
// (rows, cols; num_cols) -> (slots, indices, indptr): the structure of a list of positions,
// repeats merged
XLA_FFI_Error* JaxsparseCsrPositions(XLA_FFI_CallFrame* call_frame);
// (a_indices, a_indptr, b_indices, b_indptr; num_cols) -> (indptr, pair_indptr): the row
// pointers of A @ B and of its pairs of entries A[i, j] B[j, c]
XLA_FFI_Error* JaxsparseCsrProductCounts(XLA_FFI_CallFrame* call_frame);
// (a_indices, a_indptr, b_indices, b_indptr, indptr, pair_indptr; num_cols) -> (indices,
// left, right, slots): the columns of A @ B and each pair's entries and slot
XLA_FFI_Error* JaxsparseCsrProductFill(XLA_FFI_CallFrame* call_frame);
// (data, x; offsets) -> A @ x
XLA_FFI_Error* JaxsparseDiaMatmul(XLA_FFI_CallFrame* call_frame);
// (data, g; offsets) -> A^T @ g
XLA_FFI_Error* JaxsparseDiaMatmulT(XLA_FFI_CallFrame* call_frame);
// (g, x; offsets) -> out[d, j] = g[j - offsets[d]] . x[j] inside the matrix, else 0
XLA_FFI_Error* JaxsparseDiaSddmm(XLA_FFI_CallFrame* call_frame);
// (data; offsets) -> (band, pivots, info): the banded LU of a square DIA matrix
XLA_FFI_Error* JaxsparseDiaBandedLu(XLA_FFI_CallFrame* call_frame);
// (band, pivots, b; kl, ku, op) -> x with A x = b, A^T x = b or A^H x = b
XLA_FFI_Error* JaxsparseBandedLuSolve(XLA_FFI_CallFrame* call_frame);
// (data, b; offsets, op) -> x with A x = b, A^T x = b or A^H x = b, in one pass
XLA_FFI_Error* JaxsparseDiaBandedSolve(XLA_FFI_CallFrame* call_frame);
// (data, x, g; offsets) -> (lambda = A^{-T} g, dA = -lambda[row] * x[col] on the slots):
// the adjoint of the one-pass solve x = A^{-1} b from the values
XLA_FFI_Error* JaxsparseDiaBandedAdjoint(XLA_FFI_CallFrame* call_frame);
// (data, b; offsets) -> (x, u, lower, pivots, status): A x = b in one pass, A's factors kept
XLA_FFI_Error* JaxsparseDiaBandedSolveKeeping(XLA_FFI_CallFrame* call_frame);
// (u, lower, pivots, status, b; offsets, op) -> x with A x = b or A^T x = b from kept factors
XLA_FFI_Error* JaxsparseDiaBandedFactoredSolve(XLA_FFI_CallFrame* call_frame);
// (u, lower, pivots, status, x, g; offsets) -> (lambda = A^{-T} g, dA = -lambda[row] *
// x[col] on the slots): the adjoint of x = A^{-1} b from kept factors
XLA_FFI_Error* JaxsparseDiaBandedFactoredAdjoint(XLA_FFI_CallFrame* call_frame);
// (data, b; offsets) -> (x, inverse pivots, status): a tridiagonal solve keeping the inverse
// pivots of an elimination without interchanges where A is diagonally dominant
XLA_FFI_Error* JaxsparseDiaTridiagonalSolveKeeping(XLA_FFI_CallFrame* call_frame);
// (data, inverse pivots, status, b; offsets, op) -> x with them
XLA_FFI_Error* JaxsparseDiaTridiagonalKeptSolve(XLA_FFI_CallFrame* call_frame);
// (data, inverse pivots, status, x, g; offsets) -> (lambda, dA) with them
XLA_FFI_Error* JaxsparseDiaTridiagonalKeptAdjoint(XLA_FFI_CallFrame* call_frame);
// (values, cols, indptr, diagonal) -> the ILU(0) factors on the CSR pattern
XLA_FFI_Error* JaxsparseIlu0Factor(XLA_FFI_CallFrame* call_frame);
// (factors, cols, indptr, diagonal, r; transpose) -> U^{-1} L^{-1} r or its transpose
XLA_FFI_Error* JaxsparseIlu0Apply(XLA_FFI_CallFrame* call_frame);

}  // extern "C"

namespace jaxsparse {

// JaxsparseCsrTranspose's indptr_t, throughout, for an invalid structure (as
// `_csr_layout.INVALID_TRANSPOSE_INDPTR`): the products' index pointer checks refuse it.
constexpr int64_t kInvalidTransposeIndptr = -1;

}  // namespace jaxsparse

#endif  // JAXSPARSE_NATIVE_HANDLERS_H_
