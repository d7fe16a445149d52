"""Shift-invert for `eigsh`: the eigenvalues of `A` nearest `sigma` are the largest in
magnitude of `(A - sigma I)^{-1}`, whose products are solves with one factorization
(`js.linalg.factorized`)."""

import functools

import jax.numpy as jnp

from .._csr import CSRMatrix
from .._dia import DIAMatrix
from ._spsolve import factorized


@functools.singledispatch
def shifted(A, sigma) -> object:
    """`A - sigma I` with a structure fixed by `A`'s, so it is built under `jit` too: a
    DIA matrix gains a main diagonal if it has none; a CSR matrix one entry more at the
    end of each row (repeated columns add up)."""
    raise TypeError(f"`A` must be a DIAMatrix or CSRMatrix, got {type(A).__name__}.")


@shifted.register
def _shifted_dia(A: DIAMatrix, sigma) -> DIAMatrix:
    n = A.shape[0]
    shift = jnp.asarray(sigma).astype(A.dtype)
    if 0 not in A.offsets:
        data = jnp.concatenate([A.data, jnp.zeros((1, n), A.dtype)])
        A = DIAMatrix(data, (*A.offsets, 0), A.shape)
    return A.with_data(A.data.at[A.offsets.index(0)].add(-shift))


@shifted.register
def _shifted_csr(A: CSRMatrix, sigma) -> CSRMatrix:
    n = A.shape[0]
    shift = jnp.asarray(sigma).astype(A.dtype)
    indptr = A.indptr
    rows = jnp.arange(n, dtype=indptr.dtype)
    stored = jnp.arange(A.indices.shape[0], dtype=indptr.dtype)
    row_of = jnp.searchsorted(indptr, stored, side="right").astype(indptr.dtype) - 1
    moved = stored + row_of
    ends = indptr[1:] + rows
    size = A.indices.shape[0] + n
    indices = jnp.zeros((size,), A.indices.dtype).at[moved].set(A.indices).at[ends].set(rows)
    data = jnp.zeros((size,), A.dtype).at[moved].set(A.data).at[ends].set(-shift)
    return CSRMatrix((data, indices, indptr + jnp.arange(n + 1, dtype=indptr.dtype)), shape=A.shape)


def inverse_operator(A, sigma):
    """`X -> (A - sigma I)^{-1} X` for `X` of shape `(n,)` or `(n, k)`."""
    factors = factorized(shifted(A, sigma))
    return factors.solve
