"""CPU paths faster than the pure `jax.numpy` reference: kernels jaxlib ships, and
reformulations that keep XLA CPU off slow fusions.

**CSR product.** jaxlib ships a native CSR-times-dense kernel for CPU, the XLA FFI target
`cpu_csr_sparse_dense_ffi` (Eigen's row-major sparse-dense product, split over XLA's CPU
thread pool); `jax.experimental.sparse` registers it when imported and uses it for BCSR on
CPU. It reads each row's entries once and writes each output row once, where the XLA
formulation (gather `x[indices]`, multiply, `segment_sum`) materializes an `(nnz, k)`
intermediate and needs the row of every entry. It takes float32, float64, complex64 and
complex128 values with int32 or int64 indices; other dtypes (bfloat16, float16) and empty
shapes use the reference. Unsorted and repeated column indices are summed as in scipy.
The kernel is only fast when `k` is a multiple of 8 (see `_FFI_COLUMN_MULTIPLE`), so
narrower operands are zero-padded to 8 columns (up to 8x the operand's memory for a
vector). `CSRMatrix` checks the structure when it is concrete, and `CSRMatrix.check()` does under
`jit`; before the call the index arrays are checked to lie inside their ranges, so that an
unchecked bad structure cannot make the native kernel read out of bounds (its product is
then zero).
"""

import jax
import jax.experimental.sparse  # noqa: F401  (registers the cpu_csr_sparse_dense_ffi target)
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import reference

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


def csr_matmul(data, indices, indptr, x, *, shape: tuple[int, int]) -> jax.Array:
    """`A @ x` for a CSR matrix, `(m, k)` in `x.dtype`; same contract as the reference."""
    m, n = shape
    nnz, k = data.shape[0], x.shape[1]
    if np.dtype(x.dtype) not in _FFI_VALUE_DTYPES or 0 in (m, n, k, nnz):
        return reference.csr_matmul(data, indices, indptr, x, shape=shape)
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


# DIA. XLA CPU (JAX 0.10) hands reductions, with the elementwise ops, pads and slices that
# feed them, to YNNPACK fusions, which measured 10-25x slower than XLA's own loops here.


def _outside_ynn_fusions(y):
    """`y`, through a `select` XLA CPU's YNNPACK fusions cannot take.

    Without it, a consumer's reduction (`jnp.sum(A @ x * w)`, as in every loss) pulls the
    whole product, pads and slices included, into one YNNPACK fusion: measured 40-55 ms
    instead of 3.7 ms for forward + sum at 10^6 rows, 5 diagonals, k = 1. The mask is
    always true; XLA fuses it into the product's own loop.
    """
    rows = lax.broadcasted_iota(np.int32, y.shape, 0)
    return jnp.where(rows < y.shape[0], y, 0)


# One fused loop reading many diagonals at once streams them all concurrently; beyond about
# 8 streams the loop falls well short of memory bandwidth. Measured at 10^6 rows, 27
# diagonals, k = 1, float32 (min / median of rounds, ms): one loop 6.5 / 7.2; passes of at
# most 3 diagonals 6.1 / 7.5, 4: 5.1 / 6.3, 6: 4.8 / 5.4, 9: 5.9 / 6.2 (scipy DIA 7.9 /
# 8.0). With several columns the passes did not help (27 diagonals, k = 8: within noise),
# and up to 7 diagonals one loop is as fast. Diagonals whose offsets are close read the
# operand at nearly the same place, so a pass takes whole groups of them: the 27-point
# stencil's nine groups of three, two groups a pass, measured 5.7-6.2 ms (median of 40
# rounds, three runs) against 6.5-6.9 for passes of 5-6 diagonals cutting across groups.
_MAX_DIAGONALS_IN_ONE_LOOP = 8
_DIAGONALS_PER_PASS = 6
_NEAR_OFFSETS = 16  # offsets at most this far apart read the operand at nearly one place


def _passes(offsets) -> list[tuple[int, int]]:
    """Consecutive `(start, stop)` ranges of diagonals, one pass each: runs of diagonals
    with near offsets (split evenly when longer than a pass) packed whole into passes of at
    most `_DIAGONALS_PER_PASS` diagonals."""
    breaks = [d for d in range(1, len(offsets)) if abs(offsets[d] - offsets[d - 1]) > _NEAR_OFFSETS]
    runs = []
    for start, stop in zip([0, *breaks], [*breaks, len(offsets)], strict=True):
        pieces = -(-(stop - start) // _DIAGONALS_PER_PASS)
        bounds = np.linspace(start, stop, pieces + 1).round().astype(int)
        runs.extend(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))
    passes = [runs[0]]
    for start, stop in runs[1:]:
        if stop - passes[-1][0] <= _DIAGONALS_PER_PASS:
            passes[-1] = (passes[-1][0], stop)
        else:
            passes.append((start, stop))
    return passes


def _in_passes(product, data, operand, *, offsets, shape):
    """`product(data, operand)` for a DIA product, split into passes over a few diagonals
    each when that streams memory faster (see above); partial sums are materialized
    between passes, so each pass is one loop over the output."""
    ndiag = len(offsets)
    # Partial sums are materialized in the operand's dtype: half precision would round them.
    rounds_partial_sums = reference.accumulation_dtype(operand.dtype) != operand.dtype
    if operand.shape[1] != 1 or ndiag <= _MAX_DIAGONALS_IN_ONE_LOOP or rounds_partial_sums:
        return _outside_ynn_fusions(product(data, operand, offsets=offsets, shape=shape))
    total = None
    for start, stop in _passes(offsets):
        part = product(data[start:stop], operand, offsets=offsets[start:stop], shape=shape)
        total = part if total is None else lax.optimization_barrier(total) + part
    return _outside_ynn_fusions(total)


def dia_matmul(data, x, *, offsets, shape):
    """`A @ x` for a DIA matrix; same contract as `reference.dia_matmul`."""
    return _in_passes(reference.dia_matmul, data, x, offsets=offsets, shape=shape)


def dia_matmul_transpose(data, g, *, offsets, shape):
    """`A^T @ g` for a DIA matrix; same contract as `reference.dia_matmul_transpose`."""
    return _in_passes(reference.dia_matmul_transpose, data, g, offsets=offsets, shape=shape)


# A reduction over the `k` columns (`jnp.sum(products, axis=1)`) becomes a YNNPACK fusion
# on XLA CPU (JAX 0.10), far slower than adding the columns in XLA's own loop. Measured,
# float32, ms (sum / unrolled adds): DIA data gradient, 5 diagonals, 10^6 rows, k = 8:
# 178 / 20; 1.5 x 10^5 rows, k = 32: 59 / 37, k = 64: 122 / 76. CSR sampled product with
# the rows given, 5 x 10^6 entries, k = 2: 52 / 4.0, k = 8: 110 / 7.6; 7.5 x 10^5
# entries, k = 16: 26 / 15, k = 64: 109 / 58. Past `_UNROLLED_COLUMNS` columns the
# program would grow with `k`, so the sum stays a reduction there.
_UNROLLED_COLUMNS = 64


def _sum_over_columns(products):
    """`products.sum(axis=1)` for a `(p, k)` array, as unrolled adds when `k` is small."""
    k = products.shape[1]
    if k > _UNROLLED_COLUMNS:
        return jnp.sum(products, axis=1)
    total = products[:, 0]
    for c in range(1, k):
        total = total + products[:, c]
    return total


def csr_sddmm(indices, indptr, g, x, *, shape: tuple[int, int]) -> jax.Array:
    """Gradient of `A @ x` with respect to CSR `data`; same contract as the reference,
    with the sum over the `k` columns unrolled (see `_sum_over_columns`)."""
    del shape
    acc = reference.accumulation_dtype(x.dtype)
    rows = reference.csr_row_ids(indptr, indices.shape[0])
    products = g[rows].astype(acc) * x[indices].astype(acc)
    return _sum_over_columns(products).astype(x.dtype)


_MAX_DIAGONALS_STACKED = 8


def dia_sddmm(g, x, *, offsets, shape):
    """Gradient of `A @ x` with respect to DIA `data`; same contract as the reference.

    Two CPU-specific changes, measured at 10^6 rows (float32, ms): the sum over the `k`
    columns is unrolled (`_sum_over_columns`); and the rows are assembled by how many
    diagonals there are. Up to 8, each diagonal's row is padded and the rows stacked, which
    XLA writes in one pass (5 diagonals, k = 1: 0.6 against 1.6 for the in-place writes
    below; k = 8: 8.7 against 11.6). Beyond that, stacking many rows turns slow (27
    diagonals, k = 1: 100 against 46), so each diagonal is written in place into one zeroed
    `(ndiag, n)` buffer (`.at[].set`).
    """
    _, n = shape
    acc = reference.accumulation_dtype(x.dtype)
    sums = {}  # diagonal -> (first column inside the matrix, sums over the k columns)
    for d, off in enumerate(offsets):
        lo, hi = reference.dia_valid_rows(off, shape)
        if hi <= lo:
            continue
        products = g[lo:hi].astype(acc) * x[lo + off : hi + off].astype(acc)
        sums[d] = (lo + off, _sum_over_columns(products))
    if len(offsets) <= _MAX_DIAGONALS_STACKED:
        rows = [jnp.zeros((n,), acc)] * len(offsets)
        for d, (start, total) in sums.items():
            rows[d] = jnp.pad(total, (start, n - start - total.shape[0]))
        out = jnp.stack(rows) if rows else jnp.zeros((0, n), acc)
    else:
        out = jnp.zeros((len(offsets), n), acc)
        for d, (start, total) in sums.items():
            out = out.at[d, start : start + total.shape[0]].set(total)
    return out.astype(x.dtype)
