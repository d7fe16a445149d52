"""`jaxsparse.linalg.norm`: matrix norms, and vector norms along an axis, with
`scipy.sparse.linalg.norm`'s semantics.

Repeated CSR entries are summed first, as scipy does; the norms that sum along lines
(`ord` 1 and inf, and every vector norm but inf, -inf and 0) are products with ones
(`_reductions.line_sums`), so an invalid structure answers as the products do.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from .._base import SparseMatrix
from .._batching import over_batch
from .._coordinates import at_distinct_positions, may_repeat, reduce_distinct
from .._reductions import count_nonzero, extreme_of, line_sums
from ..kernels._precision import accumulation_dtype
from ._spectral_norm import spectral_norm

MATRIX_ORDERS = (None, "fro", 1, -1, 2, np.inf, -np.inf)


def norm(matrix, ord=None, axis=None) -> jax.Array:
    """The matrix norm of `matrix`, or the vector norms of its columns or rows, as
    `scipy.sparse.linalg.norm`.

    **Arguments:**

    - `matrix`: a `DIAMatrix` or `CSRMatrix` (boolean values count as 0 and 1).
    - `ord`: for a matrix norm, `None` or `"fro"` (Frobenius), `1` / `-1` (largest /
      smallest absolute column sum), `jnp.inf` / `-jnp.inf` (largest / smallest absolute
      row sum), `2` (the largest singular value, by Lanczos on products with `A` and
      `A^H`: `_spectral_norm`; -2 and `"nuc"` are not supported, as in scipy).
      For vector norms, `None` or 2 (Euclidean), `jnp.inf` / `-jnp.inf` (largest /
      smallest magnitude, implicit zeros included), 0 (the number of nonzeros), or any
      other number `p`: `(sum |a|^p)^(1/p)` over the stored entries (a DIA slot holding 0
      is none, as scipy's conversions drop them).
    - `axis`: `None` or a pair of distinct axes, `(0, 1)` or `(1, 0)`, for a matrix norm
      (`(1, 0)` is the norm of the transpose: `ord` 1 the largest row sum); an int, 0 or 1,
      for the vector norms of the columns (0) or rows (1).

    **Returns:** a real scalar for a matrix norm; for vector norms a dense `(n,)` (axis 0)
    or `(m,)` (axis 1) array, real, or counts in the default integer dtype for `ord=0`.
    Jit-able, differentiable in the values.
    """
    if not isinstance(matrix, SparseMatrix):
        raise TypeError(f"`matrix` must be a jaxsparse matrix, got {type(matrix).__name__}.")
    if matrix.dtype == jnp.bool_:
        matrix = matrix.astype(jnp.float32)
    axes = _axes(axis)
    if len(axes) == 1:
        if not isinstance(ord, (int, float, np.number, type(None))):
            raise ValueError(f"`ord` of vector norms must be None or a number, got {ord!r}.")
        ord = 2.0 if ord is None else float(ord)
        if ord in (np.inf, -np.inf) and matrix.shape[axes[0]] == 0:
            raise ValueError(
                f"norm: `ord`={ord} picks the largest or smallest magnitude along axis "
                f"{axes[0]}, which is empty for shape={matrix.shape}."
            )
        return _vector_norms(matrix, ord=ord, axis=axes[0])
    if ord not in MATRIX_ORDERS:
        raise ValueError(f"`ord` must be None, 'fro', 1, -1, 2, inf or -inf, got {ord!r}.")
    if axes == (1, 0):  # the transpose's norm: column sums become row sums
        ord = {1: np.inf, -1: -np.inf, np.inf: 1, -np.inf: -1}.get(ord, ord)
    return _matrix_norm(matrix, ord=ord)


def _axes(axis) -> tuple[int, ...]:
    """`axis` as a tuple of one axis or two distinct ones, each 0 or 1."""
    axes = (0, 1) if axis is None else axis if isinstance(axis, tuple) else (axis,)
    if not 1 <= len(axes) <= 2 or any(
        isinstance(a, bool) or not isinstance(a, (int, np.integer)) or not -2 <= a < 2 for a in axes
    ):
        raise ValueError(f"`axis` must be None, 0, 1, (0, 1) or (1, 0), got {axis!r}.")
    axes = tuple(int(a) % 2 for a in axes)
    if len(set(axes)) != len(axes):
        raise ValueError(f"`axis` holds one axis twice: {axis!r}.")
    return axes


@over_batch
def _matrix_norm(matrix, ord=None) -> jax.Array:
    if ord == 2:
        return spectral_norm(matrix).astype(jnp.finfo(matrix.dtype).dtype)
    return _matrix_norm_of(matrix, ord=ord, repeats=may_repeat(matrix))


@functools.partial(jax.jit, static_argnames=("ord", "repeats"))
def _matrix_norm_of(matrix, ord, repeats) -> jax.Array:
    wide_dtype = accumulation_dtype(matrix.dtype)
    real_dtype = jnp.finfo(matrix.dtype).dtype
    if ord is None or ord == "fro":

        def reduce(rows, cols, values, valid):
            squares = _squared_magnitudes(values.astype(wide_dtype))
            return _root(jnp.sum(squares), 2).astype(real_dtype)

        return reduce_distinct(matrix, reduce, repeats)
    return _extreme_line_sum(matrix, ord, repeats).astype(real_dtype)


def _squared_magnitudes(values) -> jax.Array:
    """`|v|^2` as `re^2 + im^2`: smooth at 0, where the derivative of complex `abs` is 0 and
    `abs(v) * abs(v)` would lose the curvature (second derivatives) there."""
    if jnp.iscomplexobj(values):
        return jnp.real(values) ** 2 + jnp.imag(values) ** 2
    return values * values


def _extreme_line_sum(matrix, ord, repeats) -> jax.Array:
    """The largest (`ord` 1, inf) or smallest (-1, -inf) sum of the absolute values of the
    matrix's entries (repeats summed first) over columns (1, -1) or rows (inf, -inf)."""
    axis, size = (0, matrix.shape[1]) if ord in (1, -1) else (1, matrix.shape[0])
    if size == 0:
        # The largest or smallest of no sums is no number: scipy and numpy raise too.
        what = "columns" if ord in (1, -1) else "rows"
        raise ValueError(
            f"norm: `ord`={ord} picks among sums over {what}, an empty axis for "
            f"shape={matrix.shape}."
        )
    sums = line_sums(_magnitudes(matrix, 1.0, repeats), axis)
    return jnp.max(sums) if ord > 0 else jnp.min(sums)


@over_batch
def _vector_norms(matrix, ord: float, axis: int) -> jax.Array:
    if ord == 0:
        return count_nonzero(matrix, axis)
    if ord in (np.inf, -np.inf):
        return _extreme_magnitudes(matrix, axis, largest=ord > 0, repeats=may_repeat(matrix))
    return _power_sums_root(matrix, ord, axis, repeats=may_repeat(matrix))


@functools.partial(jax.jit, static_argnames=("axis", "largest", "repeats"))
def _extreme_magnitudes(matrix, axis: int, largest: bool, repeats) -> jax.Array:
    """The largest (smallest) magnitude of each column (`axis` 0) or row (1), implicit
    zeros included; one program, the structure's facts (`repeats`) found on the host."""
    magnitudes = _magnitudes(matrix, 1.0, repeats)
    extremes = extreme_of(magnitudes, axis, largest=largest, explicit=False, repeats=repeats)
    return extremes.astype(jnp.finfo(matrix.dtype).dtype)


@functools.partial(jax.jit, static_argnames=("ord", "axis", "repeats"))
def _power_sums_root(matrix, ord: float, axis: int, repeats) -> jax.Array:
    """`(sum over a line of |a|^ord)^(1 / ord)` for each column (`axis` 0) or row (1)."""
    sums = line_sums(_magnitudes(matrix, ord, repeats), axis)
    roots = sums if ord == 1 else _root(sums, ord)
    return roots.astype(jnp.finfo(matrix.dtype).dtype)


def _root(sums, ord: float) -> jax.Array:
    """`sums^(1 / ord)` of non-negative sums; at a sum of 0 the value (0, or inf for a
    negative `ord`) with derivative 0, where the root's own is infinite (an empty line's
    norm would get NaN tangents)."""
    empty = sums == 0  # not NaN: an invalid structure's NaN goes through
    safe = jnp.where(empty, jnp.ones((), sums.dtype), sums)
    roots = jnp.sqrt(safe) if ord == 2 else safe ** (1 / ord)
    return jnp.where(empty, jnp.asarray(0 if ord > 0 else jnp.inf, sums.dtype), roots)


def _magnitudes(matrix, power: float, repeats):
    """The matrix of `|a|^power` at each position, in the matrix's real accumulation dtype
    (repeats summed before the magnitude is taken)."""
    wide_dtype = accumulation_dtype(matrix.dtype)

    def magnitude(values):
        values = values.astype(wide_dtype)
        if power == 2:
            return _squared_magnitudes(values)
        if power > 0:
            return jnp.abs(values) if power == 1 else jnp.abs(values) ** power
        if matrix.format != "dia":
            return jnp.abs(values) ** power
        # A DIA slot holding 0 is no entry (scipy's conversions drop them): no `0^power`.
        empty = values == 0
        return jnp.where(empty, 0, jnp.abs(jnp.where(empty, 1, values)) ** power)

    return matrix.with_data(at_distinct_positions(matrix, magnitude, repeats))
