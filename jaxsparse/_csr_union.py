"""The structure of the sum of two CSR matrices of one shape as a primitive, for structures
whose columns strictly increase within rows: the native row merge on a CPU, a search of
each entry's column in the other matrix's row everywhere else.

`union_structure(a_indices, a_indptr, b_indices, b_indptr, num_cols=n, nnz=nnz)` returns
`(a_source, b_source, indices, indptr)` in the index dtype, each of the first three
`(nnz,)`: slot `s` of the sum holds entry `a_source[s]` of `A` and entry `b_source[s]` of
`B`, `nnz_a` and `nnz_b` (one past the last entry) where it holds none of that matrix, so
the sum's values are two gathers that fill the sentinel with zero and an add
(`_csr_sum`); `indices` holds the slots' columns. `indptr` holds the sum's row pointers,
its last value the number of distinct positions found, which may exceed `nnz` (the slots
past `nnz` are then left out). The slots from the last found on hold neither matrix's
entry and column `n - 1` (padding entries at the end of the last row, as
`_coordinates.csr_from_entries` places them). Both matrices store at least one entry.
Both implementations give the same arrays for any valid structure. On an invalid one the
native merge fails the call with an error naming the problem, as the native products do;
the search gives sources that mean nothing, though always in `[0, nnz_a]` and
`[0, nnz_b]` (the values the caller gathers are NaN there: `_coordinates.stored_values`).

The native merge (`O(m + nnz_a + nnz_b)`, `kernels/native/csr_union.cc`) runs on a CPU,
the search elsewhere, for `jax.export` and under `JAXSPARSE_BACKEND=xla`, as
`_structure_primitive` chooses. Batches: one leading batch axis on all four index arrays;
`jax.vmap` at any depth folds into it.
"""

import jax.numpy as jnp
from jax.core import ShapedArray

from ._coordinates import search_rows
from ._csr_layout import indptr_from_counts, row_ids
from ._structure_primitive import structure_primitive
from .kernels import native_csr
from .kernels._batch import over_batch


def union_structure(a_indices, a_indptr, b_indices, b_indptr, *, num_cols: int, nnz: int):
    """The CSR structure of `A + B` for `A` and `B` of one shape with `num_cols` columns,
    whose columns strictly increase within rows.

    **Arguments:**

    - `a_indices`, `b_indices`: `(nnz_a,)` and `(nnz_b,)` column indices, int32 or int64.
    - `a_indptr`, `b_indptr`: `(m + 1,)` row pointers; all four arrays of one dtype.
    - `num_cols`: `n`, a static positive int.
    - `nnz`: the number of entries of the result, a static int.

    **Returns:** `(a_source, b_source, indices, indptr)`, `(nnz,)` each but `indptr`'s
    `(m + 1,)`, in the index dtype (see the module docstring).
    """
    return _bind(a_indices, a_indptr, b_indices, b_indptr, num_cols=num_cols, nnz=nnz)


def _abstract_eval(a_indices, a_indptr, b_indices, b_indptr, *, num_cols, nnz, backend):
    arrays = (a_indices, a_indptr, b_indices, b_indptr)
    batch = a_indices.shape[:-1]
    if (
        len({a.dtype for a in arrays}) > 1
        or any(a.shape[:-1] != batch for a in arrays)
        or a_indptr.shape != b_indptr.shape
    ):
        raise ValueError(
            f"{_NAME}: the index arrays {[(a.shape, str(a.dtype)) for a in arrays]} "
            "must share a dtype, batch axes, and the index pointers' length."
        )
    dtype = a_indices.dtype
    slots = ShapedArray((*batch, nnz), dtype)
    return [slots, slots, slots, ShapedArray(a_indptr.shape, dtype)]


def _union_by_search(a_indices, a_indptr, b_indices, b_indptr, *, num_cols, nnz):
    """The portable implementation: an entry's slot is its row's start plus the distinct
    columns of both before its own, found by searching each entry's column in the other
    matrix's row; each slot's sources are then the entries placed there."""

    def one(a_indices, a_indptr, b_indices, b_indptr):
        a_nnz, b_nnz = a_indices.shape[0], b_indices.shape[0]
        a_rows, b_rows = row_ids(a_indptr, a_nnz), row_ids(b_indptr, b_nnz)
        in_b, shared = search_rows(b_indices, b_indptr, a_rows, a_indices)
        in_a, _ = search_rows(a_indices, a_indptr, b_rows, b_indices)
        # `shared_before[p]`: entries of `a` before entry `p` whose column `b` holds too.
        shared_before = indptr_from_counts(shared.astype(a_indptr.dtype))
        common = jnp.diff(shared_before[a_indptr])
        starts = indptr_from_counts(jnp.diff(a_indptr) + jnp.diff(b_indptr) - common)
        a_position = jnp.arange(a_nnz, dtype=a_indptr.dtype)
        b_position = jnp.arange(b_nnz, dtype=a_indptr.dtype)
        a_slots = starts[a_rows] + (a_position - a_indptr[a_rows]) + (in_b - b_indptr[a_rows])
        a_slots -= shared_before[a_position] - shared_before[a_indptr[a_rows]]
        b_slots = starts[b_rows] + (b_position - b_indptr[b_rows]) + (in_a - a_indptr[b_rows])
        b_slots -= shared_before[in_a] - shared_before[a_indptr[b_rows]]
        a_source = jnp.full((nnz,), a_nnz, a_indptr.dtype).at[a_slots].set(a_position, mode="drop")
        b_source = jnp.full((nnz,), b_nnz, a_indptr.dtype).at[b_slots].set(b_position, mode="drop")
        slots = jnp.concatenate([a_slots, b_slots])
        indices = jnp.full((nnz,), num_cols - 1, a_indices.dtype)
        indices = indices.at[slots].set(jnp.concatenate([a_indices, b_indices]), mode="drop")
        return a_source, b_source, indices, starts

    return over_batch(one, (a_indices, a_indptr, b_indices, b_indptr), (1, 1, 1, 1))


_NAME = "jaxsparse_csr_union"
_bind = structure_primitive(
    _NAME, _abstract_eval, native=native_csr.csr_union_native, portable=_union_by_search
)
