"""`A[...]`: rows, columns, entries and slices of a sparse matrix.

What comes back, and where it differs from scipy's sparse arrays:

- One row or column with the other axis a slice or an index array (`A[i]`, `A[i, :]`,
  `A[:, j]`, `A[i, 2:5]`, `A[[1, 3], j]`): a dense JAX array. scipy returns a 1-D
  `coo_array`; jaxsparse has no 1-D format. Jit-able, `i` and `j` may be traced integers
  and the index arrays traced integer arrays; a traced index out of range is clamped into
  it, as `jnp` indexing is (a Python int out of range is an IndexError).
- `A[i, j]`: the entry, a 0-d array (repeated CSR entries summed). Jit-able. It and `A[i]`
  read only row `i`'s entries of a CSR matrix (their derivatives read every entry).
- Two index arrays, `A[[i, k], [j, l]]`: the entries at the pairs of positions, the
  arrays broadcast together (numpy's rule), a dense array (scipy's is sparse for 2-D
  arrays); jit-able. `A[mask]` for a boolean mask of the matrix's shape: the entries where
  it holds, row-major, as numpy's (concrete masks only).
- `A[i:j]`, `A[:, i:j]`, `A[i:j, k:l]` (steps of 1): the same format (scipy's CSR slices
  are CSR; its `dia_array` takes no index at all). DIA slices are jit-able (the offsets
  shift by the slice starts; `data` is a column slice). CSR slices change the number of
  entries, so they are computed on the host and need concrete indices (a TypeError under
  `jax.jit`).
- Lists of rows or columns beside slices or lists (`A[[i, j]]`, `A[::s]`, `A[mask]` for a
  boolean mask, `A[1:4, [k, l]]`, `A[np.ix_(rows, cols)]`): a `CSRMatrix` of those rows and
  columns in that order, as scipy's. Host-side: the indices must be concrete, and so must
  a CSR matrix's structure.
- A batched matrix takes no index: `A[0]` could mean the first member or row 0 of each.
  `A.batch_member(b)` takes a member; `jax.vmap(lambda M: M[i])(A)` the rows.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ._arrays import take_at
from ._base import format_class, index_dtype_for, is_concrete, register_for_format
from ._batching import is_batched, refuse_batch
from ._coordinates import (
    entries,
    lookup,
    may_repeat,
    scatter_total,
    select_entries,
    unless_invalid,
    unless_invalid_structure,
)
from ._csr_layout import dropped_outside
from ._index_keys import (
    axis_key,
    host_positions,
    is_picks,
    is_point,
    mask_positions,
    span,
    split_key,
)


def getitem(matrix, key):
    """`matrix[key]` (see the module docstring)."""
    if is_batched(matrix):
        refuse_batch(
            "`A[...]` (a member of the batch, or rows of every member?)",
            matrix,
        )
    if (positions := mask_positions(key, matrix.shape)) is not None:
        return _pairs(matrix, *positions)
    rows_key, cols_key = split_key(key)
    m, n = matrix.shape
    rows, cols = axis_key(rows_key, m, "row"), axis_key(cols_key, n, "column")
    if is_point(rows) and is_point(cols):
        return _entry(matrix, rows, cols)
    if is_point(rows):
        return _picked(_row(matrix, rows), cols)
    if is_point(cols):
        return _picked(_column(matrix, cols), rows)
    if is_picks(rows) and is_picks(cols) and not _outer(rows, cols):
        return _pairs(matrix, rows, cols)
    return _select(matrix, rows, cols)


def _picked(line, key):
    """The part of a dense row or column that a `range` or picks select."""
    if not isinstance(key, range):
        return line[key]
    if key == range(line.shape[0]):
        return line
    if key.step == 1:
        return line[key.start : max(key.start, key.stop)]
    return line[np.asarray(key, np.int64)]


@jax.jit
def _column(matrix, j):
    """`matrix[:, j]` as a dense column, repeats summed."""
    rows, cols, values = entries(matrix)
    on_column = cols == jnp.asarray(j).astype(cols.dtype)  # `j` lies in range: no wrap
    return scatter_total(matrix.shape[0], jnp.where(on_column, rows, matrix.shape[0]), values)


def _outer(rows, cols) -> bool:
    """Whether two index arrays select a submatrix, as `np.ix_`'s column and row do, rather
    than pair up entry by entry."""
    return rows.ndim == 2 and rows.shape[1] == 1 and (cols.ndim == 1 or cols.shape[0] == 1)


def _pairs(matrix, rows, cols):
    """The entries at `(rows[p], cols[p])`, the arrays broadcast together (numpy's rule),
    as a dense array (as numpy's; scipy's is dense for 1-D pairs, sparse for 2-D ones):
    jit-able, repeats summed."""
    try:
        shape = np.broadcast_shapes(rows.shape, cols.shape)
    except ValueError as error:
        raise IndexError(
            f"row and column index arrays of shapes {rows.shape} and {cols.shape} do not "
            "broadcast together."
        ) from error
    dtype = jax.dtypes.canonicalize_dtype(np.result_type(rows.dtype, cols.dtype))
    repeats = may_repeat(matrix)
    values, _ = lookup(
        matrix,
        jnp.broadcast_to(rows, shape).astype(dtype),
        jnp.broadcast_to(cols, shape).astype(dtype),
        repeats=repeats,
    )
    return unless_invalid_structure(matrix, values, checked=repeats is not None)


def _select(matrix, rows, cols):
    """The submatrix of the rows and columns that two `range`s or picks select: the same
    format for two ranges of step 1 (`_submatrix`), else a `CSRMatrix` holding them in the
    order given (host-side: its entries depend on the index values)."""
    if not (is_picks(rows) and is_picks(cols)) and any(
        is_picks(key) and key.ndim != 1 for key in (rows, cols)
    ):
        raise IndexError(
            "a 2-D index array selects a submatrix only beside another, as `np.ix_`'s pair "
            "(rows `(r, 1)`, columns `(1, c)`): beside a slice it must be 1-D."
        )
    row_positions = host_positions(rows, "row")
    col_positions = host_positions(cols, "column")
    m, n = matrix.shape
    part = _submatrix(matrix, span(rows, m), span(cols, n))
    if row_positions is not None:
        part = _select_rows(part.tocsr(), row_positions)
    if col_positions is not None:
        part = _select_columns(part.tocsr(), col_positions)
    return part


# Entries of a CSR row read per step of `_fold_row`: one vector operation each, so that a
# short row takes one step and a long one few, instead of a pass over every entry.
ROW_CHUNK = 128


@functools.singledispatch
@jax.jit
def _entry(matrix, i, j):
    """`matrix[i, j]`, repeats summed (booleans: any)."""
    if matrix.nnz == 0:
        return jnp.zeros((), matrix.dtype)
    entry = _entry_values if jnp.issubdtype(matrix.dtype, jnp.inexact) else _entry_in_row
    j = j.astype(matrix.indices.dtype)
    return entry(matrix.data, matrix.indices, matrix.indptr, i, j, matrix.shape[1])


@functools.singledispatch
@jax.jit
def _row(matrix, i):
    """`matrix[i]` as a dense row, repeats summed (booleans: any)."""
    if matrix.nnz == 0:
        return jnp.zeros((matrix.shape[1],), matrix.dtype)
    row = _row_values if jnp.issubdtype(matrix.dtype, jnp.inexact) else _row_in_row
    return row(matrix.data, matrix.indices, matrix.indptr, i, matrix.shape[1])


def _fold_row(data, indices, indptr, i, n: int, step, carry):
    """`step(carry, cols, values, inside)` over the entries of CSR row `i`, `ROW_CHUNK`
    consecutive entries at a time (`inside` marks those of the row): O(row length).

    **Returns:** `(carry, valid)`: `valid` is the Pallas products' rule for a row, checked
    without reading beyond it: `indptr` starts at 0 and ends at `nnz`, the row's bounds are
    ordered inside `[0, nnz]` and its columns inside `[0, n)`.
    """
    nnz = indices.shape[0]
    size = min(ROW_CHUNK, nnz)
    start, end = indptr[i], indptr[i + 1]
    bounds_valid = (indptr[0] == 0) & (indptr[-1] == nnz) & (start >= 0) & (start <= end)
    bounds_valid &= end <= nnz
    # Bounds clamped into `[0, nnz]`: an invalid `indptr` ends the loop within `nnz / size`
    # steps, and `start + size` stays far from the index dtype's end.
    start, end = jnp.clip(start, 0, nnz), jnp.clip(end, 0, nnz)

    def read(state):
        start, carry, columns_valid = state
        first = jnp.minimum(start, nnz - size)
        inside = first + jnp.arange(size, dtype=start.dtype)
        inside = (inside >= start) & (inside < end)
        cols = jax.lax.dynamic_slice(indices, (first,), (size,))
        values = jax.lax.dynamic_slice(data, (first,), (size,))
        columns_valid &= ~jnp.any(inside & ((cols < 0) | (cols >= n)))
        return start + size, step(carry, cols, values, inside), columns_valid

    state = (start, carry, jnp.asarray(True))
    _, carry, columns_valid = jax.lax.while_loop(lambda state: state[0] < end, read, state)
    return carry, bounds_valid & columns_valid


def _in_row(indices, indptr, i):
    """Whether each stored entry lies in row `i`: O(nnz), but no row ids to compute."""
    position = jnp.arange(indices.shape[0], dtype=indptr.dtype)
    return (position >= indptr[i]) & (position < indptr[i + 1])


def _entry_in_row(data, indices, indptr, i, j, n: int):
    zero = jnp.zeros((), data.dtype)

    def step(total, cols, values, inside):
        picked = jnp.where(inside & (cols == j), values, zero)
        return total | jnp.any(picked) if data.dtype == jnp.bool_ else total + jnp.sum(picked)

    total, valid = _fold_row(data, indices, indptr, i, n, step, zero)
    return unless_invalid(valid, total)


def _entry_in_all(data, indices, indptr, i, j):
    picked = _in_row(indices, indptr, i) & (indices == j)
    return jnp.sum(jnp.where(picked, data, jnp.zeros((), data.dtype)))


def _row_in_row(data, indices, indptr, i, n: int):
    def step(row, cols, values, inside):
        slots = row.at[jnp.where(inside, dropped_outside(cols, n), n)]
        return (
            slots.max(values, mode="drop")
            if data.dtype == jnp.bool_
            else slots.add(values, mode="drop")
        )

    row, valid = _fold_row(data, indices, indptr, i, n, step, jnp.zeros((n,), data.dtype))
    return unless_invalid(valid, row)


def _row_in_all(data, indices, indptr, i, n: int):
    return scatter_total(n, jnp.where(_in_row(indices, indptr, i), indices, n), data)


# Reverse mode cannot transpose a loop over one row: the tangents (linear in `data`) are
# the same sums over every entry, masked, which transpose. Values cost O(row length),
# derivatives O(nnz).
_entry_values = jax.custom_jvp(_entry_in_row, nondiff_argnums=(5,))
_row_values = jax.custom_jvp(_row_in_row, nondiff_argnums=(4,))


@_entry_values.defjvp
def _entry_values_jvp(n, primals, tangents):
    return _entry_values(*primals, n), _entry_in_all(tangents[0], *primals[1:])


@_row_values.defjvp
def _row_values_jvp(n, primals, tangents):
    return _row_values(*primals, n), _row_in_all(tangents[0], *primals[1:], n)


@register_for_format("dia", _entry)
@jax.jit
def _dia_entry(matrix, i, j):
    """One slot per diagonal: `data[d, j]` where `j - i` is offset `d`."""
    offsets, i, j = _dia_offsets(matrix, i, j)
    picked = jnp.where(j - i == offsets, matrix.data[:, j], jnp.zeros((), matrix.dtype))
    return jnp.any(picked) if matrix.dtype == jnp.bool_ else jnp.sum(picked)


@register_for_format("dia", _row)
@jax.jit
def _dia_row(matrix, i):
    """Row `i` meets diagonal `d` at column `i + offsets[d]`, slot `data[d, i + offsets[d]]`."""
    n = matrix.shape[1]
    if n == 0:
        return jnp.zeros((0,), matrix.dtype)
    offsets, i, _ = _dia_offsets(matrix, i, i)
    cols = i + offsets
    values = matrix.data[jnp.arange(len(matrix.offsets)), jnp.clip(cols, 0, n - 1)]
    return scatter_total(n, jnp.where((cols >= 0) & (cols < n), cols, n), values)


def _dia_offsets(matrix, i, j):
    """The offsets as an array, and `i`, `j`, in one integer dtype that holds them all
    (offsets lie in `(-m, n)`)."""
    holds_shape = index_dtype_for(matrix.shape, 0)
    dtype = jax.dtypes.canonicalize_dtype(np.result_type(i.dtype, j.dtype, holds_shape))
    offsets = jnp.asarray(np.asarray(matrix.offsets, np.int64), dtype)
    return offsets, i.astype(dtype), j.astype(dtype)


def _check_host_structure(matrix) -> None:
    if not is_concrete(matrix.indices, matrix.indptr):
        raise TypeError(
            "selecting rows or columns of a `CSRMatrix` changes its number of entries, "
            "which depends on its structure (`indices`, `indptr`), traced here (under "
            "`jax.jit` or `jax.vmap`): select outside them."
        )


def _select_rows(matrix, rows: np.ndarray):
    """The CSR matrix of `matrix`'s rows `rows`, in that order (repeats allowed)."""
    _check_host_structure(matrix)
    indptr = np.asarray(matrix.indptr, np.int64)
    starts, lengths = indptr[rows], indptr[rows + 1] - indptr[rows]
    new_indptr = np.concatenate([[0], np.cumsum(lengths)])
    positions = np.repeat(starts - new_indptr[:-1], lengths) + np.arange(new_indptr[-1])
    index_dtype = matrix.indices.dtype
    return format_class("csr")(
        take_at(matrix.data, positions),
        np.asarray(matrix.indices)[positions],
        new_indptr.astype(index_dtype),
        (len(rows), matrix.shape[1]),
    )


def _select_columns(matrix, cols: np.ndarray):
    """The CSR matrix of `matrix`'s columns `cols`, in that order (repeats allowed).

    A map from each column to its places in `cols` sends every entry to its copies, O(nnz)
    plus a sort of the copies; ordered by row, then place, then storage order, as the
    selected rows of the transpose, transposed back, would be.
    """
    _check_host_structure(matrix)
    m, size = matrix.shape[0], len(cols)
    indices, indptr = np.asarray(matrix.indices, np.int64), np.asarray(matrix.indptr, np.int64)
    places = np.argsort(cols, kind="stable")  # column `c`'s places: from `first[c]` on
    copies = np.bincount(cols, minlength=matrix.shape[1])
    first = np.cumsum(copies) - copies
    hit = np.flatnonzero(copies[indices])
    counts = copies[indices[hit]]
    entry = np.repeat(hit, counts)
    before = np.repeat(np.cumsum(counts) - counts, counts)
    place = places[first[indices[entry]] + np.arange(entry.size) - before]
    rows = np.searchsorted(indptr, entry, side="right") - 1
    order = np.argsort(rows * size + place, kind="stable")
    entry, place = entry[order], place[order]
    new_indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=m))])
    index_dtype = matrix.indices.dtype
    return format_class("csr")(
        take_at(matrix.data, entry),
        place.astype(index_dtype),
        new_indptr.astype(index_dtype),
        (m, size),
    )


def _submatrix(matrix, rows_range, cols_range):
    (top, bottom), (left, right) = rows_range, cols_range
    if (top, bottom, left, right) == (0, matrix.shape[0], 0, matrix.shape[1]):
        return matrix
    return _slice(matrix, top, bottom, left, right)


@functools.singledispatch
def _slice(matrix, top: int, bottom: int, left: int, right: int):
    shape = (bottom - top, right - left)
    if shape[0] * shape[1] == 0 or matrix.nnz == 0:
        # Statically empty: no entry to count, so no structure to know, even under `jit`.
        index_dtype = matrix.indices.dtype
        return format_class("csr")(
            jnp.zeros((0,), matrix.dtype),
            jnp.zeros((0,), index_dtype),
            jnp.zeros((shape[0] + 1,), index_dtype),
            shape,
        )
    if not is_concrete(matrix.indices, matrix.indptr):
        raise TypeError(
            "slicing a `CSRMatrix` changes its number of entries, which depends on its "
            "traced index arrays under `jax.jit`: slice outside `jit`, or take rows with "
            "`A[i]` (dense, jit-able)."
        )
    rows = np.asarray(entries(matrix)[0])
    cols = np.asarray(matrix.indices)
    keep = (rows >= top) & (rows < bottom) & (cols >= left) & (cols < right)
    kept = select_entries(matrix, keep)
    indptr = np.asarray(kept.indptr)[top : bottom + 1]
    return format_class("csr")(
        kept.data,
        np.asarray(kept.indices) - np.asarray(left, kept.indices.dtype),
        indptr - indptr[0],
        shape,
    )


@register_for_format("dia", _slice)
def _dia_slice(matrix, top: int, bottom: int, left: int, right: int):
    # Row `r` of the slice is row `r + top`: an entry on diagonal `off` lands on diagonal
    # `off + top - left`, and column `c` of `data` is column `c + left`.
    offsets = tuple(off + top - left for off in matrix.offsets)
    return type(matrix)(matrix.data[:, left:right], offsets, (bottom - top, right - left))
