"""Elementwise comparisons (`==`, `!=`, `<`, `<=`, `>`, `>=`), as scipy.sparse's.

What comes back depends on whether the result is sparse, that is, whether comparing two
zeros gives `False`:

- Sparse with a sparse operand: `!=`, `<`, `>` give a sparse boolean matrix on the union of
  both structures (DIA for two DIA matrices, jit-able; else CSR, which needs concrete
  indices: outside `jit`). `==`, `<=`, `>=` are true wherever both are zero, so they give
  a dense boolean array (scipy returns a filled sparse matrix and warns).
- Sparse with a concrete scalar `s` (a Python or numpy scalar, under `jit` too): a sparse
  boolean matrix on the stored structure when `0 op s` is false (`A != 0`, `A > 0`,
  `A == 2`), else the dense boolean array; with a traced scalar (a JAX array under `jit`,
  where `0 op s` is unknown) the dense boolean array.
- Sparse with a dense array: the dense boolean array, as scipy. A batched matrix pairs a
  dense operand of shape `(*batch, m, n)` with its members (`docs/batching.md`).

Repeated CSR entries are summed before they are compared. Sparse boolean results hold
`bool` values: `sum()` counts them, `todense()` gives a boolean array, and products promote
them to the other operand's dtype.
"""

import functools
import numbers
import operator

import jax
import jax.numpy as jnp
import numpy as np

from ._base import SparseMatrix, check_broadcasts, is_concrete, register_for_format
from ._batching import (
    batch_shape,
    batches_structure,
    is_batched,
    map_over_batch,
    pair_dense_with_batch,
    refuse_batch,
)
from ._coordinates import entries, entries_to_csr, lookup, unless_invalid_structure

OPERATORS = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
# `other op self` is `self flipped[op] other`.
FLIPPED = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def compare(matrix, other, op: str):
    """`matrix op other` elementwise (see the module docstring)."""
    if is_batched(matrix) or is_batched(other):
        # A sparse result's structure is the union of both, which must be known on the host.
        if isinstance(other, SparseMatrix) and not OPERATORS[op](0, 0):
            if batches_structure(matrix) or batches_structure(other):
                refuse_batch(
                    f"sparse `{op}` sparse with a structure per member (batched CSR indices)",
                    matrix,
                    other,
                )
        other = pair_dense_with_batch(other, batch_shape(matrix), op)
        return map_over_batch(lambda x, y: compare(x, y, op), matrix, other)
    function = OPERATORS[op]
    if other is None or isinstance(other, (str, bytes)):
        raise TypeError(
            f"`{op}` between a sparse matrix and {type(other).__name__} is not supported."
        )
    if jnp.issubdtype(matrix.dtype, jnp.complexfloating) and op not in ("==", "!="):
        raise TypeError(f"`{op}` is not defined for complex values.")
    if isinstance(other, SparseMatrix):
        return _compare_sparse(matrix, other, op, function)
    try:
        dense = jnp.asarray(other)
    except TypeError:
        raise TypeError(
            f"`{op}` between a sparse matrix and {type(other).__name__} is not supported."
        ) from None
    # Booleans hold no NaN: where the structure is invalid, the comparison fails instead.
    if dense.ndim == 0 and _zero_compares_false(other, dense, function):
        summed = _distinct(matrix)
        compared = function(summed.data, dense).astype(bool)
        return summed.with_data(unless_invalid_structure(matrix, compared))
    check_broadcasts(op, matrix.shape, dense.shape)
    return unless_invalid_structure(matrix, function(matrix.todense(), dense))


def _zero_compares_false(other, dense, function) -> bool:
    """Whether `0 op other` is known to be false, so that the result is sparse. Python and
    numpy scalars are known under `jit` too, where `jnp.asarray` has made `dense` a tracer."""
    if isinstance(other, (numbers.Number, np.generic, np.ndarray)):
        return not function(0, np.asarray(other).item())
    return is_concrete(dense) and not function(0, dense.item())


@functools.singledispatch
def _distinct(matrix):
    """`matrix` with each position stored once (repeated CSR entries summed)."""
    return matrix.sum_duplicates(nnz=None if is_concrete(matrix.indices) else matrix.nnz)


@register_for_format("dia", _distinct)
def _dia_distinct(matrix):
    return matrix


def _compare_sparse(a, b, op: str, function):
    if a.shape != b.shape:
        raise ValueError(f"inconsistent shapes for `{op}`: {a.shape} and {b.shape}.")
    if function(0, 0):
        return _unless_either_invalid(a, b, function(a.todense(), b.todense()))
    if type(a) is type(b):
        return _compare_same_format(a, b, op, function)
    return _compare_entries(a, b, op, function)


@functools.singledispatch
def _compare_same_format(a, b, op: str, function):
    return _compare_entries(a, b, op, function)


@register_for_format("dia", _compare_same_format)
def _compare_dia(a, b, op: str, function):
    offsets = tuple(sorted(set(a.offsets) | set(b.offsets)))
    return type(a)(
        function(_dia_rows(a, offsets), _dia_rows(b, offsets)).astype(bool), offsets, a.shape
    )


def _compare_entries(a, b, op: str, function):
    """The comparison on the union of both structures, as CSR."""
    a_rows, a_cols, a_values = entries(a)
    b_rows, b_cols, _ = entries(b)
    rows = np.concatenate([np.asarray(a_rows), np.asarray(b_rows)]) if _host(a, b) else None
    if rows is None:
        raise TypeError(
            f"sparse `{op}` with a CSR operand: the result's structure (the union of both) "
            "depends on index values traced under `jax.jit`; compare outside `jit`, or "
            "compare dense arrays (`todense()`)."
        )
    cols = np.concatenate([np.asarray(a_cols), np.asarray(b_cols)])
    union = entries_to_csr(
        rows,
        cols,
        jnp.zeros(rows.shape, a_values.dtype),
        a.shape,
        nnz=None,
        operation=f"sparse `{op}`",
    )
    union_rows, union_cols, _ = entries(union)
    a_at, _ = lookup(a, union_rows, union_cols)
    b_at, _ = lookup(b, union_rows, union_cols)
    return union.with_data(_unless_either_invalid(a, b, function(a_at, b_at).astype(bool)))


def _unless_either_invalid(a, b, compared) -> jax.Array:
    """`compared`, failing where either operand's structure is invalid (booleans hold no
    NaN)."""
    return unless_invalid_structure(a, unless_invalid_structure(b, compared))


def _host(a, b) -> bool:
    return all(
        isinstance(positions, np.ndarray) for matrix in (a, b) for positions in entries(matrix)[:2]
    )


def _dia_rows(matrix, offsets) -> jax.Array:
    """`matrix.data` laid out on `offsets` (a superset of its own), zeros elsewhere."""
    rows = [
        matrix.data[matrix.offsets.index(off)]
        if off in matrix.offsets
        else jnp.zeros((matrix.shape[1],), matrix.dtype)
        for off in offsets
    ]
    return jnp.stack(rows) if rows else jnp.zeros((0, matrix.shape[1]), matrix.dtype)
