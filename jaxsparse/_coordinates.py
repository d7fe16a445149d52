"""Any matrix as a list of entries `(row, column, value)`, and CSR matrices built from one.

Operations whose result has a new structure (sums of CSR matrices, products, conversions)
list their operands' entries here and hand the list to `csr_from_entries`, which sums
repeated positions and sorts them into a canonical CSR matrix. Where the number of distinct
positions depends on index values, it is counted on the host when they are concrete; under
`jax.jit` the caller passes it as a static `nnz`. Every function takes JAX arrays and works
under `jit` once the sizes are known; the larger ones are jitted themselves, so that an
eager call compiles one program instead of dispatching many small operations.
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._base import format_class, index_dtype_for, is_concrete
from ._csr_layout import indptr_from_counts, row_ids
from ._dia_layout import stored_positions


def entries(matrix):
    """The stored entries inside `matrix`: `(rows, cols, values)`, each `(nnz,)`.

    DIA: every slot inside the matrix, diagonal by diagonal. CSR: every stored entry in
    storage order, repeats included. Positions are numpy arrays wherever the structure is
    known on the host (DIA always, CSR with concrete index arrays, even inside `jit`), so
    that structure computations on them stay on the host.
    """
    if matrix.format == "dia":
        diagonals, rows, cols = stored_positions(matrix.offsets, matrix.shape)
        return rows, cols, matrix.data[diagonals, cols]
    if is_concrete(matrix.indices, matrix.indptr):
        indptr = np.asarray(matrix.indptr)
        rows = np.repeat(np.arange(matrix.shape[0], dtype=indptr.dtype), np.diff(indptr))
        return rows, np.asarray(matrix.indices), matrix.data
    return row_ids(matrix.indptr, matrix.nnz), matrix.indices, matrix.data


def linear_keys(rows, cols, shape: tuple[int, int]) -> jax.Array:
    """`row * n + col`, one sortable integer per position (int64 where int32 overflows);
    numpy for numpy positions."""
    m, n = shape
    if m * n < np.iinfo(np.int32).max:
        dtype = jnp.int32
    elif jax.config.read("jax_enable_x64"):
        dtype = jnp.int64
    else:
        raise ValueError(
            f"a matrix of shape {shape} has more positions than int32 counts; enable 64-bit "
            "types (`jax.config.update('jax_enable_x64', True)`)."
        )
    if isinstance(rows, np.ndarray) and isinstance(cols, np.ndarray):
        return rows.astype(dtype) * n + cols.astype(dtype)
    return jnp.asarray(rows).astype(dtype) * n + jnp.asarray(cols).astype(dtype)


def count_positions(keys) -> jax.Array:
    """How many distinct values `keys` holds (a traced scalar under `jit`)."""
    if keys.shape[0] == 0:
        return jnp.zeros((), jnp.int32)
    ordered = jnp.sort(keys)
    return 1 + jnp.sum(ordered[1:] != ordered[:-1], dtype=jnp.int32)


def static_nnz(keys, nnz: int | None, operation: str) -> int:
    """The number of distinct positions: `nnz` if given, else counted on the host.

    Raises a TypeError when it would depend on traced index values (under `jit`).
    """
    if nnz is not None:
        if isinstance(nnz, bool) or not isinstance(nnz, (int, np.integer)) or nnz < 0:
            raise ValueError(f"`nnz` must be a non-negative Python int, got {nnz!r}.")
        return int(nnz)
    if not is_concrete(keys):
        raise TypeError(
            f"{operation}: the result's structure depends on the operands' index values, "
            "which are traced under `jax.jit`. Pass a static `nnz` (the number of stored "
            "entries of the result, e.g. computed once outside `jit`), or compute it "
            "outside `jit`."
        )
    return int(np.unique(np.asarray(keys)).size)


@functools.partial(jax.jit, static_argnames=("shape", "nnz"))
def csr_from_entries(rows, cols, values, shape: tuple[int, int], nnz: int):
    """The CSR matrix of the listed entries, repeats summed, rows and columns sorted.

    With fewer than `nnz` distinct positions, the result is padded with explicit zeros at
    the last position `(m - 1, n - 1)`; with more, using the result raises at run time
    (`eqx.error_if`), so a wrong `nnz` never gives a wrong matrix silently.
    """
    m, n = shape
    keys = linear_keys(rows, cols, shape)
    index_dtype = index_dtype_for(shape, nnz)
    if nnz == 0 or m * n == 0:
        empty = eqx.error_if(
            jnp.zeros((0,), values.dtype),
            count_positions(keys) > 0,
            "`nnz`=0 is smaller than the number of entries of the result",
        )
        return format_class("csr")(
            empty, jnp.zeros((0,), index_dtype), jnp.zeros((m + 1,), index_dtype), shape
        )
    unique, inverse = jnp.unique(
        keys, return_inverse=True, size=nnz, fill_value=jnp.asarray(m * n - 1, keys.dtype)
    )
    summed = jax.ops.segment_sum(values, inverse.reshape(-1), num_segments=nnz)
    found = count_positions(keys)
    summed = eqx.error_if(
        summed,
        found > nnz,
        f"`nnz`={nnz} is smaller than the number of entries of the result",
    )
    result_rows = (unique // n).astype(index_dtype)
    counts = jnp.zeros((m,), index_dtype).at[result_rows].add(1)
    return format_class("csr")(
        summed, (unique % n).astype(index_dtype), indptr_from_counts(counts), shape
    )


def check_nnz_on_host(keys, nnz: int) -> None:
    """A ValueError naming both counts when concrete `keys` hold more positions than `nnz`."""
    if is_concrete(keys):
        found = int(np.unique(np.asarray(keys)).size)
        if found > nnz:
            raise ValueError(f"`nnz`={nnz} is smaller than the result's {found} entries.")


def entries_to_csr(rows, cols, values, shape, *, nnz: int | None, operation: str):
    """`csr_from_entries` with `nnz` counted on the host when it is not given."""
    keys = linear_keys(rows, cols, shape)
    nnz = static_nnz(keys, nnz, operation)
    check_nnz_on_host(keys, nnz)
    return csr_from_entries(rows, cols, values, shape, nnz)


@jax.jit
def lookup(matrix, rows, cols):
    """`matrix[rows[p], cols[p]]` for every `p` (repeats summed), and whether the position
    is stored: `(values, stored)`, jit-able."""
    rows, cols = jnp.asarray(rows), jnp.asarray(cols)
    if matrix.format == "dia":
        order = np.argsort(np.asarray(matrix.offsets, np.int64), kind="stable")
        sorted_offsets = np.asarray(matrix.offsets, np.int64)[order]
        if len(order) == 0:
            return jnp.zeros(rows.shape, matrix.dtype), jnp.zeros(rows.shape, bool)
        wanted = cols.astype(np.int64) - rows.astype(np.int64)
        position = jnp.clip(jnp.searchsorted(sorted_offsets, wanted), 0, len(order) - 1)
        stored = jnp.asarray(sorted_offsets)[position] == wanted
        values = matrix.data[jnp.asarray(order)[position], cols]
        return jnp.where(stored, values, 0), stored
    m, n = matrix.shape
    if matrix.nnz == 0:
        return jnp.zeros(rows.shape, matrix.dtype), jnp.zeros(rows.shape, bool)
    stored_rows, stored_cols, stored_values = entries(matrix)
    keys = linear_keys(stored_rows, stored_cols, (m, n))
    # `m * n` fits the keys' dtype (`linear_keys` picks one that holds it) and matches no
    # position, so the padding of `unique` is never found.
    unique, inverse = jnp.unique(
        keys, return_inverse=True, size=matrix.nnz, fill_value=jnp.asarray(m * n, keys.dtype)
    )
    summed = jax.ops.segment_sum(stored_values, inverse.reshape(-1), num_segments=matrix.nnz)
    wanted = linear_keys(rows, cols, (m, n))
    position = jnp.clip(jnp.searchsorted(unique, wanted), 0, matrix.nnz - 1)
    stored = unique[position] == wanted
    return jnp.where(stored, summed[position], 0), stored


def stored_on_host(matrix, rows: np.ndarray, cols: np.ndarray) -> np.ndarray | None:
    """Whether each position is stored in `matrix`, computed on the host, or None when
    `matrix`'s structure is traced."""
    if matrix.format == "dia":
        return np.isin(cols.astype(np.int64) - rows, np.asarray(matrix.offsets, np.int64))
    stored_rows, stored_cols, _ = entries(matrix)
    if not isinstance(stored_rows, np.ndarray):
        return None
    return np.isin(
        linear_keys(rows, cols, matrix.shape), linear_keys(stored_rows, stored_cols, matrix.shape)
    )


def select_entries(matrix, keep: np.ndarray):
    """The CSR matrix of the entries of CSR `matrix` where the host mask `keep` holds, in
    their order (host-side: the structure changes)."""
    keep = np.asarray(keep, bool)
    indices = np.asarray(matrix.indices)[keep]
    rows = np.asarray(entries(matrix)[0])[keep]
    counts = np.bincount(rows, minlength=matrix.shape[0])
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(indices.dtype)
    return format_class("csr")(matrix.data[np.flatnonzero(keep)], indices, indptr, matrix.shape)


@jax.jit
def distinct_entries(matrix):
    """Each stored position once, repeats summed: `(rows, cols, values, valid)`, padded
    to `matrix.nnz` entries (jit-able: at most `nnz` distinct positions exist).

    Padding entries have `valid` false, value zero and row `m` (outside the matrix).
    """
    rows, cols, values = entries(matrix)
    if matrix.format == "dia" or matrix.nnz == 0:
        return rows, cols, values, jnp.ones(values.shape, bool)
    m, n = matrix.shape
    keys = linear_keys(rows, cols, matrix.shape)
    unique, inverse = jnp.unique(
        keys, return_inverse=True, size=matrix.nnz, fill_value=jnp.asarray(m * n, keys.dtype)
    )
    summed = jax.ops.segment_sum(values, inverse.reshape(-1), num_segments=matrix.nnz)
    valid = jnp.arange(matrix.nnz, dtype=jnp.int32) < count_positions(keys)
    return unique // n, unique % n, summed, valid
