"""`spbandwidth` and `is_sptriangular`: where a matrix's stored entries lie relative to
its main diagonal, after `scipy.sparse.linalg`'s functions of those names.

Both read the structure, not the values: every stored position counts, explicit zeros
included, and every stored DIA diagonal (as scipy). A DIA matrix's offsets are static, so
the answers are Python values even under `jax.jit`; a CSR matrix's need its index arrays
known on the host (a TypeError when they are traced).
"""

import numpy as np

from .._base import SparseMatrix, is_concrete
from .._batching import refuse_batch
from .._dia import DIAMatrix


def spbandwidth(A: SparseMatrix) -> tuple[int, int]:
    """`(below, above)`: how far below and above the main diagonal the farthest stored
    diagonal lies (0 where none does), as `scipy.sparse.linalg.spbandwidth`."""
    offsets = _stored_offsets(A, "spbandwidth")
    if offsets.size == 0:
        return 0, 0
    return max(0, -int(offsets.min())), max(0, int(offsets.max()))


def is_sptriangular(A: SparseMatrix) -> tuple[bool, bool]:
    """`(lower, upper)`: whether every stored entry lies on or below (on or above) the main
    diagonal, as `scipy.sparse.linalg.is_sptriangular` (a diagonal matrix is both)."""
    below, above = spbandwidth(A)
    return above == 0, below == 0


def _stored_offsets(A, name: str) -> np.ndarray:
    """The distinct diagonals (`column - row`) that hold a stored entry of `A`."""
    if not isinstance(A, SparseMatrix):
        raise TypeError(f"{name}: `A` must be a jaxsparse matrix, got {type(A).__name__}.")
    refuse_batch(f"`{name}`", A)
    if isinstance(A, DIAMatrix):
        return np.asarray(A.offsets, np.int64)
    if not is_concrete(A.indices, A.indptr):
        raise TypeError(
            f"{name}: a `CSRMatrix` whose index arrays are traced (under `jax.jit`) has no "
            "bandwidth known on the host: call it outside `jit`, or close over the structure."
        )
    indptr = np.asarray(A.indptr, np.int64)
    rows = np.repeat(np.arange(A.shape[0]), np.diff(indptr))
    return np.unique(np.asarray(A.indices, np.int64) - rows)
