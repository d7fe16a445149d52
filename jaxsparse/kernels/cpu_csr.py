"""The CSR products on CPU: jaxlib's native product kernel, and an XLA sampled product.

**Product.** jaxlib ships a native CSR-times-dense kernel for CPU, the XLA FFI target
`cpu_csr_sparse_dense_ffi` (Eigen's row-major sparse-dense product, split over XLA's CPU
thread pool); `jax.experimental.sparse` registers it when imported and uses it for BCSR on
CPU. It reads each row's entries once and writes each output row once, where the XLA
formulation (gather `x[indices]`, multiply, `segment_sum`) materializes an `(nnz, k)`
intermediate and needs the row of every entry. It takes float32, float64, complex64 and
complex128 values with int32 or int64 indices; other dtypes (bfloat16, float16) and empty
shapes use `csr_matmul_xla`. Unsorted and repeated column indices are summed as in scipy.
The kernel is only fast when `k` is a multiple of 8 (see `_FFI_COLUMN_MULTIPLE`), so
narrower operands are zero-padded to 8 columns (up to 8x the operand's memory for a
vector). `CSRMatrix` checks the structure when it is concrete, and `CSRMatrix.check()` does under
`jit`; before the call the index arrays are checked to lie inside their ranges, so that an
unchecked bad structure cannot make the native kernel read out of bounds (its product is
then zero). Its custom call has no compatibility guarantee: a program that uses it does
not export.

**Transposed product**: `csr_matmul_t_xla` (a scatter-add; no transposed structure).
**Sampled product**: the XLA formulation with the column sum unrolled.
"""

import jax
import jax.experimental.sparse  # noqa: F401  (registers the cpu_csr_sparse_dense_ffi target)
import jax.numpy as jnp
import numpy as np

from .._csr_layout import row_ids
from ._precision import accumulation_dtype
from ._xla_cpu import sum_over_columns
from .xla_csr import csr_matmul_xla

_FFI_VALUE_DTYPES = tuple(
    np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128)
)


# Eigen's row-major sparse x dense product updates one output row per stored entry; it is
# fast only when that row is a whole number of SIMD packets. Measured at 10^6 rows (float32,
# ms, FFI at k / FFI with x zero-padded to 8 columns / reference): stencil3d-27pt k=1:
# 188 / 78 / 279, k=3: 189 / 71 / 469; power-law k=1: 210 / 116 / 153; random-16 k=3:
# 1012 / 217 / 404, k=1: 233 / 216 / 191 (the one case the reference is ahead, by ~10%);
# padding to 4 columns was as slow as no padding. float64 k=1-2 with 8 columns: within
# +-20% of the reference. So the operand is padded to a multiple of 8 columns.
_FFI_COLUMN_MULTIPLE = 8


def csr_matmul_cpu(data, x, indices, indptr, *, shape: tuple[int, int]) -> jax.Array:
    """`A @ x` for a CSR matrix, `(m, k)` in `x.dtype`; same contract as `csr_matmul_xla`."""
    m, n = shape
    nnz, k = data.shape[0], x.shape[1]
    if np.dtype(x.dtype) not in _FFI_VALUE_DTYPES or 0 in (m, n, k, nnz):
        return csr_matmul_xla(data, x, indices, indptr, shape=shape)
    padded = -(-k // _FFI_COLUMN_MULTIPLE) * _FFI_COLUMN_MULTIPLE
    if padded != k:
        x = jnp.pad(x, ((0, 0), (0, padded - k)))
    # The native kernel reads wherever the index arrays point, and under `jit` they may be
    # unchecked. Both index arrays are checked by one pass each; if either is out of range,
    # every row is made empty (row pointers all zero), so the kernel reads no entry and the
    # product is zero. Measured at 2.6e7 entries, k = 8 (kernel alone 41-47 ms): clamping
    # the columns instead costs a fresh nnz-sized copy (+45 ms); calling the kernel inside a
    # `lax.cond` (to return NaN) copies its result out of the branch (tridiagonal, 3e6
    # entries: 8 -> 17 ms); this check costs about 1 ms per 3e6 entries. Row pointers inside
    # `[0, nnz]` are safe even out of order (a decreasing pair is an empty row).
    in_range = ~jnp.any((indices < 0) | (indices >= n)) & ~jnp.any((indptr < 0) | (indptr > nnz))
    indptr = jnp.where(in_range, indptr, 0)
    out_type = jax.ShapeDtypeStruct((m, padded), x.dtype)
    out = jax.ffi.ffi_call("cpu_csr_sparse_dense_ffi", out_type)(data, indptr, indices, x)
    return out[:, :k]


def csr_sddmm_cpu(g, x, indices, indptr, *, shape: tuple[int, int]) -> jax.Array:
    """Gradient of `A @ x` with respect to CSR `data`; same contract as `csr_sddmm_xla`,
    with the sum over the `k` columns unrolled (see `_xla_cpu.py`)."""
    del shape
    acc = accumulation_dtype(x.dtype)
    rows = row_ids(indptr, indices.shape[0])
    products = g[rows].astype(acc) * x[indices].astype(acc)
    return sum_over_columns(products).astype(x.dtype)
