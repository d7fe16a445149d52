"""Reductions of sparse matrices, with scipy.sparse's semantics: `diagonal`, `trace`, `sum`,
`mean`, `count_nonzero`, `nonzero`, `max` and `min` (the norms: `linalg._norms`).

All are jit-able (and jitted, so that an eager call compiles one program): they read the
stored entries (`_coordinates.entries`) and never build the dense matrix; sums along an
axis are products with ones (`line_sums`). `max`, `min` and `count_nonzero` first sum
repeated CSR entries, as scipy does; the implicit zeros take part in
`max` and `min` wherever a row, a column or the matrix has a position that is not stored.
A batched matrix gives one result per member, the batch axes first.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ._base import is_concrete, register_for_format
from ._batching import over_batch, refuse_batch
from ._coordinates import (
    checked_entries,
    columns_rise,
    distinct_entries,
    entries,
    lookup,
    may_repeat,
    reduce_distinct,
    scatter_total,
    unless_invalid_structure,
)
from ._csr_layout import dropped_outside
from .kernels._precision import accumulation_dtype


def diagonal_length(shape: tuple[int, int], k: int) -> int:
    """How many entries diagonal `k` of a matrix of this shape holds (0 if none)."""
    m, n = shape
    return max(0, min(m + min(k, 0), n - max(k, 0)))


@over_batch
def diagonal(matrix, k: int = 0) -> jax.Array:
    """The `k`-th diagonal of `matrix` as a dense 1-D array, as scipy's `diagonal(k)`.

    **Arguments:**

    - `k`: a Python int: 0 the main diagonal, > 0 above, < 0 below.

    **Returns:** a `(length,)` array in the matrix's dtype (empty when `k` misses it).
    """
    return _diagonal_of(matrix, k=_static_int(k, "k"), repeats=may_repeat(matrix))


@functools.partial(jax.jit, static_argnames=("k", "repeats"))
def _diagonal_of(matrix, k: int, repeats) -> jax.Array:
    return _diagonal(matrix, k, diagonal_length(matrix.shape, k), repeats)


@functools.singledispatch
def _diagonal(matrix, k: int, length: int, repeats) -> jax.Array:
    start = max(-k, 0)

    def searched(matrix):  # each row searched for its entry: no position repeats
        rows = jnp.arange(start, start + length, dtype=matrix.indptr.dtype)
        return lookup(matrix, rows, rows + k, repeats=False)[0]

    def scattered(matrix):  # every entry on the diagonal added into its place
        rows, cols, values = checked_entries(matrix)
        position = jnp.where((cols - rows) == k, rows - start, length)
        return scatter_total(length, position, values)

    if repeats is not None:
        return scattered(matrix) if repeats else searched(matrix)
    # Traced or invalid: the search where columns rise (checked at run time; the scatter
    # compiles faster than the sort of the summed lookup), NaN for an invalid structure.
    canonical = columns_rise(matrix.indices, matrix.indptr)
    found = (
        jax.lax.cond(canonical, searched, scattered, matrix) if matrix.nnz else scattered(matrix)
    )
    return unless_invalid_structure(matrix, found)


@register_for_format("dia", _diagonal)
def _dia_diagonal(matrix, k: int, length: int, repeats) -> jax.Array:
    if k not in matrix.offsets or length == 0:
        return jnp.zeros((length,), matrix.dtype)
    start = max(k, 0)
    return matrix.data[matrix.offsets.index(k), start : start + length]


def trace(matrix, offset: int = 0) -> jax.Array:
    """The sum of diagonal `offset`, as scipy's `trace(offset)` (one per member of a batch)."""
    return jnp.sum(diagonal(matrix, offset), axis=-1)


@over_batch
def total(matrix, axis=None, dtype=None) -> jax.Array:
    """`matrix.sum(axis, dtype)`: a scalar for `axis=None`, else a dense 1-D array (sparse
    arrays' convention): `(n,)` for `axis=0` (column sums), `(m,)` for `axis=1` (row sums).

    In the matrix's dtype, added up in its `accumulation_dtype` (half precision in float32,
    as `jnp.sum`); booleans (comparison results) sum to counts in the default integer, as in
    numpy. A `dtype` given is the result's: a floating or complex one is also the values'
    before they are added up (`A.astype(dtype).sum(axis)`); an integer one counts the
    entries of a boolean matrix (no values are integers here)."""
    dtype = _result_dtype(matrix, dtype, "sum", counts=True)
    if dtype is not None and jnp.issubdtype(dtype, jnp.inexact):
        matrix = matrix.astype(dtype)
    sums = _total(matrix, _axis(axis), checked=may_repeat(matrix) is not None)
    return sums if dtype is None else sums.astype(dtype)


@functools.partial(jax.jit, static_argnames=("axis", "checked"))
def _total(matrix, axis, checked: bool) -> jax.Array:
    sums = _accumulated_total(matrix, axis, checked)
    if matrix.dtype == jnp.bool_:
        return sums
    return sums.astype(matrix.dtype)


@over_batch
def mean(matrix, axis=None, dtype=None) -> jax.Array:
    """`matrix.mean(axis, dtype)`: `sum(axis)` over the number of entries it sums, implicit
    zeros included (as scipy), divided before rounding to the matrix's dtype (as `jnp.mean`:
    a float16 count overflows past 65504); integer and boolean sums divide into the default
    float. A `dtype` given, floating or complex, is the values' dtype before they are added
    up, and the result's."""
    dtype = _result_dtype(matrix, dtype, "mean", counts=False)
    if dtype is not None:
        matrix = matrix.astype(dtype)
    return _mean(matrix, _axis(axis), checked=may_repeat(matrix) is not None)


@functools.partial(jax.jit, static_argnames=("axis", "checked"))
def _mean(matrix, axis, checked: bool) -> jax.Array:
    m, n = matrix.shape
    count = m * n if axis is None else (m if axis == 0 else n)
    sums = _accumulated_total(matrix, axis, checked)
    dtype = matrix.dtype
    if not jnp.issubdtype(sums.dtype, jnp.inexact):
        dtype = jax.dtypes.canonicalize_dtype(np.float64)
        sums = sums.astype(dtype)
    return (sums / np.asarray(count, sums.dtype)).astype(dtype)


def _accumulated_total(matrix, axis, checked: bool) -> jax.Array:
    """`total`, left in the accumulation dtype (booleans as integer counts). `checked`: the
    host checked the structure before `jit` (`may_repeat` is not None)."""
    if axis is not None and matrix.dtype != jnp.bool_:
        return line_sums(matrix.astype(accumulation_dtype(matrix.dtype)), axis)
    rows, cols, values = checked_entries(matrix) if checked else entries(matrix)
    if values.dtype == jnp.bool_:
        values = values.astype(jax.dtypes.canonicalize_dtype(np.int64))
    values = values.astype(accumulation_dtype(values.dtype))
    if axis is None:
        return jnp.sum(values)
    index, size = (cols, matrix.shape[1]) if axis == 0 else (rows, matrix.shape[0])
    return jnp.zeros((size,), values.dtype).at[index].add(values)


def line_sums(matrix, axis: int) -> jax.Array:
    """The column (`axis=0`) or row (`axis=1`) sums of a matrix of numbers, as products
    with ones, in the matrix's dtype: the product kernels read each row or column once,
    where a scatter by entry writes at random (repeats add up, an invalid structure gives
    NaN, as in the products)."""
    m, n = matrix.shape
    if axis == 0:
        return jnp.ones((m,), matrix.dtype) @ matrix
    return matrix @ jnp.ones((n,), matrix.dtype)


@over_batch
def count_nonzero(matrix, axis=None) -> jax.Array:
    """The number of nonzero entries, repeated CSR entries summed first, in the default
    integer dtype (int64 with `jax_enable_x64`, as scipy's count): in the whole matrix
    (`axis=None`), or per column (`axis=0`) or row (`axis=1`)."""
    return _count_nonzero(matrix, _axis(axis), repeats=may_repeat(matrix))


@functools.partial(jax.jit, static_argnames=("axis", "repeats"))
def _count_nonzero(matrix, axis, repeats) -> jax.Array:
    def count(rows, cols, values, valid):
        nonzero = valid & (values != jnp.zeros((), values.dtype))
        # The narrowest dtype that counts them: XLA sums int32 faster than int64 on a CPU.
        dtype = jnp.int32 if values.shape[0] < 2**31 else jnp.int64
        if axis is None:
            counted = jnp.sum(nonzero, dtype=dtype)
        else:
            index, size = (cols, matrix.shape[1]) if axis == 0 else (rows, matrix.shape[0])
            index = jnp.where(nonzero, dropped_outside(index, size), size)
            counted = jax.ops.segment_sum(nonzero.astype(dtype), index, num_segments=size)
        return counted.astype(jax.dtypes.canonicalize_dtype(np.int64))

    counted = reduce_distinct(matrix, count, repeats)
    return unless_invalid_structure(matrix, counted, checked=repeats is not None)


def nonzero(matrix) -> tuple[np.ndarray, np.ndarray]:
    """The positions of the nonzero entries, row-major, on the host."""
    refuse_batch("`nonzero()`", matrix)
    if not is_concrete(*jax.tree_util.tree_leaves(matrix)):
        raise TypeError(
            "`nonzero()` returns as many positions as there are nonzeros, which depends on "
            "values traced (under `jax.jit`, `jax.grad` or `jax.vmap`): call it outside "
            "`jit`, on concrete values."
        )
    rows, cols, values, valid = (np.asarray(x) for x in distinct_entries(matrix))
    # NaN values of an invalid structure would count as nonzero: it fails instead.
    keep = np.asarray(unless_invalid_structure(matrix, valid & (values != 0)))
    rows, cols = rows[keep].astype(np.int64), cols[keep].astype(np.int64)
    order = np.lexsort((cols, rows))
    return rows[order], cols[order]


@over_batch
def extreme(matrix, axis, *, largest: bool, explicit: bool = False) -> jax.Array:
    """`matrix.max(axis)` (`largest`) or `matrix.min(axis)`, implicit zeros included; with
    `explicit`, the stored entries only (every DIA slot inside the matrix), 0 for a line
    or a matrix that stores none (scipy's `explicit=True`)."""
    explicit = _flag(explicit, "explicit")
    return extreme_of(matrix, axis, largest=largest, explicit=explicit, repeats=may_repeat(matrix))


@functools.partial(jax.jit, static_argnames=("axis", "largest", "explicit", "repeats"))
def extreme_of(matrix, axis, *, largest: bool, explicit: bool, repeats) -> jax.Array:
    """`extreme`, one compiled program, with `may_repeat`'s answer for the structure given
    (`repeats`), which a caller already holding it passes on."""
    if jnp.issubdtype(matrix.dtype, jnp.complexfloating):
        raise TypeError("`max` and `min` are not defined for complex values.")
    if matrix.dtype == jnp.bool_:
        numbers = matrix.with_data(matrix.data.astype(jnp.float32))
        extremes = extreme_of(numbers, axis, largest=largest, explicit=explicit, repeats=repeats)
        extremes = extremes.astype(bool)
        # Booleans hold no NaN: an invalid structure fails instead.
        return unless_invalid_structure(matrix, extremes, checked=repeats is not None)
    m, n = matrix.shape
    axis = _axis(axis)
    reduced = {None: m * n, 0: m, 1: n}[axis]
    if reduced == 0:
        raise ValueError(f"`max`/`min` over an empty axis of a matrix of shape {matrix.shape}.")
    if m * n == 0:  # no result either: one per empty row (axis 1) or column (axis 0)
        return jnp.zeros((0,), matrix.dtype)
    neutral = -jnp.inf if largest else jnp.inf
    pick = jnp.maximum if largest else jnp.minimum

    def reduce(rows, cols, values, valid):
        values = jnp.where(valid, values, neutral).astype(matrix.dtype)
        if axis is None:
            stored = (jnp.max if largest else jnp.min)(values, initial=neutral)
            if explicit:
                return jnp.where(jnp.any(valid), stored, 0).astype(matrix.dtype)
            # More positions than stored slots leave a zero (and `m * n` may pass int32).
            has_zero = True if m * n > values.shape[0] else jnp.sum(valid) < m * n
            return jnp.where(has_zero, pick(stored, 0), stored).astype(matrix.dtype)
        index, size, full = (cols, n, m) if axis == 0 else (rows, m, n)
        index = jnp.where(valid, dropped_outside(index, size), size)
        segment = jax.ops.segment_max if largest else jax.ops.segment_min
        stored = segment(values, index, num_segments=size)
        counts = jax.ops.segment_sum(valid.astype(jnp.int32), index, num_segments=size)
        if explicit:
            return jnp.where(counts > 0, stored, 0).astype(matrix.dtype)
        return jnp.where(counts < full, pick(stored, 0), stored).astype(matrix.dtype)

    return reduce_distinct(matrix, reduce, repeats)


def _axis(axis):
    if axis is None:
        return None
    if (
        isinstance(axis, bool)
        or not isinstance(axis, (int, np.integer))
        or axis not in (-2, -1, 0, 1)
    ):
        raise ValueError(f"`axis` must be None, 0 or 1, got {axis!r}.")
    return int(axis) % 2


def _result_dtype(matrix, dtype, name: str, *, counts: bool):
    """`dtype` as a numpy dtype (None stays None), checked: floating or complex, or an
    integer dtype where `counts` allows one for a boolean matrix."""
    if dtype is None:
        return None
    dtype = np.dtype(dtype)
    if jnp.iscomplexobj(matrix.data) and not jnp.issubdtype(dtype, jnp.complexfloating):
        raise TypeError(
            f"`{name}(dtype={dtype})` of complex values would drop their imaginary parts: "
            "take `.real` first, or give a complex `dtype`."
        )
    if jnp.issubdtype(dtype, jnp.inexact):
        return dtype
    if counts and jnp.issubdtype(dtype, jnp.integer) and matrix.dtype == jnp.bool_:
        return dtype
    allowed = "floating or complex" + (", or an integer one for booleans" if counts else "")
    raise TypeError(
        f"`{name}(dtype={dtype})` of {matrix.dtype} values: `dtype` must be {allowed} "
        "(sparse values are never integers)."
    )


def _flag(value, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"`{name}` must be True or False, got {value!r}.")
    return bool(value)


def _static_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"`{name}` must be a Python int, got {value!r}.")
    return int(value)
