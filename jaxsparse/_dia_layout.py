"""Index arithmetic of the DIA layout, from static offsets and shape alone.

`data[d, j] == A[j - offsets[d], j]`. Everything here depends only on `offsets` and
`shape`, which are static, so index arrays are numpy constants baked into the compiled
program and every function works under `jax.jit`. Containers and kernels both build on
this module; it imports nothing else from jaxsparse.
"""

import functools
import numbers

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def valid_rows(offset: int, shape: tuple[int, int]) -> tuple[int, int]:
    """Rows `i` in `[lo, hi)` whose diagonal slot `(i, i + offset)` lies in the matrix.

    Returns `(lo, hi)` with `hi <= lo` when the whole diagonal is outside.
    """
    m, n = shape
    return max(0, -offset), min(m, n - offset)


# Products unroll one operation per diagonal at trace time up to this many diagonals inside
# the matrix; beyond, they loop over the diagonals (`kernels/xla_dia_loop.py`, and the loops
# in the Pallas kernels), so that programs do not grow with the number of diagonals. Up to
# here unrolled code runs at least as fast as the loop, whose accumulator is passed over
# once per diagonal, so stencils up to 27 points keep their unrolled code.
MAX_UNROLLED_DIAGONALS = 32


def unrolls_diagonals(offsets: tuple[int, ...], shape: tuple[int, int]) -> bool:
    """Whether products of a matrix with these offsets unroll its diagonals (see
    `MAX_UNROLLED_DIAGONALS`)."""
    return sum(_meets_matrix(off, shape) for off in offsets) <= MAX_UNROLLED_DIAGONALS


def active_diagonals(
    offsets: tuple[int, ...], shape: tuple[int, int]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Positions and offsets of the diagonals with at least one slot inside the matrix."""
    index = tuple(d for d, off in enumerate(offsets) if _meets_matrix(off, shape))
    return index, tuple(offsets[d] for d in index)


def _meets_matrix(offset: int, shape: tuple[int, int]) -> bool:
    lo, hi = valid_rows(offset, shape)
    return hi > lo


def inside_mask(offsets: tuple[int, ...], shape: tuple[int, int], index) -> jax.Array:
    """Whether each slot of the diagonals `index` (of a matrix with these offsets and shape)
    lies inside the matrix, shape `(len(index), n)`. From an iota, not a constant the size
    of the data, so large matrices keep small programs."""
    m, n = shape
    picked_offsets = np.asarray([offsets[d] for d in index], np.int32)[:, None]
    columns = lax.broadcasted_iota(jnp.int32, (1, n), 1)
    return (columns >= picked_offsets) & (columns - picked_offsets < m)


def inside_slots(data, offsets: tuple[int, ...], shape: tuple[int, int], index) -> jax.Array:
    """Rows `index` of `data` (diagonals of a matrix with these offsets and shape), with
    the slots outside the matrix zeroed."""
    inside = inside_mask(offsets, shape, index)
    # Every diagonal in order is the common case: a plain use of `data`, not a gather.
    every = tuple(index) == tuple(range(len(offsets)))
    picked = data if every else data[np.asarray(index)]
    return jnp.where(inside, picked, jnp.zeros((), data.dtype))


def diagonal_lengths(offsets: tuple[int, ...], shape: tuple[int, int]) -> list[int]:
    """How many slots of each diagonal lie inside the matrix."""
    return [max(0, hi - lo) for lo, hi in (valid_rows(off, shape) for off in offsets)]


def stored_positions(offsets: tuple[int, ...], shape: tuple[int, int]):
    """Every slot inside the matrix: `(diagonal, row, column)` index arrays, diagonal-major."""
    diagonals, rows, cols = [], [], []
    for d, off in enumerate(offsets):
        lo, hi = valid_rows(off, shape)
        row = np.arange(lo, max(lo, hi), dtype=np.int64)
        rows.append(row)
        cols.append(row + off)
        diagonals.append(np.full(row.shape, d, dtype=np.int64))
    if not rows:
        empty = np.zeros((0,), np.int64)
        return empty, empty, empty
    return np.concatenate(diagonals), np.concatenate(rows), np.concatenate(cols)


def negate_offsets(offsets: tuple[int, ...]) -> tuple[int, ...]:
    """The offsets of the transposed matrix."""
    return tuple(-off for off in offsets)


@functools.partial(jax.jit, static_argnums=(1, 2))
def transpose_data(data, offsets: tuple[int, ...], shape: tuple[int, int]) -> jax.Array:
    """The diagonals of `A^T` (offsets `-offsets`, shape `(n, m)`), `(len(offsets), m)`.

    `out[d, i] = data[d, i + offsets[d]]` where that slot lies inside `A`, else 0, so every
    ignored slot of the result holds zero. One pad per diagonal up to
    `MAX_UNROLLED_DIAGONALS`, one gather beyond; one compiled program when called eagerly.
    """
    m, n = shape
    if not unrolls_diagonals(offsets, shape) and n > 0:
        # Column indices computed in the program from the offsets: a constant of
        # `len(offsets) * m` indices would bloat the program instead.
        columns = jnp.asarray(np.asarray(offsets, np.int32))[:, None] + lax.iota(np.int32, m)
        inside = (columns >= 0) & (columns < n)
        stored = jnp.take_along_axis(data, jnp.clip(columns, 0, n - 1), axis=1)
        return jnp.where(inside, stored, jnp.zeros((), data.dtype))
    rows = []
    for d, off in enumerate(offsets):
        lo, hi = valid_rows(off, shape)
        if hi <= lo:
            rows.append(jnp.zeros((m,), data.dtype))
        else:
            rows.append(jnp.pad(data[d, lo + off : hi + off], (lo, m - hi)))
    if not rows:
        return jnp.zeros((0, m), data.dtype)
    return jnp.stack(rows)


def csr_structure(offsets: tuple[int, ...], shape: tuple[int, int]):
    """The CSR structure of a DIA matrix, rows in order and columns sorted in each row.

    **Returns:** `(diagonal, column, indptr)` numpy arrays: entry `p` of the CSR matrix
    is `data[diagonal[p], column[p]]` at column `column[p]`.
    """
    m, n = shape
    order = np.argsort(np.asarray(offsets, dtype=np.int64), kind="stable")
    sorted_offsets = np.asarray(offsets, dtype=np.int64)[order]
    cols = np.arange(m, dtype=np.int64)[:, None] + sorted_offsets[None, :]
    inside = (cols >= 0) & (cols < n)
    diagonals = np.broadcast_to(order[None, :], cols.shape)
    indptr = np.concatenate([[0], np.cumsum(inside.sum(axis=1))]).astype(np.int64)
    return diagonals[inside], cols[inside], indptr


def validate_offsets(offsets) -> tuple[int, ...]:
    """DIA offsets as a tuple of distinct Python ints (one int is one offset)."""
    if isinstance(offsets, jax.core.Tracer):
        raise TypeError(
            "`offsets` must be concrete Python ints (they are static), got a traced array."
        )
    if isinstance(offsets, (numbers.Integral, np.integer)) and not isinstance(offsets, bool):
        offsets = (offsets,)
    try:
        values = list(np.asarray(offsets).reshape(-1)) if _is_array(offsets) else list(offsets)
    except TypeError:
        raise TypeError(f"`offsets` must be a sequence of ints, got {offsets!r}.") from None
    for off in values:
        if isinstance(off, bool) or not isinstance(off, (numbers.Integral, np.integer)):
            raise TypeError(f"`offsets` must hold integers, got {off!r} in {offsets!r}.")
    result = tuple(int(off) for off in values)
    if any(not -(2**63) <= off < 2**63 for off in result):
        raise ValueError(f"`offsets` must fit in int64, got {result}.")
    if len(set(result)) != len(result):
        raise ValueError(f"`offsets` contains duplicate values: {result}.")
    return result


def _is_array(value) -> bool:
    return isinstance(value, (np.ndarray, jax.Array))


def validate_offset(k, name: str = "k") -> int:
    """One diagonal's offset: a Python or numpy int (not a bool), as a Python int."""
    if isinstance(k, bool) or not isinstance(k, (numbers.Integral, np.integer)):
        raise TypeError(f"`{name}` must be an int (one diagonal's offset), got {k!r}.")
    return int(k)
