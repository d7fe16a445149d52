"""Conversions to and from `jax.experimental.sparse` (BCOO, BCSR), and the CSR clean-ups
scipy has: `sum_duplicates`, `sort_indices`, `eliminate_zeros`; coordinates in and out
(`from_coordinates`, `tocoo`), and scipy's `.npz` files.

`to_bcoo`, `to_bcsr`, `from_bcoo`, `from_bcsr` and `sort_indices` keep the number of stored
entries, so they are jit-able. `sum_duplicates` and `eliminate_zeros` change it: they run on
the host, and `sum_duplicates` under `jax.jit` takes a static `nnz` (`eliminate_zeros`
depends on values and has no `jit` form). Unlike scipy's, they return a new matrix.
"""

import functools

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import scipy.sparse
from jax.experimental import sparse as jsparse

from ._base import (
    SparseMatrix,
    format_class,
    index_dtype_for,
    is_concrete,
    register_for_format,
    storable_dtype,
)
from ._batching import refuse_batch
from ._coordinates import entries, entries_to_csr, select_entries
from ._csr_layout import indptr_from_counts


def to_bcoo(matrix) -> jsparse.BCOO:
    """The matrix as a `jax.experimental.sparse.BCOO` with the same entries (jit-able)."""
    refuse_batch("`to_bcoo()`", matrix)
    rows, cols, values = entries(matrix)
    index_dtype = _index_dtype(matrix)
    indices = jnp.stack([jnp.asarray(rows), jnp.asarray(cols)], axis=1).astype(index_dtype)
    return jsparse.BCOO((values, indices), shape=matrix.shape)


@functools.singledispatch
def _index_dtype(matrix):
    """The dtype of a BCOO's indices for `matrix`: int32, or a CSR matrix's own."""
    return jnp.int32


@register_for_format("csr", _index_dtype)
def _csr_index_dtype(matrix):
    return matrix.indices.dtype


def to_bcsr(matrix) -> jsparse.BCSR:
    """The matrix as a `jax.experimental.sparse.BCSR` with the same entries (jit-able)."""
    refuse_batch("`to_bcsr()`", matrix)
    csr = matrix.tocsr()
    return jsparse.BCSR((csr.data, csr.indices, csr.indptr), shape=csr.shape)


def from_bcoo(matrix: jsparse.BCOO):
    """A `CSRMatrix` from a 2-D `BCOO` (no batch or dense dimensions), jit-able.

    Entries are sorted by row (stably). BCOO's padding entries (indices out of range) become
    explicit zeros in the last row.
    """
    if not isinstance(matrix, jsparse.BCOO):
        raise TypeError(f"`matrix` must be a BCOO, got {type(matrix).__name__}.")
    _check_plain(matrix)
    m, n = matrix.shape
    rows, cols = matrix.indices[:, 0], matrix.indices[:, 1]
    inside = (rows >= 0) & (rows < m) & (cols >= 0) & (cols < n)
    rows = jnp.where(inside, rows, max(m - 1, 0))
    cols = jnp.where(inside, cols, 0)
    values = jnp.where(inside, matrix.data, jnp.zeros((), matrix.dtype))
    order = jnp.argsort(rows, stable=True)
    index_dtype = index_dtype_for(matrix.shape, matrix.nse)
    counts = jnp.zeros((m,), index_dtype).at[rows].add(1, mode="drop")
    return format_class("csr")(
        values[order], cols[order].astype(index_dtype), indptr_from_counts(counts), (m, n)
    )


def from_bcsr(matrix: jsparse.BCSR):
    """A `CSRMatrix` from a 2-D `BCSR` (no batch or dense dimensions), jit-able.

    BCSR's padding slots (past `indptr[-1]`) become explicit zeros in the last row.
    """
    if not isinstance(matrix, jsparse.BCSR):
        raise TypeError(f"`matrix` must be a BCSR, got {type(matrix).__name__}.")
    _check_plain(matrix)
    m, n = matrix.shape
    if matrix.nse and m * n == 0:
        raise ValueError(
            f"`matrix` has nse={matrix.nse} slots but shape {matrix.shape}: an empty "
            "CSRMatrix holds no entries."
        )
    index_dtype = jnp.promote_types(matrix.indices.dtype, matrix.indptr.dtype)
    stored = jnp.arange(matrix.nse, dtype=matrix.indptr.dtype) < matrix.indptr[-1]
    indptr = matrix.indptr.astype(index_dtype)
    return format_class("csr")(
        jnp.where(stored, matrix.data, jnp.zeros((), matrix.dtype)),
        jnp.where(stored, matrix.indices, 0).astype(index_dtype),
        indptr.at[-1].set(matrix.nse),
        matrix.shape,
    )


def _check_plain(matrix) -> None:
    if matrix.n_batch or matrix.n_dense or len(matrix.shape) != 2:
        raise ValueError(
            "`matrix` must be 2-D with no batch or dense dimensions, got "
            f"n_batch={matrix.n_batch}, n_dense={matrix.n_dense}, shape={matrix.shape}."
        )


def sort_indices(matrix):
    """The CSR matrix with the columns of every row in increasing order (jit-able: a stable
    sort; repeats stay)."""
    rows, cols, values = entries(matrix)
    # A structure known on the host (numpy `rows`, `cols`) is sorted there, as numpy arrays
    # cannot be indexed by a traced order.
    lexsort = np.lexsort if isinstance(cols, np.ndarray) else jnp.lexsort
    order = lexsort((cols, rows))
    return format_class("csr")(values[order], cols[order], matrix.indptr, matrix.shape)


def sum_duplicates(matrix, *, nnz: int | None = None):
    """The CSR matrix with repeated positions summed and columns sorted, as scipy's.

    **Arguments:**

    - `nnz`: the number of distinct positions; needed under `jax.jit` (counted on the host
      otherwise). More pads with explicit zeros, fewer raises.
    """
    rows, cols, values = entries(matrix)
    return entries_to_csr(rows, cols, values, matrix.shape, nnz=nnz, operation="`sum_duplicates()`")


def from_coordinates(data, row, col, shape, nnz):
    """The CSR matrix of `data[p]` at `(row[p], col[p])`, repeats summed (`from_coo`)."""
    values = jnp.asarray(data)
    values = values.astype(storable_dtype(values.dtype))
    positions, outside = [], {}
    for name, index, size in (("row", row, shape[0]), ("col", col, shape[1])):
        index = index if isinstance(index, np.ndarray) else jnp.asarray(index)
        if not jnp.issubdtype(index.dtype, jnp.integer):
            raise TypeError(f"`{name}` must hold integers, got dtype {index.dtype}.")
        if index.shape != values.shape or values.ndim != 1:
            raise ValueError(
                f"`data`, `row` and `col` must be 1-D of one length, got `data` "
                f"{values.shape} and `{name}` {index.shape}."
            )
        if is_concrete(index):
            host = np.asarray(index)
            if host.size and (host.min() < 0 or host.max() >= size):
                raise ValueError(
                    f"`{name}` out of range: it must lie in [0, {size}) for shape={shape}, "
                    f"got values in [{host.min()}, {host.max()}]."
                )
        else:
            outside[name] = jnp.any((index < 0) | (index >= size))
        positions.append(index)
    if outside:  # one run-time check for both: each `error_if` may copy the values
        flags = list(outside.values())
        values = eqx.branched_error_if(
            values,
            functools.reduce(jnp.logical_or, flags),
            jnp.argmax(jnp.stack(flags)),
            [f"`{name}` out of range" for name in outside],
        )
    return entries_to_csr(*positions, values, shape, nnz=nnz, operation="`from_coo`")


def tocoo(matrix):
    """`(data, row, col)`: every stored entry and its position (DIA: every slot inside the
    matrix, zeros included; CSR: storage order, repeats included), jit-able."""
    refuse_batch("`tocoo()`", matrix)
    rows, cols, values = entries(matrix)
    return values, jnp.asarray(rows), jnp.asarray(cols)


def save_npz(file, matrix, compressed: bool = True) -> None:
    """Save `matrix` with `scipy.sparse.save_npz` (on the host, as its scipy twin)."""
    if not isinstance(matrix, SparseMatrix):
        raise TypeError(
            f"save_npz: `matrix` must be a jaxsparse matrix, got {type(matrix).__name__} "
            "(a scipy.sparse one saves with `scipy.sparse.save_npz`)."
        )
    scipy.sparse.save_npz(file, matrix.to_scipy(), compressed=compressed)


def load_npz(file):
    """Load a matrix saved by `save_npz` (or scipy's): a `DIAMatrix` for a DIA file, else
    a `CSRMatrix`."""
    loaded = scipy.sparse.load_npz(file)
    return format_class("dia" if loaded.format == "dia" else "csr").from_scipy(loaded)


def eliminate_zeros(matrix):
    """The CSR matrix without its explicitly stored zeros (host-side: needs concrete values
    and indices)."""
    if not is_concrete(matrix.data, matrix.indices, matrix.indptr):
        raise TypeError(
            "`eliminate_zeros()` removes entries by value, so its structure depends on the "
            "values, which are traced (under `jax.jit`, `jax.grad` or `jax.vmap`): call it "
            "outside `jit`, on concrete values, and pass traced ones in with `with_data`."
        )
    return select_entries(matrix, np.asarray(matrix.data) != 0)


def asformat(matrix, format: str):
    """The matrix in `format` (`"dia"` or `"csr"`), as scipy's `asformat`."""
    if format == "dia":
        return matrix.todia()
    if format == "csr":
        return matrix.tocsr()
    raise ValueError(f"`format` must be 'dia' or 'csr', got {format!r}.")
