"""`matrix_power`: `A @ A @ ... @ A` of a square sparse matrix, after
`scipy.sparse.linalg.matrix_power`."""

import numpy as np

from .._base import SparseMatrix
from .._batching import refuse_batch
from .._construct import eye


def matrix_power(A: SparseMatrix, power: int) -> SparseMatrix:
    """`A` to the integer `power >= 0` by repeated squaring: `2 log2(power)` sparse products
    at most, in `A`'s format (DIA stays DIA and jit-able; a CSR product finds its structure
    on the host, as `A @ B` does). `power=0` gives the identity.

    (`A ** p` is elementwise, as for scipy's sparse arrays.)
    """
    if not isinstance(A, SparseMatrix):
        raise TypeError(f"matrix_power: `A` must be a jaxsparse matrix, got {type(A).__name__}.")
    refuse_batch("`matrix_power`", A)
    m, n = A.shape
    if m != n:
        raise ValueError(f"matrix_power: `A` must be square, got shape {A.shape}.")
    power = int(power) if isinstance(power, np.integer) else power
    if isinstance(power, bool) or not isinstance(power, int) or power < 0:
        raise ValueError(f"matrix_power: `power` must be an int >= 0, got {power!r}.")
    result = None
    square = A
    while power:
        if power & 1:
            result = square if result is None else result @ square
        power >>= 1
        if power:
            square = square @ square
    return eye(n, dtype=A.dtype, format=A.format) if result is None else result
