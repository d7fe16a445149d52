"""The CSR structure of a list of positions as a primitive, repeated positions merged: the
native counting sort on a CPU, XLA's sort everywhere else.

`positions_structure(rows, cols, num_rows=m, num_cols=n, nnz=nnz)` returns `(slots,
indices, indptr)` in the index dtype: listed position `p` goes to slot `slots[p]` of the
result, whose distinct positions are ordered by row, then column; `indptr` holds their row
pointers, its last value the number of distinct positions found, which may exceed `nnz`;
`indices` (`(nnz,)`) holds the slots' columns, and `n - 1` in the slots from the last found
on (padding entries at the end of the last row, as `_coordinates.csr_from_entries` places
them). Both implementations give the same arrays for positions inside the matrix. For one
outside it the native sort fails the call with an error naming it; the XLA sort gives
arrays that mean nothing (callers check the positions first).

The native sort (`O(L + m)` plus each row's sort, `kernels/native/csr_positions.cc`) runs on
a CPU, XLA's sort (`O(L log L)`) elsewhere, for `jax.export` and under
`JAXSPARSE_BACKEND=xla`, as `_structure_primitive` chooses. Batches: one leading batch axis
on both arrays; `jax.vmap` at any depth folds into it.
"""

import jax.numpy as jnp
from jax.core import ShapedArray

from ._csr_layout import indptr_from_counts
from ._structure_primitive import structure_primitive
from .kernels import native_csr
from .kernels._batch import over_batch


def positions_structure(rows, cols, *, num_rows: int, num_cols: int, nnz: int):
    """The CSR structure of the positions `(rows[p], cols[p])` of a `num_rows x num_cols`
    matrix, repeats merged.

    **Arguments:**

    - `rows`, `cols`: `(L,)` row and column indices, both int32 or both int64.
    - `num_rows`, `num_cols`: `m` and `n`, static positive ints.
    - `nnz`: the number of slots of the result, a static int.

    **Returns:** `(slots, indices, indptr)`, `(L,)`, `(nnz,)` and `(m + 1,)` in the index
    dtype (see the module docstring).
    """
    return _bind(rows, cols, num_rows=num_rows, num_cols=num_cols, nnz=nnz)


def _abstract_eval(rows, cols, *, num_rows, num_cols, nnz, backend):
    if rows.dtype != cols.dtype or rows.shape != cols.shape:
        raise ValueError(
            f"{_NAME}: {rows.shape=} {rows.dtype} and {cols.shape=} {cols.dtype} must share "
            "a shape and a dtype."
        )
    batch = rows.shape[:-1]
    return [
        ShapedArray(rows.shape, rows.dtype),
        ShapedArray((*batch, nnz), rows.dtype),
        ShapedArray((*batch, num_rows + 1), rows.dtype),
    ]


def sorted_positions(rows, cols, slot_dtype):
    """A non-empty list of positions sorted by row, then column (two sort keys, so no
    `row * n + col` overflows): `(sorted_rows, sorted_cols, starts, slot, inverse)`,
    whether each sorted position differs from the one before, its slot among the distinct
    positions, and listed position `p`'s slot `inverse[p]`, slots in `slot_dtype`."""
    order = jnp.lexsort((cols, rows))
    sorted_rows, sorted_cols = rows[order], cols[order]
    differs = (sorted_rows[1:] != sorted_rows[:-1]) | (sorted_cols[1:] != sorted_cols[:-1])
    starts = jnp.concatenate([jnp.ones((1,), bool), differs])
    slot = jnp.cumsum(starts, dtype=slot_dtype) - 1
    inverse = jnp.zeros(rows.shape, slot_dtype).at[order].set(slot)
    return sorted_rows, sorted_cols, starts, slot, inverse


def _by_sort(rows, cols, *, num_rows, num_cols, nnz):
    """The portable implementation: `sorted_positions`, and the slots' columns and rows."""

    def one(rows, cols):
        dtype, length = rows.dtype, rows.shape[0]
        indices = jnp.full((nnz,), num_cols - 1, dtype)
        if length == 0:
            return jnp.zeros((0,), dtype), indices, jnp.zeros((num_rows + 1,), dtype)
        sorted_rows, sorted_cols, starts, slot, slots = sorted_positions(rows, cols, dtype)
        indices = indices.at[slot].set(sorted_cols, mode="drop")
        counts = jnp.zeros((num_rows,), dtype).at[sorted_rows]
        counts = counts.add(starts.astype(dtype), mode="drop")
        return slots, indices, indptr_from_counts(counts)

    return over_batch(one, (rows, cols), (1, 1))


_NAME = "jaxsparse_csr_positions"
_bind = structure_primitive(
    _NAME, _abstract_eval, native=native_csr.csr_positions_native, portable=_by_sort
)
