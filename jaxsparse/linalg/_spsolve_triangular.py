"""`spsolve_triangular`, after `scipy.sparse.linalg.spsolve_triangular`: `spsolve` of the
triangle named, which a triangular matrix's factorization leaves without fill (SuperLU's
for CSR, the band's for DIA), so it inherits `spsolve`'s `jit`, batching and derivatives.
"""

import numpy as np

from .._base import SparseMatrix, is_concrete
from .._construct import eye, tril, triu
from .._csr import CSRMatrix
from ._spsolve import spsolve


def spsolve_triangular(A: SparseMatrix, b, lower: bool = True, unit_diagonal: bool = False):
    """The solution `x` of `T x = b` for the lower (or upper) triangle `T` of the square
    sparse matrix `A`.

    **Arguments:**

    - `A`: a square `DIAMatrix` or `CSRMatrix`. Only its lower (`lower=True`) or upper
      triangle is read, diagonal included, as LAPACK's triangular solves read theirs
      (scipy's answer for a matrix that is not triangular is unspecified).
    - `b`: `(n,)` or `(n, k)`, as in `spsolve`.
    - `lower`: which triangle.
    - `unit_diagonal`: take the diagonal as ones, whatever `A` stores there (a CSR `A`
      whose structure is traced under `jit` cannot take it: the ones' positions would
      change the structure).

    **Returns:** `x`, shaped like `b`. A zero on the diagonal makes `T` singular: `nan`, as
    `spsolve` gives (scipy raises `LinAlgError`).
    """
    if not isinstance(A, SparseMatrix):
        raise TypeError(f"`A` must be a DIAMatrix or CSRMatrix, got {type(A).__name__}.")
    for name, flag in (("lower", lower), ("unit_diagonal", unit_diagonal)):
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"`{name}` must be True or False, got {flag!r}.")
    lower, unit_diagonal = bool(lower), bool(unit_diagonal)
    if A.shape[0] != A.shape[1]:
        raise ValueError(f"`A` must be square, got shape {A.shape}.")
    triangle = tril if lower else triu
    if not unit_diagonal:
        return spsolve(triangle(A), b)
    if isinstance(A, CSRMatrix) and not is_concrete(A.indices, A.indptr):
        raise TypeError(
            "`unit_diagonal=True` adds the diagonal's positions to `A`'s structure, whose "
            "index arrays are traced (under `jax.jit`): close over the structure, or store "
            "the ones in `A` and pass `unit_diagonal=False`."
        )
    strict = triangle(A, -1 if lower else 1)
    return spsolve(strict + eye(A.shape[0], dtype=A.dtype, format=A.format), b)
