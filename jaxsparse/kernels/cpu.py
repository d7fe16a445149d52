"""CPU paths faster than the pure `jax.numpy` reference, built on kernels jaxlib ships.

**CSR product.** jaxlib ships a native CSR-times-dense kernel for CPU, the XLA FFI target
`cpu_csr_sparse_dense_ffi` (Eigen's row-major sparse-dense product, split over XLA's CPU
thread pool); `jax.experimental.sparse` registers it when imported and uses it for BCSR on
CPU. It reads each row's entries once and writes each output row once, where the XLA
formulation (gather `x[indices]`, multiply, `segment_sum`) materializes an `(nnz, k)`
intermediate and needs the row of every entry. It takes float32, float64, complex64 and
complex128 values with int32 or int64 indices; other dtypes (bfloat16, float16) and empty
shapes use the reference. Unsorted and repeated column indices are summed as in scipy.
Like any native kernel it trusts `indices` to be in range: `CSRMatrix` checks them when
they are concrete, and `CSRMatrix.check()` under `jit`.
"""

import jax
import jax.experimental.sparse  # noqa: F401  (registers the cpu_csr_sparse_dense_ffi target)
import numpy as np
from jax import lax

from . import reference

_FFI_VALUE_DTYPES = tuple(
    np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128)
)


def csr_matmul(data, indices, indptr, x, *, shape: tuple[int, int]) -> jax.Array:
    """`A @ x` for a CSR matrix, `(m, k)` in `x.dtype`; same contract as the reference."""
    m, n = shape
    nnz, k = data.shape[0], x.shape[1]
    if np.dtype(x.dtype) not in _FFI_VALUE_DTYPES or 0 in (m, n, k, nnz):
        return reference.csr_matmul(data, indices, indptr, x, shape=shape)
    out_type = jax.ShapeDtypeStruct((m, k), x.dtype)
    return jax.ffi.ffi_call("cpu_csr_sparse_dense_ffi", out_type)(data, indptr, indices, x)



def _unfusable(y):
    rows = lax.broadcasted_iota(np.int32, y.shape, 0)
    return jax.numpy.where(rows < y.shape[0], y, 0)


def dia_matmul(data, x, *, offsets, shape):
    return _unfusable(reference.dia_matmul(data, x, offsets=offsets, shape=shape))


def dia_sddmm(g, x, *, offsets, shape):
    return _unfusable(reference.dia_sddmm(g, x, offsets=offsets, shape=shape))
