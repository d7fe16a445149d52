"""scipy.sparse's elementwise methods: the ufuncs that keep zeros (`A.sin()`, `A.sqrt()`,
...), `maximum`/`minimum`, and the reductions `argmax`/`argmin`, `nanmax`/`nanmin`.

- A ufunc `f` with `f(0) == 0` (`ZERO_PRESERVING_UFUNCS`) gives a matrix of the same
  format and structure holding `jnp.f` of the stored values, of each position's total
  where a CSR position repeats (as scipy). DIA slots outside the matrix are zeroed first,
  so `f` of whatever they held (a NaN for `sqrt(-1)`) never reaches a product or a
  gradient.
- `maximum`/`minimum` follow the rules of the comparisons (`_comparisons.py`): with a
  concrete scalar `s` whose `maximum(0, s) == 0`, the same structure; with a sparse
  matrix, the union of both structures, built as `!=` builds it (DIA for two DIA
  matrices, jit-able; else CSR, which needs concrete indices); otherwise (a dense operand,
  a scalar that fills the matrix, a scalar traced under `jit`) a dense array.
- `argmax`/`argmin` count the implicit zeros as values and return the first position of
  the extreme in row-major order, as `numpy.argmax` of the dense matrix; `explicit=True`
  looks at the stored entries only. `nanmax`/`nanmin` are `max`/`min` that skip NaNs.
  These four are jit-able with the values and the CSR structure traced.

Complex values have no order: `maximum`, `minimum` and the reductions refuse them.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ._base import SparseMatrix, register_for_format
from ._batching import (
    batch_shape,
    batches_structure,
    is_batched,
    map_over_batch,
    over_batch,
    pair_dense_with_batch,
    refuse_batch,
)
from ._comparisons import _dia_rows, _host, _zero_compares_false, compare
from ._coordinates import (
    at_distinct_positions,
    entries,
    lookup,
    may_repeat,
    reduce_distinct,
    unless_invalid_structure,
)
from ._dia_layout import inside_slots
from ._reductions import _axis, extreme

# scipy's ufunc methods (those with `f(0) == 0`), and whether each takes complex values
# (numpy's `floor`, `ceil`, `trunc`, `deg2rad`, `rad2deg` do not).
ZERO_PRESERVING_UFUNCS: dict[str, bool] = {
    "sin": True,
    "tan": True,
    "arcsin": True,
    "arctan": True,
    "sinh": True,
    "tanh": True,
    "arcsinh": True,
    "arctanh": True,
    "rint": True,
    "sign": True,
    "floor": False,
    "ceil": False,
    "trunc": False,
    "expm1": True,
    "log1p": True,
    "deg2rad": False,
    "rad2deg": False,
    "sqrt": True,
}


def with_zero_preserving_ufuncs(cls):
    """A class decorator: one method per entry of `ZERO_PRESERVING_UFUNCS` (`A.sin()`)."""
    for name in ZERO_PRESERVING_UFUNCS:
        setattr(cls, name, _ufunc_method(cls, name))
    return cls


def _ufunc_method(cls, name: str):
    def method(self):
        return apply_ufunc(self, name)

    method.__name__ = name
    method.__qualname__ = f"{cls.__qualname__}.{name}"
    method.__doc__ = (
        f"`jnp.{name}` of every entry, in the same format and structure "
        f"(`{name}(0) == 0`), as scipy's `{name}()`; repeated CSR entries are summed first."
    )
    return method


@over_batch
def apply_ufunc(matrix, name: str):
    """`jnp.<name>` of the matrix's entries, on its structure (see the module docstring)."""
    if jnp.issubdtype(matrix.dtype, jnp.complexfloating) and not ZERO_PRESERVING_UFUNCS[name]:
        raise TypeError(f"`{name}` is not defined for complex values (as in numpy and scipy).")
    return matrix.with_data(_of_values(matrix, getattr(jnp, name)))


def _of_values(matrix, function) -> jax.Array:
    """`function` of the stored values, in `matrix.data`'s layout: of each position's total
    where a CSR position repeats (`at_distinct_positions`), DIA slots outside the matrix
    zeroed first."""
    return at_distinct_positions(matrix.with_data(stored_values(matrix)), function)


@functools.singledispatch
def stored_values(matrix) -> jax.Array:
    """`matrix.data`, with any slot that lies outside the matrix zeroed."""
    return matrix.data


@register_for_format("dia", stored_values)
def _dia_stored_values(matrix) -> jax.Array:
    return inside_slots(matrix.data, matrix.offsets, matrix.shape, range(len(matrix.offsets)))


def maximum(matrix, other):
    """`matrix.maximum(other)`: the elementwise maximum (see the module docstring)."""
    return _elementwise_extreme(matrix, other, "maximum", jnp.maximum)


def minimum(matrix, other):
    """`matrix.minimum(other)`: the elementwise minimum (see the module docstring)."""
    return _elementwise_extreme(matrix, other, "minimum", jnp.minimum)


def _elementwise_extreme(matrix, other, name: str, function):
    if is_batched(matrix) or is_batched(other):
        sparse_pair = isinstance(other, SparseMatrix)
        if sparse_pair and (batches_structure(matrix) or batches_structure(other)):
            refuse_batch(f"`{name}` of two sparse matrices with a structure per member", matrix)
        other = pair_dense_with_batch(other, batch_shape(matrix), name)
        return map_over_batch(
            lambda x, y: _elementwise_extreme(x, y, name, function), matrix, other
        )
    if other is None or isinstance(other, (str, bytes)):
        raise TypeError(f"`{name}` of a sparse matrix and {type(other).__name__}.")
    operand_dtype = other.dtype if isinstance(other, SparseMatrix) else jnp.result_type(other)
    if any(jnp.issubdtype(dtype, jnp.complexfloating) for dtype in (matrix.dtype, operand_dtype)):
        raise TypeError(f"`{name}` is not defined for complex values (they have no order).")
    if isinstance(other, SparseMatrix):
        return _on_union(matrix, other, name, function)
    dense = jnp.asarray(other)
    fills = functools.partial(_fills, getattr(np, name))
    if dense.ndim == 0 and _zero_compares_false(other, dense, fills):
        return matrix.with_data(_of_values(matrix, lambda values: function(values, dense)))
    return function(matrix.todense(), dense)


def _fills(function, zero, scalar) -> bool:
    """Whether `function(0, scalar)` is nonzero, so that the result fills the matrix (in the
    form `_zero_compares_false` takes): numpy's `function`, a Python bool under `jit` too."""
    return function(zero, scalar) != 0


def _on_union(a, b, name: str, function):
    if a.shape != b.shape:
        raise ValueError(f"inconsistent shapes for `{name}`: {a.shape} and {b.shape}.")
    dtype = jnp.promote_types(a.dtype, b.dtype)
    if a.format == b.format == "csr" and a.indices is b.indices and a.indptr is b.indptr:
        # One structure (as `with_data` keeps it): the result on it, under `jit` too.
        wide = a.with_data(a.data.astype(dtype))
        return a.with_data(at_distinct_positions(wide, function, others=(b.data.astype(dtype),)))
    if not _host(a, b):
        raise TypeError(
            f"`{name}` with a CSR operand: the result's structure (the union of both) "
            "depends on index values traced under `jax.jit`; call it outside `jit`, or "
            "on dense arrays (`todense()`). Two matrices sharing one structure (the same "
            "index arrays, as `A.with_data(...)` inside the jitted function keeps them) are "
            "taken under `jit` too."
        )
    union = compare(a, b, "!=")
    return union.with_data(
        function(_values_on(union, a).astype(dtype), _values_on(union, b).astype(dtype))
    )


@functools.singledispatch
def _values_on(union, matrix) -> jax.Array:
    """The values of `matrix` at the stored positions of `union` (a structure that holds
    every stored position of `matrix`), zeros where `matrix` stores none."""
    rows, cols, _ = entries(union)
    return lookup(matrix, rows, cols)[0]


@register_for_format("dia", _values_on)
def _dia_values_on(union, matrix) -> jax.Array:
    return stored_values(union.with_data(_dia_rows(matrix, union.offsets)))


@over_batch
def argextreme(matrix, axis=None, *, largest: bool, explicit: bool = False) -> jax.Array:
    """`matrix.argmax(axis)` (`largest`) or `matrix.argmin(axis)`, as numpy's on the dense
    matrix: a 0-d index into the row-major flattened matrix for `axis=None`, else one
    index per column (`axis=0`) or row (`axis=1`). With `explicit`, only stored entries
    count, and a row or column without any gives 0 (as scipy)."""
    name = "argmax" if largest else "argmin"
    if jnp.issubdtype(matrix.dtype, jnp.complexfloating):
        raise TypeError(f"`{name}` is not defined for complex values.")
    axis = _axis(axis)
    if axis is None and 0 in matrix.shape:
        raise ValueError(f"`{name}` of an empty matrix of shape {matrix.shape}.")
    if axis is not None and matrix.shape[axis] == 0:
        raise ValueError(f"`{name}` along a zero-sized axis of shape {matrix.shape}.")
    if axis is None and explicit and matrix.nnz == 0:
        raise ValueError(f"`{name}` with `explicit=True` of a matrix that stores no entry.")
    if matrix.dtype == jnp.bool_:
        matrix = matrix.astype(jnp.float32)
    # Rows in order with sorted columns: what `_row_extremes` reads its first zeros from.
    rows_of_result = matrix.tocsr().T if axis == 0 else matrix.tocsr()
    return _argextreme(
        rows_of_result,
        whole=axis is None,
        largest=largest,
        explicit=explicit,
        repeats=may_repeat(rows_of_result),
    )


@functools.partial(jax.jit, static_argnames=("whole", "largest", "explicit", "repeats"))
def _argextreme(matrix, *, whole: bool, largest: bool, explicit: bool, repeats):
    best, column, present = reduce_distinct(
        matrix, functools.partial(_row_extremes, matrix.shape, largest, explicit), repeats
    )
    if whole:
        overall = (jnp.max if largest else jnp.min)(
            jnp.where(present, best, _neutral(best, largest))
        )
        row = jnp.argmax(present & _same(best, overall))
        column = row * matrix.shape[1] + column[row]
    # Indices hold no NaN: an invalid structure fails instead.
    return unless_invalid_structure(matrix, column, checked=repeats is not None)


def _row_extremes(shape, largest: bool, explicit: bool, rows, cols, values, valid):
    """For each row: its extreme value, the first column holding it, and whether the row
    has any value that counts (a stored entry, or an implicit zero unless `explicit`).

    The distinct entries come sorted by row, then column: the `k`-th entry of a row sits
    in column `k` for every `k` before the row's first implicit zero, whose column is
    therefore the number of entries that do. Empty rows give column 0, as scipy.
    """
    m, n = shape
    index_dtype = jax.dtypes.canonicalize_dtype(np.int64)
    segment = jax.ops.segment_max if largest else jax.ops.segment_min
    row = jnp.where(valid, rows, m)
    counts = jax.ops.segment_sum(valid.astype(index_dtype), row, num_segments=m)
    stored_best = segment(jnp.where(valid, values, _neutral(values, largest)), row, num_segments=m)
    implicit = jnp.zeros((m,), bool) if explicit else counts < n
    pick = jnp.maximum if largest else jnp.minimum
    best = jnp.where(implicit, pick(stored_best, jnp.zeros((), values.dtype)), stored_best)
    safe_row = jnp.clip(rows, 0, max(m - 1, 0))
    hits = valid & _same(values, best[safe_row])
    first_stored = jax.ops.segment_min(
        jnp.where(hits, cols, n).astype(index_dtype), row, num_segments=m
    )
    starts = jnp.cumsum(counts) - counts
    rank = jnp.arange(values.shape[0], dtype=index_dtype) - starts[safe_row]
    in_place = valid & (cols.astype(index_dtype) == rank)
    first_zero = jax.ops.segment_sum(in_place.astype(index_dtype), row, num_segments=m)
    first_zero = jnp.where(implicit & (best == 0), first_zero, n)
    column = jnp.minimum(jnp.minimum(first_stored, n), first_zero)
    return best, jnp.where(column == n, 0, column), implicit | (counts > 0)


def _neutral(values, largest: bool) -> jax.Array:
    return jnp.asarray(-jnp.inf if largest else jnp.inf, values.dtype)


def _same(values, target) -> jax.Array:
    """`values == target`, with NaN equal to NaN (numpy's `argmax` picks the first NaN)."""
    return (values == target) | (jnp.isnan(values) & jnp.isnan(target))


@over_batch
def nanextreme(matrix, axis=None, *, largest: bool, explicit: bool = False) -> jax.Array:
    """`matrix.nanmax(axis)` (`largest`) or `matrix.nanmin(axis)`: `max`/`min` skipping
    NaNs; NaN where a line holds nothing but NaNs (as numpy, without its warning).
    `explicit`: as `extreme`'s."""
    if not jnp.issubdtype(matrix.dtype, jnp.floating):
        return extreme(matrix, axis, largest=largest, explicit=explicit)
    # Repeats hold 0 beside their position's total, which `extreme` adds back up.
    values = _of_values(matrix, lambda values: values)
    is_nan = jnp.isnan(values)
    skipped = matrix.with_data(jnp.where(is_nan, _neutral(values, largest), values))
    result = extreme(skipped, axis, largest=largest, explicit=explicit)
    # The smallest NaN flag of a line is 1 only where every entry (implicit zeros too unless
    # `explicit`) is NaN.
    flags = matrix.with_data(is_nan.astype(values.dtype))
    only_nans = extreme(flags, axis, largest=False, explicit=explicit)
    return jnp.where(only_nans > 0, jnp.asarray(jnp.nan, result.dtype), result)
