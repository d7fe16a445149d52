"""The DIA products on CPU by jaxsparse's native kernels (`native/dia_kernels.cc`).

Same contracts as `xla_dia.py`. The offsets reach the kernel as an array attribute, so
the compiled program is one call whatever the number of diagonals (no unrolling). Rows
are split evenly over XLA's intra-op threads and walked in blocks whose output stays in
the L1 cache while every diagonal adds into it. float32, float64, complex64 and
complex128; half precision stays on the XLA path.

Batches follow the product contract (`_primitive.py`, "Batches"): values
`(B, ndiag, n)` and dense operands `(B, rows, k)`, or shared without the leading axis; one
kernel call runs the whole batch, every member over a row block before the next block.
"""

import jax
import numpy as np

from . import _native_library

_VALUE_DTYPES = tuple(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))


def supports(dtype, platform: str) -> bool:
    """Whether the native kernels take `dtype` on `platform` (the CPU, once built)."""
    return platform == "cpu" and _native_library.AVAILABLE and np.dtype(dtype) in _VALUE_DTYPES


def _call(target: str, out_shape, first, second, offsets):
    out = jax.ShapeDtypeStruct(out_shape, first.dtype)
    return jax.ffi.ffi_call(target, out)(first, second, offsets=np.asarray(offsets, np.int64))


def _batch(first, second) -> tuple[int, ...]:
    """The leading batch axis of a call, `(B,)`, or `()` for one matrix (every unbatched
    argument of the DIA products has two axes)."""
    return next((a.shape[:1] for a in (first, second) if a.ndim == 3), ())


def dia_matmul_native(data, x, *, offsets, shape) -> jax.Array:
    """`A @ x`, `(m, k)` (batched: `(B, m, k)`)."""
    out_shape = (*_batch(data, x), shape[0], x.shape[-1])
    return _call("jaxsparse_dia_matmul", out_shape, data, x, offsets)


def dia_matmul_t_native(data, g, *, offsets, shape) -> jax.Array:
    """`A^T @ g`, `(n, k)` (batched: `(B, n, k)`)."""
    out_shape = (*_batch(data, g), shape[1], g.shape[-1])
    return _call("jaxsparse_dia_matmul_t", out_shape, data, g, offsets)


def dia_sddmm_native(g, x, *, offsets, shape) -> jax.Array:
    """`out[d, j] = g[j - offsets[d]] . x[j]` inside the matrix, else 0; `(ndiag, n)`
    (batched: `(B, ndiag, n)`)."""
    out_shape = (*_batch(g, x), len(offsets), shape[1])
    return _call("jaxsparse_dia_sddmm", out_shape, g, x, offsets)
