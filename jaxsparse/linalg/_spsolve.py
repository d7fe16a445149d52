"""`spsolve` and `factorized`: direct solves of square sparse systems, after
`scipy.sparse.linalg`, with derivatives (see `_factor.py`).

Each format registers how it factors (`factorize.register`): DIA as a band
(`_factor_banded.py`), CSR by SuperLU on the host (`_factor_superlu.py`); and how
`spsolve` solves it once (`solve_once.register`, the factorization where not registered):
DIA in one pass that keeps no factors.
"""

import functools

import jax.numpy as jnp
import numpy as np

from .._arrays import device_array
from .._batching import refuse_batch
from .._csr import CSRMatrix
from .._dia import DIAMatrix
from ._factor import Factorization, check_rhs, dense_rhs, run_compiled, solve_dtype
from ._factor_banded import factor_dia, solve_dia
from ._factor_superlu import factor_csr

_SOLVE_DTYPES = tuple(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))


@functools.singledispatch
def factorize(matrix) -> Factorization:
    """The format's factorization of a checked square matrix."""
    raise TypeError(f"`A` must be a DIAMatrix or CSRMatrix, got {type(matrix).__name__}.")


factorize.register(DIAMatrix, factor_dia)
factorize.register(CSRMatrix, factor_csr)
_UNSUPPORTED = factorize.dispatch(object)


@functools.singledispatch
def solve_once(matrix) -> Factorization:
    """What `spsolve` solves a checked square matrix with: its factorization, unless the
    format registers a one-shot solver."""
    return factorize(matrix)


solve_once.register(DIAMatrix, solve_dia)


def _check_matrix(A) -> None:
    if factorize.dispatch(type(A)) is _UNSUPPORTED:
        factorize(A)
    refuse_batch("A direct solve (`spsolve`, `factorized`)", A)
    m, n = A.shape
    if m != n:
        raise ValueError(f"`A` must be square, got shape {A.shape}.")
    if np.dtype(A.dtype) not in _SOLVE_DTYPES:
        raise TypeError(
            f"`A` must be float32, float64, complex64 or complex128 to be solved, got "
            f"{A.dtype}: convert it with `A.astype(...)`."
        )


def factorized(A) -> Factorization:
    """A factorization of the square sparse matrix `A`, reusable for many solves.

    As `scipy.sparse.linalg.factorized` (the result is callable: `factorized(A)(b)`) and
    `splu` (`.solve(b, trans)` with "N", "T" or "H"). Solves differentiate with respect to
    `b` and to `A`'s stored values, and a factorization made inside `jax.jit` is safe to
    make over and over:

    - `DIAMatrix`: `BandedLU`, LU with partial pivoting of the band (LAPACK's `gbtrf`),
      factors in a fixed-size `(n, 2 * kl + ku + 1)` array; native kernels on CPU, LAPACK
      on the host elsewhere (on GPUs a tridiagonal band's solves run on the device). A
      band at least as tall as the matrix is factored densely (`DenseLU`). Both keep the
      matrix they factored: a solve whose `matrix` was replaced afterwards gives `nan`.
    - `CSRMatrix`: `SuperLU`, scipy's SuperLU on the host (COLAMD ordering, partial
      pivoting); the factors stay in a bounded host cache named by a handle.

    **Arguments:**

    - `A`: a square `DIAMatrix` or `CSRMatrix`, float32, float64, complex64 or complex128.

    **Returns:** a `Factorization` (an Equinox module, a pytree) with `.solve(b, trans="N")`.
    """
    _check_matrix(A)
    return run_compiled(factorize, A)


def spsolve(A, b) -> jnp.ndarray:
    """The solution `x` of `A x = b` for a square sparse matrix `A`.

    As `scipy.sparse.linalg.spsolve`, inside or outside `jax.jit`, differentiable with
    respect to `b` and to `A`'s stored values in reverse and forward mode (an adjoint solve
    from the same factors; the values' gradient lives on the stored pattern). `jax.vmap`
    over `b` is one multi-column solve; over `A.data` each member is factored.

    **Arguments:**

    - `A`: a square `DIAMatrix` or `CSRMatrix` of shape `(n, n)` (float32, float64,
      complex64 or complex128).
    - `b`: `(n,)` or `(n, k)`; a scipy sparse `b` is made dense on the host (scipy then
      returns a sparse `x`; here `x` is dense). As in scipy, the solve runs in `A`'s and
      `b`'s promoted dtype (a complex `b` with a real `A` gives a complex `x`; a float64
      `b` with a float32 `A`, a float64 `x`); the gradient reaches `A`'s own values.

    **Returns:** `x`, shaped like `b`, in the promoted dtype. A singular matrix gives `nan` (as
    scipy's `spsolve` does, without its warning); a numerically singular one, large or
    non-finite entries.
    """
    _check_matrix(A)
    b = device_array(dense_rhs(b))
    dtype = solve_dtype(A.dtype, b.dtype)
    return run_compiled(_solve, A.astype(dtype), check_rhs(b, A.shape[0], dtype))


def _solve(A, b):
    return solve_once(A).solve(b)
