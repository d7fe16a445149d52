"""scipy.sparse's elementwise methods: the ufuncs that keep zeros (`A.sin()`, `A.sqrt()`,
...) and `maximum`/`minimum`.

- A ufunc `f` with `f(0) == 0` (`ZERO_PRESERVING_UFUNCS`) gives a matrix of the same
  format and structure holding `jnp.f` of the stored values, after repeated CSR entries
  are summed (as scipy does). DIA slots outside the matrix are zeroed first, so `f` of
  whatever they held (a NaN for `sqrt(-1)`) never reaches a product or a gradient.
- `maximum`/`minimum` follow the rules of the comparisons (`_comparisons.py`): with a
  concrete scalar `s` whose `maximum(0, s) == 0`, the same structure; with a sparse
  matrix, the union of both structures, built as `!=` builds it (DIA for two DIA
  matrices, jit-able; else CSR, which needs concrete indices); otherwise (a dense operand,
  a scalar that fills the matrix, a scalar traced under `jit`) a dense array.

Complex values have no order: `maximum` and `minimum` refuse them.
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
from ._comparisons import _dia_rows, _distinct, _host, _zero_compares_false, compare
from ._coordinates import entries, lookup, may_repeat
from ._dia_layout import inside_slots

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
    summed = _summed(matrix)
    return summed.with_data(getattr(jnp, name)(stored_values(summed)))


def _summed(matrix):
    """`matrix` with each position stored once: itself when that is known on the host."""
    return matrix if may_repeat(matrix) is False else _distinct(matrix)


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
        summed = _summed(matrix)
        return summed.with_data(function(stored_values(summed), dense))
    return function(matrix.todense(), dense)


def _fills(function, zero, scalar) -> bool:
    """Whether `function(0, scalar)` is nonzero, so that the result fills the matrix (in the
    form `_zero_compares_false` takes): numpy's `function`, a Python bool under `jit` too."""
    return function(zero, scalar) != 0


def _on_union(a, b, name: str, function):
    if a.shape != b.shape:
        raise ValueError(f"inconsistent shapes for `{name}`: {a.shape} and {b.shape}.")
    if not _host(a, b):
        raise TypeError(
            f"`{name}` with a CSR operand: the result's structure (the union of both) "
            "depends on index values traced under `jax.jit`; call it outside `jit`, or "
            "on dense arrays (`todense()`)."
        )
    dtype = jnp.promote_types(a.dtype, b.dtype)
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
