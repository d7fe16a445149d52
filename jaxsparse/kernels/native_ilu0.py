"""ILU(0) on CPU by jaxsparse's native kernels (`native/ilu0.cc`): the factorization in
place on a square CSR pattern, and the preconditioner's application `U^{-1} L^{-1} r` (or
its plain transpose) by forward and backward substitution.

The pattern is `cols` (nnz), `indptr` (n + 1) and `diagonal` (n), int32, each row's
columns strictly increasing; the factors share it (L strictly before the diagonal, with a
unit diagonal implied, U from it on). Under `jax.vmap` the calls run member by member.
"""

import jax
import numpy as np

from . import _native_library

_VALUE_DTYPES = tuple(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))


def native_available(dtype) -> bool:
    """Whether the native kernels are built and take `dtype`."""
    return _native_library.AVAILABLE and np.dtype(dtype) in _VALUE_DTYPES


def factor(values, cols, indptr, diagonal) -> jax.Array:
    """The ILU(0) factors `(nnz,)` of the matrix with `values` `(nnz,)` on the pattern."""
    call = jax.ffi.ffi_call(
        "jaxsparse_ilu0_factor",
        jax.ShapeDtypeStruct(values.shape, values.dtype),
        vmap_method="sequential",
    )
    return call(values, cols, indptr, diagonal)


def apply(factors, cols, indptr, diagonal, r, *, transpose: bool = False) -> jax.Array:
    """`U^{-1} L^{-1} r` (or `L^{-T} U^{-T} r` with `transpose`) for `r` of shape `(n, k)`
    in the factors' dtype; no derivative rule (see `ILU0Preconditioner`)."""
    call = jax.ffi.ffi_call(
        "jaxsparse_ilu0_apply",
        jax.ShapeDtypeStruct(r.shape, r.dtype),
        vmap_method="sequential",
    )
    return call(factors, cols, indptr, diagonal, r, transpose=np.int64(transpose))
