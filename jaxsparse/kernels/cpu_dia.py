"""The DIA products on CPU: XLA formulations that keep XLA CPU off slow fusions.

Same contracts as `xla_dia.py` (which they build on); they differ only in how the work is
cut into XLA operations, measured on a 2-core x86 machine with JAX 0.10. XLA CPU hands
reductions, with the elementwise ops, pads and slices that feed them, to YNNPACK fusions,
which measured 10-25x slower than XLA's own loops here.
"""

import jax.numpy as jnp
import numpy as np
from jax import lax

from .._dia_layout import valid_rows
from ._precision import accumulation_dtype
from ._xla_cpu import sum_over_columns
from .xla_dia import dia_matmul_t_xla, dia_matmul_xla


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
    rounds_partial_sums = accumulation_dtype(operand.dtype) != operand.dtype
    if operand.shape[1] != 1 or ndiag <= _MAX_DIAGONALS_IN_ONE_LOOP or rounds_partial_sums:
        return _outside_ynn_fusions(product(data, operand, offsets=offsets, shape=shape))
    total = None
    for start, stop in _passes(offsets):
        part = product(data[start:stop], operand, offsets=offsets[start:stop], shape=shape)
        total = part if total is None else lax.optimization_barrier(total) + part
    return _outside_ynn_fusions(total)


def dia_matmul_cpu(data, x, *, offsets, shape):
    """`A @ x` for a DIA matrix; same contract as `dia_matmul_xla`."""
    return _in_passes(dia_matmul_xla, data, x, offsets=offsets, shape=shape)


def dia_matmul_t_cpu(data, g, *, offsets, shape):
    """`A^T @ g` for a DIA matrix; same contract as `dia_matmul_t_xla`."""
    return _in_passes(dia_matmul_t_xla, data, g, offsets=offsets, shape=shape)


_MAX_DIAGONALS_STACKED = 8


def dia_sddmm_cpu(g, x, *, offsets, shape):
    """Gradient of `A @ x` with respect to DIA `data`; same contract as `dia_sddmm_xla`.

    Two CPU-specific changes, measured at 10^6 rows (float32, ms): the sum over the `k`
    columns is unrolled (`sum_over_columns`); and the rows are assembled by how many
    diagonals there are. Up to 8, each diagonal's row is padded and the rows stacked, which
    XLA writes in one pass (5 diagonals, k = 1: 0.6 against 1.6 for the in-place writes
    below; k = 8: 8.7 against 11.6). Beyond that, stacking many rows turns slow (27
    diagonals, k = 1: 100 against 46), so each diagonal is written in place into one zeroed
    `(ndiag, n)` buffer (`.at[].set`).
    """
    _, n = shape
    acc = accumulation_dtype(x.dtype)
    sums = {}  # diagonal -> (first column inside the matrix, sums over the k columns)
    for d, off in enumerate(offsets):
        lo, hi = valid_rows(off, shape)
        if hi <= lo:
            continue
        products = g[lo:hi].astype(acc) * x[lo + off : hi + off].astype(acc)
        sums[d] = (lo + off, sum_over_columns(products))
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
