"""`setdiag`: a matrix with one diagonal set, as scipy's (a new matrix: ours are immutable).

`diagonal_values` checks the arguments the same way for both formats; the DIA method
writes the values into its diagonal (`_dia.py`), and `csr_setdiag` rebuilds the CSR
structure on the host: the entries on the positions set are dropped (every copy of a
repeated one), and the new values merged in, so a position not stored before is added.
"""

import jax.numpy as jnp
import numpy as np

from ._base import is_concrete
from ._batching import refuse_batch
from ._coordinates import entries, select_entries
from ._dia_layout import validate_offset


def diagonal_values(values, k, shape: tuple[int, int], dtype) -> tuple[int, jnp.ndarray]:
    """`(k, filled)`: offset `k` checked and the values that diagonal `k` gets, from its
    first entry on: a scalar fills the diagonal, a longer array is cut to it, a shorter one
    sets its first entries. Complex values for a real matrix are a TypeError (their
    imaginary parts would be dropped); others are cast to `dtype`, as scipy's are."""
    k = validate_offset(k)
    m, n = shape
    # As scipy: a diagonal wholly outside the matrix has nothing to set.
    if (k > 0 and k >= n) or (k < 0 and -k >= m):
        raise ValueError(f"`k` exceeds array dimensions: k={k} for shape={shape} needs -m < k < n.")
    length = max(0, min(m + min(k, 0), n - max(k, 0)))
    values = jnp.asarray(values)
    if values.ndim > 1:
        raise ValueError(f"`values` must be a scalar or 1-D, got shape {values.shape}.")
    if jnp.iscomplexobj(values) and not jnp.issubdtype(dtype, jnp.complexfloating):
        raise TypeError(
            f"`values` are complex ({values.dtype}) but the matrix is real ({dtype}): "
            "their imaginary parts would be dropped. Cast the matrix first, e.g. "
            "`A.astype(jnp.complex64)`."
        )
    filled = jnp.broadcast_to(values, (length,)) if values.ndim == 0 else values[:length]
    return k, filled.astype(dtype)


def csr_setdiag(matrix, values, k: int = 0):
    """`matrix` (a `CSRMatrix`) with diagonal `k` set to `values` (see the module)."""
    refuse_batch("`setdiag`", matrix)
    k, filled = diagonal_values(values, k, matrix.shape, matrix.dtype)
    if not is_concrete(matrix.indices, matrix.indptr):
        raise TypeError(
            "`setdiag` of a `CSRMatrix` may add positions to its structure, whose index "
            "arrays are traced (under `jax.jit`): call it outside `jit`, or close over the "
            "structure and pass the values."
        )
    first = max(-k, 0)
    rows = np.arange(first, first + filled.shape[0])
    stored_rows = np.asarray(entries(matrix)[0], np.int64)
    stored_cols = np.asarray(matrix.indices, np.int64)
    on_set = stored_cols - stored_rows == k
    on_set &= (stored_rows >= first) & (stored_rows < first + rows.size)
    kept = select_entries(matrix, ~on_set)
    added = type(matrix).from_coo(filled, rows, rows + k, matrix.shape)
    return kept + added
