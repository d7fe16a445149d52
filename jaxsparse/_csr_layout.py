"""Index arithmetic of the CSR layout: row ids, row pointers from counts, the transpose.

Row `i` holds the entries `p` in `[indptr[i], indptr[i + 1])`. Every function takes the
index arrays as (possibly traced) JAX arrays and works under `jax.jit`. Containers and
kernels both build on this module; it imports nothing else from jaxsparse.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax


@functools.partial(jax.jit, static_argnums=1)
def row_ids(indptr, nnz: int) -> jax.Array:
    """The row of every stored entry, `(nnz,)`, in `indptr`'s dtype; O(m + nnz).

    Jitted so that an eager call (`CSRMatrix.todense()` outside `jit`) compiles the scan
    once instead of dispatching its many small operations one by one.

    Marks each row start with a count and takes a running sum, so empty rows (repeated
    `indptr` values) are skipped correctly. The running sum is `lax.associative_scan`
    rather than `jnp.cumsum`: on CPU XLA lowers `cumsum` through a `reduce_window` that
    measured 1.4-1.6x slower at 10^7 entries.
    """
    starts = dropped_outside(indptr[1:-1], nnz)
    marks = jnp.zeros((nnz,), indptr.dtype).at[starts].add(1, mode="drop")
    if nnz == 0:
        return marks
    return lax.associative_scan(jnp.add, marks)


def dropped_outside(positions, size: int) -> jax.Array:
    """`positions` with those outside `[0, size)` replaced by `size`, which a gather with
    `mode="fill"` fills and a scatter with `mode="drop"` drops.

    Compared in the positions' own dtype before indexing: JAX casts int64 indices to int32
    when the axis fits, so that 2**32 + 1 would index 1, and it wraps negative ones.
    """
    return jnp.where((positions >= 0) & (positions < size), positions, size)


def structure_faults(indices, indptr, num_cols: int) -> list[tuple[jax.Array, str]]:
    """What can be wrong with one matrix's `(nnz,)` column indices and `(m + 1,)` index
    pointer, runnable under `jit`: `(whether it is, what it is)` for each fault."""
    return [
        *bounds_faults(indptr, indices.shape[-1]),
        (
            jnp.any((indices < 0) | (indices >= num_cols)),
            f"column index out of range: indices must lie in [0, {num_cols})",
        ),
    ]


def structure_valid(indices, indptr, num_cols: int) -> jax.Array:
    """Whether no fault of `structure_faults` holds: a boolean scalar, under `jit` too."""
    return _none_holds(structure_faults(indices, indptr, num_cols))


def bounds_valid(indptr, nnz: int) -> jax.Array:
    """Whether no fault of `bounds_faults` holds: a boolean scalar, under `jit` too."""
    return _none_holds(bounds_faults(indptr, nnz))


def _none_holds(faults) -> jax.Array:
    return ~jnp.any(jnp.stack([fault for fault, _ in faults]))


def bounds_faults(indptr, nnz: int) -> list[tuple[jax.Array, str]]:
    """The faults of `structure_faults` in the `(m + 1,)` index pointer alone, `O(m)`."""
    return [
        (indptr[0] != 0, "index pointer should start with 0"),
        (jnp.any(indptr[1:] < indptr[:-1]), "indptr must be a non-decreasing sequence"),
        (indptr[-1] != nnz, f"last value of index pointer should be nnz={nnz}"),
    ]


def indptr_from_counts(counts) -> jax.Array:
    """Row pointers `(len(counts) + 1,)` from entries per row, in `counts`' dtype."""
    return jnp.concatenate([jnp.zeros((1,), counts.dtype), jnp.cumsum(counts, dtype=counts.dtype)])


# `indptr_t` throughout for the transpose of an invalid structure: every check of an index
# pointer sees it (it does not start at 0, and every row's bounds lie outside `[0, nnz]`),
# so products on the transpose answer as on the invalid matrix.
INVALID_TRANSPOSE_INDPTR = -1


def transposed_structure(indices, indptr, num_cols: int):
    """The CSR structure of `A^T` for `A` with `num_cols` columns.

    A stable sort of the column indices, so the entries of a new row keep their old row
    order: XLA's sort, `O(nnz log nnz)`, the portable path. `CSRMatrix.T` takes it through
    `_csr_transpose.transposed_structure`, which runs a native counting sort on a CPU.

    **Returns:** `(order, indices_t, indptr_t)`: entry `q` of `A^T` is entry `order[q]` of
    `A`, at column `indices_t[q]` (its old row); `indptr_t` has `num_cols + 1` entries,
    all `INVALID_TRANSPOSE_INDPTR` if `indices` and `indptr` are not a valid structure.
    """
    nnz = indices.shape[0]
    order = jnp.argsort(indices, stable=True)
    counts = jnp.zeros((num_cols,), indptr.dtype).at[dropped_outside(indices, num_cols)]
    indptr_t = indptr_from_counts(counts.add(1, mode="drop"))
    valid = structure_valid(indices, indptr, num_cols)
    return order, row_ids(indptr, nnz)[order], jnp.where(valid, indptr_t, INVALID_TRANSPOSE_INDPTR)
