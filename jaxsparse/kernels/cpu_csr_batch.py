"""The CSR product on CPU for a batch of values (`_primitive.py`, "Batches"), until a native
CPU family takes the batch axis itself.

jaxlib's native product (`cpu_csr.py`) takes one matrix. For `B` matrices of one structure
and a shared vector, `Y[i, b] = sum_p x[indices[p]] * data[b, p]` over the entries `p` of
row `i` is one native product of the structure with columns `arange(nnz)` and values
`x[indices]` by the dense `(nnz, B)` operand `data.T`: the structure and `x` are read once.
The transpose of `data` costs most of the time, so for `k > 1` (one such product per column)
and for batched operands the batch runs as one native product per member instead, as it did
before batching existed (a loop inside this implementation). Measured at 2^16 rows, 8
entries per row, 64 matrices, float32 (median ms, 2-core machine shared with other jobs):
shared vector 125 against 198 per member; shared k = 8 303 against 251; batched vectors
408 against 216; XLA's batched formulation (`xla_csr.py`) 717-786 for k = 1.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .cpu_csr import _FFI_VALUE_DTYPES, csr_matmul_cpu


def csr_matmul_cpu_batched(data, x, indices, indptr, *, shape: tuple[int, int]) -> jax.Array:
    """`A_b @ x` (or `A_b @ x_b`) for the `(B, nnz)` values `data`: `(B, m, k)`."""
    m, n = shape
    batch, nnz = data.shape
    if x.ndim == 3:
        return lax.map(lambda a: csr_matmul_cpu(*a, indices, indptr, shape=shape), (data, x))
    if x.shape[1] != 1 or np.dtype(x.dtype) not in _FFI_VALUE_DTYPES:
        return lax.map(lambda a: csr_matmul_cpu(a, x, indices, indptr, shape=shape), data)
    if 0 in (m, n, nnz, batch):
        return jnp.zeros((batch, m, 1), x.dtype)
    # As in `cpu_csr.py`: row pointers outside `[0, nnz]` would make the native kernel read
    # out of bounds, so they empty every row (columns `arange(nnz)` are always in range).
    in_range = ~jnp.any((indptr < 0) | (indptr > nnz))
    indptr = jnp.where(in_range, indptr, 0)
    columns = jnp.arange(nnz, dtype=indices.dtype)
    out_type = jax.ShapeDtypeStruct((m, batch), x.dtype)
    out = jax.ffi.ffi_call("cpu_csr_sparse_dense_ffi", out_type)(
        x[indices, 0], indptr, columns, data.T
    )
    return out.T[:, :, None]
