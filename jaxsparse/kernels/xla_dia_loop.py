"""The DIA products as loops over the diagonals, in pure `jax.numpy`: for many diagonals.

Same contracts as `xla_dia.py` (one matrix, 2-D operands), but the diagonals are not
unrolled at trace time: a `lax.scan` runs over arrays of diagonal indices and offsets (numpy
constants built from the static offsets), so the program, and its compile time, stay the same
size whatever the number of diagonals. Each step reads one diagonal where it is stored, whole,
and the shift by its offset is a `dynamic_slice` of a padded array, so no step has a
per-element bounds check:

- the product scatters: row `j` of `data[d] * x` belongs to output row `j - offsets[d]`, so it
  is added into a zero-padded accumulator at row `top + j - offsets[d]`, in place; the rows
  of ignored slots (and whatever junk they hold) land in the padding, which is dropped;
- the transposed product and the data gradient gather: they read the zero-padded `g` at rows
  `j - offsets[d]`, with ignored slots masked to zero.

`_UNROLL` diagonals per loop step keep the loop's own overhead small.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._dia_layout import active_diagonals
from ._precision import accumulation_dtype
from ._xla_cpu import sum_over_columns

# Diagonals per loop step: enough to amortize the loop's overhead on narrow products, few
# enough that the unrolled body stays small.
_UNROLL = 8


def dia_matmul_loop(data, x, *, offsets: tuple[int, ...], shape: tuple[int, int]) -> jax.Array:
    """`A @ x`, `(m, k)` in `x.dtype`: `data` `(len(offsets), n)`, `x` `(n, k)`."""
    m, n = shape
    index, active = active_diagonals(offsets, shape)
    acc = accumulation_dtype(x.dtype)
    if not index:
        return jnp.zeros((m, x.shape[1]), x.dtype)
    # Accumulator row `top + i` is output row `i`; rows `top + j - off` for every stored
    # column `j` and offset `off` fall inside it.
    top = max(0, max(active))
    rows = top + max(m, n - min(active))
    operand = x.astype(acc)

    def add_diagonal(total, diagonal):
        d, start = diagonal
        products = data[d].astype(acc)[:, None] * operand
        window = lax.dynamic_slice_in_dim(total, start, n)
        return lax.dynamic_update_slice_in_dim(total, window + products, start, 0), None

    steps = (_int32(index), _int32(top - np.asarray(active)))
    zeros = jnp.zeros((rows, x.shape[1]), acc)
    total, _ = lax.scan(add_diagonal, zeros, steps, unroll=_UNROLL)
    return total[top : top + m].astype(x.dtype)


def dia_matmul_t_loop(data, g, *, offsets: tuple[int, ...], shape: tuple[int, int]) -> jax.Array:
    """`A^T @ g`, `(n, k)` in `g.dtype`: `data` `(len(offsets), n)`, `g` `(m, k)`."""
    m, n = shape
    index, active = active_diagonals(offsets, shape)
    acc = accumulation_dtype(g.dtype)
    if not index:
        return jnp.zeros((n, g.shape[1]), g.dtype)
    padded, top = _padded_operand(g.astype(acc), active, shape)

    def add_diagonal(total, diagonal):
        d, off = diagonal
        stored = jnp.where(_inside(off, shape), data[d].astype(acc), 0)
        rows = lax.dynamic_slice_in_dim(padded, top - off, n)
        return total + stored[:, None] * rows, None

    zeros = jnp.zeros((n, g.shape[1]), acc)
    total, _ = lax.scan(add_diagonal, zeros, (_int32(index), _int32(active)), unroll=_UNROLL)
    return total.astype(g.dtype)


def dia_sddmm_loop(g, x, *, offsets: tuple[int, ...], shape: tuple[int, int]) -> jax.Array:
    """The data gradient, `(len(offsets), n)` in `x.dtype`: `out[d, j] = sum_c g[j -
    offsets[d], c] * x[j, c]` on the slots inside the matrix, else 0."""
    m, n = shape
    index, active = active_diagonals(offsets, shape)
    acc = accumulation_dtype(x.dtype)
    if not index:
        return jnp.zeros((len(offsets), n), x.dtype)
    padded, top = _padded_operand(g.astype(acc), active, shape)
    operand = x.astype(acc)

    def diagonal_gradient(carry, off):
        rows = lax.dynamic_slice_in_dim(padded, top - off, n)
        return carry, jnp.where(_inside(off, shape), sum_over_columns(rows * operand), 0)

    _, gradient = lax.scan(diagonal_gradient, None, _int32(active), unroll=_UNROLL)
    gradient = gradient.astype(x.dtype)
    if len(index) == len(offsets):
        return gradient
    return jnp.zeros((len(offsets), n), x.dtype).at[np.asarray(index)].set(gradient)


def _padded_operand(operand, active, shape):
    """`operand` `(m, k)` zero-padded so that rows `j - off` for every column `j < n` and
    active offset `off` are rows `top + j - off` of the result; and `top`."""
    m, n = shape
    top = max(0, max(active))
    bottom = max(0, n - min(active) - m)
    return jnp.pad(operand, ((top, bottom), (0, 0))), top


def _inside(off, shape):
    """Which stored columns `j` of the diagonal at (traced) offset `off` lie in the matrix."""
    m, n = shape
    rows = lax.iota(np.int32, n) - off
    return (rows >= 0) & (rows < m)


def _int32(values) -> jax.Array:
    return jnp.asarray(np.asarray(values, dtype=np.int32))
