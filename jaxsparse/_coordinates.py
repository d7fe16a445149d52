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

from ._arrays import take_at
from ._base import format_class, index_dtype_for, is_concrete, register_for_format
from ._csr_checks import known_valid
from ._csr_layout import dropped_outside, row_ids, structure_valid
from ._csr_positions import positions_structure, sorted_positions
from ._dia_layout import stored_positions
from ._structure_facts import remembered
from ._structure_primitive import runs_natively
from .kernels._csr_common import nan_unless
from .kernels._precision import accumulation_dtype


@functools.singledispatch
def entries(matrix):
    """The stored entries inside `matrix`: `(rows, cols, values)`, each `(nnz,)`.

    DIA: every slot inside the matrix, diagonal by diagonal. CSR: every stored entry in
    storage order, repeats included. Positions are numpy arrays wherever the structure is
    known on the host (DIA always, CSR with concrete index arrays, even inside `jit`), so
    that structure computations on them stay on the host.
    """
    return *_csr_positions(matrix), stored_values(matrix)


@functools.singledispatch
def checked_entries(matrix):
    """`entries` of a matrix whose structure the host checked (`may_repeat` is not None)
    before `jit` traced it: CSR values as they are, without the run-time check."""
    return *_csr_positions(matrix), matrix.data


def _csr_positions(matrix):
    """The rows and columns of a CSR matrix's stored entries (see `entries`)."""
    if is_concrete(matrix.indices, matrix.indptr):
        indptr = np.asarray(matrix.indptr)
        rows = np.repeat(np.arange(matrix.shape[0], dtype=indptr.dtype), np.diff(indptr))
        return rows, np.asarray(matrix.indices)
    return row_ids(matrix.indptr, matrix.nnz), matrix.indices


def stored_values(matrix) -> jax.Array:
    """A CSR matrix's `data`, as every operation other than the products reads it: where
    the structure is invalid, NaN throughout, as the products answer (an error for
    booleans, which hold no NaN; `unless_invalid_structure`)."""
    return unless_invalid_structure(matrix, matrix.data)


@functools.singledispatch
def unless_invalid_structure(matrix, out, checked: bool = False) -> jax.Array:
    """`out`, computed from a CSR matrix's values, where its structure is valid; where it is
    not, NaN throughout, or a run-time error for a result that holds no NaN (booleans and
    integers: comparisons, `argmax`, `count_nonzero`), which NaN values would otherwise
    turn into finite answers. One pass over the structure, under `jit`; `checked`: the host
    checked it before `jit` (`may_repeat` is not None), and a known one is checked on the
    host once (`known_valid`)."""
    if checked or known_valid(matrix.indices, matrix.indptr, matrix.shape):
        return out
    return unless_invalid(structure_valid(matrix.indices, matrix.indptr, matrix.shape[1]), out)


def unless_invalid(valid, out) -> jax.Array:
    """`out` where the boolean scalar `valid` holds; where it does not, NaN throughout
    (`nan_unless`), or for booleans and integers an error at run time."""
    if not jnp.issubdtype(out.dtype, jnp.inexact):
        return eqx.error_if(out, ~valid, "invalid CSR structure: `A.check()` names the fault")
    return nan_unless(valid, out)


@register_for_format("dia", unless_invalid_structure)
def _dia_unless_invalid_structure(matrix, out, checked: bool = False) -> jax.Array:
    """A DIA structure is static: always valid."""
    return out


@register_for_format("dia", checked_entries)
@register_for_format("dia", entries)
def _dia_entries(matrix):
    diagonals, rows, cols = stored_positions(matrix.offsets, matrix.shape)
    return rows, cols, take_at(matrix.data, diagonals, cols)


def host_keys(rows, cols, shape: tuple[int, int]) -> np.ndarray | None:
    """`row * n + col` in int64 numpy for concrete positions (no overflow below 2^31 rows
    and columns, whatever JAX's default integer); `None` for traced positions."""
    if not is_concrete(rows, cols):
        return None
    return np.asarray(rows, np.int64) * shape[1] + np.asarray(cols, np.int64)


def sorted_unique(keys: np.ndarray) -> np.ndarray:
    """The distinct values of a 1-D host array, sorted, as `np.unique(keys)`.

    By a sort: numpy's values-only `np.unique` (2.3 and later) hashes instead, which is far
    slower for the ~10^6 distinct int64 keys of a matrix's positions.
    """
    ordered = np.sort(keys)
    if ordered.size == 0:
        return ordered
    starts = np.empty(ordered.shape, bool)
    starts[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
    return ordered[starts]


def unique_positions(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(keys, return_inverse=True)` for 1-D int64 host keys, by a sort (see
    `sorted_unique`): the sorted distinct keys, and the slot of each key among them.

    Sorted keys (a canonical matrix's positions) are not sorted again. Keys that leave
    room for their index in the low bits of an int64 are sorted with it packed there: one
    plain sort, cheaper than an `argsort` and its gather.
    """
    keys = np.asarray(keys, np.int64)
    order = None
    if keys.size > 1 and not np.all(keys[1:] >= keys[:-1]):
        bits = int(keys.size - 1).bit_length()
        if keys.min() >= 0 and int(keys.max()) < 2 ** (63 - bits):
            packed = np.sort((keys << bits) | np.arange(keys.size, dtype=np.int64))
            keys, order = packed >> bits, packed & ((1 << bits) - 1)
        else:
            order = np.argsort(keys)
            keys = keys[order]
    starts = np.empty(keys.shape, bool)
    starts[:1] = True
    np.not_equal(keys[1:], keys[:-1], out=starts[1:])
    slots = np.cumsum(starts) - 1
    if order is None:
        return keys[starts], slots
    inverse = np.empty(keys.shape, np.intp)
    inverse[order] = slots
    return keys[starts], inverse


def host_isin(values: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """`np.isin(values, keys)` for 1-D host arrays, by a sort of `keys` and a binary search
    (`np.isin` would take `np.unique`'s hashing path, see `sorted_unique`)."""
    if keys.size == 0:
        return np.zeros(values.shape, bool)
    table = np.sort(keys)
    position = np.minimum(np.searchsorted(table, values), table.size - 1)
    return table[position] == values


def static_nnz(unique_keys: np.ndarray | None, nnz: int | None, operation: str) -> int:
    """The number of distinct positions: `nnz` if given, else the size of the positions'
    `unique_positions` on the host (`None` for traced positions).

    Raises a TypeError when it would depend on traced index values (under `jit`).
    """
    if nnz is not None:
        if isinstance(nnz, bool) or not isinstance(nnz, (int, np.integer)) or nnz < 0:
            raise ValueError(f"`nnz` must be a non-negative Python int, got {nnz!r}.")
        return int(nnz)
    if unique_keys is None:
        raise TypeError(
            f"{operation}: the result's structure depends on the operands' index values, "
            "which are traced (under `jax.jit` or `jax.vmap`). Pass a static `nnz` (the "
            "number of stored entries of the result, e.g. computed once outside `jit`), or "
            "compute it outside `jit`."
        )
    return int(unique_keys.size)


def sorted_distinct(rows, cols, size: int, fill: tuple[int, int]):
    """The distinct positions among traced `(rows, cols)`, sorted by row then column
    (`_csr_positions.sorted_positions`).

    **Returns:** `(unique_rows, unique_cols, inverse, count)`: the first `count` of `size`
    slots hold the positions (the rest `fill`), and entry `p` is at slot `inverse[p]`
    (at least `size` for a position beyond the first `size`).
    """
    rows, cols = jnp.asarray(rows), jnp.asarray(cols)
    length = rows.shape[0]
    if length == 0:
        empty = jnp.zeros((0,), jnp.int32)
        fill_rows = jnp.full((size,), fill[0], rows.dtype)
        return fill_rows, jnp.full((size,), fill[1], cols.dtype), empty, jnp.zeros((), jnp.int32)
    sorted_rows, sorted_cols, _, slot, inverse = sorted_positions(rows, cols, jnp.int32)
    unique_rows = jnp.full((size,), fill[0], rows.dtype).at[slot].set(sorted_rows, mode="drop")
    unique_cols = jnp.full((size,), fill[1], cols.dtype).at[slot].set(sorted_cols, mode="drop")
    return unique_rows, unique_cols, inverse, slot[-1] + 1


def csr_from_entries(rows, cols, values, shape: tuple[int, int], nnz: int, *, structure=None):
    """The CSR matrix of the listed entries, repeats summed, rows and columns sorted.

    Concrete positions (numpy, or known arrays) get their structure eagerly, even under
    `jit`: from the native sort where an eager call runs it (`_csr_positions`), else on the
    host in int64 (`structure`: their `unique_positions(host_keys(...))`, if the caller has
    it already); traced ones from `_csr_positions` in the program. With fewer than `nnz`
    distinct positions, the result
    is padded with explicit zeros at the last position `(m - 1, n - 1)`; with more, a
    ValueError on the host, and under `jit` using the result raises at run time
    (`eqx.error_if`), so a wrong `nnz` never gives a wrong matrix silently. `nnz`=0 with
    any entry listed is a ValueError, under `jit` too: XLA drops a check on an empty array.
    """
    m, n = shape
    index_dtype = index_dtype_for(shape, nnz)
    if nnz == 0 or m * n == 0:
        return _empty_csr(rows, cols, values, shape, nnz, index_dtype)
    if structure is None:
        if not is_concrete(rows, cols):
            return _csr_from_traced_entries(rows, cols, values, shape, nnz)
        if _lists_natively(rows, shape, nnz):
            return _csr_from_listed(rows, cols, values, shape, nnz)
        structure = unique_positions(host_keys(rows, cols, shape))
    unique, inverse = structure
    if unique.size > nnz:
        raise ValueError(f"`nnz`={nnz} is smaller than the result's {unique.size} entries.")
    padding = np.full((nnz - unique.size,), m * n - 1, np.int64)
    unique = np.concatenate([unique, padding])
    unique_rows, unique_cols = np.divmod(unique, n)
    counts = np.bincount(unique_rows, minlength=m)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(index_dtype)
    return format_class("csr")(
        summed_values(values, inverse.reshape(-1).astype(index_dtype), nnz),
        unique_cols.astype(index_dtype),
        indptr,
        shape,
    )


def segment_total(values, segments, num_segments: int):
    """`jax.ops.segment_sum` in `values`' dtype, added up in its `accumulation_dtype` (half
    precision in float32, as the products: float16 stops counting ones at 2048), booleans
    combined by `or` (numpy's bool sum; XLA has no bool add)."""
    if values.dtype == jnp.bool_:
        counts = jax.ops.segment_sum(values.astype(jnp.int32), segments, num_segments=num_segments)
        return counts != 0
    wide = values.astype(accumulation_dtype(values.dtype))
    return jax.ops.segment_sum(wide, segments, num_segments=num_segments).astype(values.dtype)


@functools.partial(jax.jit, static_argnums=0)
def scatter_total(shape, positions, values):
    """The dense array of `shape` (an int for a vector) holding `values` summed at
    `positions` (an index or a tuple of them; those outside dropped), added up as in
    `segment_total`. One compiled program (eagerly, its operations would dispatch one by
    one)."""
    if isinstance(positions, tuple):
        positions = tuple(map(dropped_outside, positions, shape))
    else:
        positions = dropped_outside(positions, shape if isinstance(shape, int) else shape[0])
    if values.dtype == jnp.bool_:
        return jnp.zeros(shape, values.dtype).at[positions].max(values, mode="drop")
    wide = values.astype(accumulation_dtype(values.dtype))
    slots = jnp.zeros(shape, wide.dtype).at[positions]
    return slots.add(wide, mode="drop").astype(values.dtype)


@functools.partial(jax.jit, static_argnums=2)
def summed_values(values, slots, nnz: int):
    """`segment_total` into `nnz` slots, one compiled program (eagerly, its many small
    operations would dispatch one by one)."""
    return segment_total(values, slots, num_segments=nnz)


def _empty_csr(rows, cols, values, shape, nnz, index_dtype):
    m, n = shape
    # No position to pad at: a CSR with stored entries needs a row and a column.
    if m * n == 0 and nnz:
        raise ValueError(f"`nnz` must be 0 for an empty matrix of shape {shape}, got {nnz=}.")
    if nnz == 0 and jnp.shape(rows)[0]:
        # Traced or not, a listed entry is a position the result must hold.
        raise ValueError("`nnz`=0 is smaller than the number of entries of the result.")
    data = jnp.zeros((nnz,), values.dtype)
    pointers = jnp.zeros((m + 1,), index_dtype)
    return format_class("csr")(data, jnp.zeros((nnz,), index_dtype), pointers, shape)


def _listing_dtype(shape: tuple[int, int], length: int, nnz: int | None):
    """The index dtype `_csr_positions` sorts a list of `length` positions in: one that
    counts the list and the slots as well as the rows and columns."""
    return index_dtype_for(shape, max(length, nnz or 0))


# Shorter lists of known positions sort on the host: numpy takes microseconds there, less
# than compiling the native call for each new length.
NATIVE_LIST_MIN = 1 << 14


def _lists_natively(rows, shape: tuple[int, int], nnz: int | None) -> bool:
    """Whether the native sort (`_csr_positions`) finds the structure of these concrete
    positions: an eager call runs it, the list holds `NATIVE_LIST_MIN` positions or more,
    and the matrix and `nnz` are not empty."""
    length = np.shape(rows)[0]
    enough = length >= NATIVE_LIST_MIN and shape[0] * shape[1] and nnz != 0
    return bool(enough) and runs_natively(_listing_dtype(shape, length, nnz))


def _csr_from_listed(rows, cols, values, shape: tuple[int, int], nnz: int | None):
    """`csr_from_entries` for concrete positions inside the matrix, their structure from the
    native sort, found eagerly even under `jit`; `nnz` checked, or taken from the count
    when None."""
    length = np.shape(rows)[0]
    dtype = _listing_dtype(shape, length, nnz)
    with jax.ensure_compile_time_eval():
        structure = positions_structure(
            *(_as_index(index, dtype) for index in (rows, cols)),
            num_rows=shape[0],
            num_cols=shape[1],
            nnz=length if nnz is None else nnz,
        )
    return csr_from_known_slots(values, *structure, shape, nnz)


def csr_from_known_slots(values, slots, indices, indptr, shape: tuple[int, int], nnz):
    """The CSR matrix of `values` summed into the slots of a known structure from a
    structure kernel (`_csr_positions`: `indptr[m]` the distinct positions found,
    `indices` padded with column `n - 1` past them): `nnz` checked, or that count
    when None; padding entries at the end of the last row. The structure in numpy, as the
    host path's, so it stays known under an outer `jit`."""
    m = shape[0]
    found = int(np.asarray(indptr)[m])
    if nnz is not None and found > nnz:
        raise ValueError(f"`nnz`={nnz} is smaller than the result's {found} entries.")
    nnz = found if nnz is None else nnz
    index_dtype = index_dtype_for(shape, nnz)
    indptr = np.array(indptr, index_dtype)
    indptr[m] = nnz
    return format_class("csr")(
        summed_values(values, slots, nnz),
        np.asarray(indices)[:nnz].astype(index_dtype, copy=False),
        indptr,
        shape,
    )


def csr_from_traced_slots(values, slots, indices, indptr, shape: tuple[int, int], nnz: int):
    """`csr_from_known_slots` for a traced structure and a static `nnz`: more distinct
    positions than `nnz` raise at run time (`eqx.error_if`)."""
    m = shape[0]
    summed = segment_total(values, slots, num_segments=nnz)
    summed = eqx.error_if(
        summed, indptr[m] > nnz, f"`nnz`={nnz} is smaller than the number of entries of the result"
    )
    index_dtype = index_dtype_for(shape, nnz)
    indptr = indptr.at[m].set(nnz)
    return format_class("csr")(
        summed, indices.astype(index_dtype), indptr.astype(index_dtype), shape
    )


def _as_index(index, dtype) -> jax.Array:
    """A host or device index array as a JAX array of `dtype` (cast on the host first, so
    that int64 values never pass through JAX without 64-bit types)."""
    if isinstance(index, np.ndarray):
        return jnp.asarray(index.astype(dtype, copy=False))
    return jnp.asarray(index).astype(dtype)


@functools.partial(jax.jit, static_argnames=("shape", "nnz"))
def _csr_from_traced_entries(rows, cols, values, shape: tuple[int, int], nnz: int):
    m, n = shape
    dtype = _listing_dtype(shape, rows.shape[0], nnz)
    # Positions outside the matrix (an invalid structure's entries, whose values are NaN,
    # or `from_coo`'s, which its check refuses) are moved into it: the result is then NaN
    # or refused on every backend, and the native sort never fails.
    rows, cols = jnp.clip(rows, 0, m - 1), jnp.clip(cols, 0, n - 1)
    structure = positions_structure(
        rows.astype(dtype), cols.astype(dtype), num_rows=m, num_cols=n, nnz=nnz
    )
    return csr_from_traced_slots(values, *structure, shape, nnz)


def entries_to_csr(rows, cols, values, shape, *, nnz: int | None, operation: str):
    """`csr_from_entries` with `nnz` counted on the host when it is not given."""
    if nnz is not None:
        nnz = static_nnz(None, nnz, operation)
    if is_concrete(rows, cols) and _lists_natively(rows, shape, nnz):
        return _csr_from_listed(rows, cols, values, shape, nnz)
    keys = host_keys(rows, cols, shape)
    structure = None if keys is None else unique_positions(keys)
    nnz = static_nnz(None if structure is None else structure[0], nnz, operation)
    return csr_from_entries(rows, cols, values, shape, nnz, structure=structure)


def lookup(matrix, rows, cols, repeats: bool | None = None):
    """`matrix[rows[p], cols[p]]` for every `p` (repeats summed), and whether the position
    is stored: `(values, stored)`, jit-able. `repeats`: as in `distinct_entries`."""
    repeats = _repeats(matrix, repeats)
    return _lookup_jitted(matrix, jnp.asarray(rows), jnp.asarray(cols), repeats=repeats)


@functools.partial(jax.jit, static_argnames="repeats")
def _lookup_jitted(matrix, rows, cols, repeats: bool | None):
    return _lookup(matrix, rows, cols, repeats)


@functools.singledispatch
def _lookup(matrix, rows, cols, repeats: bool | None):
    if matrix.nnz == 0:
        return jnp.zeros(rows.shape, matrix.dtype), jnp.zeros(rows.shape, bool)
    if matrix.nnz < 2 or repeats is False:
        return _lookup_in_rows(matrix, rows, cols)
    if repeats:
        return _lookup_summed(matrix, rows, cols)
    # As in `_reduce_distinct`: the search within rows unless a position repeats.
    return jax.lax.cond(
        columns_rise(matrix.indices, matrix.indptr),
        _lookup_in_rows,
        _lookup_summed,
        matrix,
        rows,
        cols,
    )


def _lookup_in_rows(matrix, rows, cols):
    """`_lookup` where the columns of every row strictly increase."""
    position, stored = search_rows(matrix.indices, matrix.indptr, rows, cols)
    position = jnp.clip(position, 0, matrix.nnz - 1)
    return jnp.where(stored, matrix.data[position], jnp.zeros((), matrix.dtype)), stored


def search_rows(indices, indptr, rows, cols):
    """For each `(rows[p], cols[p])`, the first entry of row `rows[p]` whose column is not
    before `cols[p]`, in a CSR structure whose columns strictly increase within rows, and
    whether that entry is at `cols[p]`: `(position, stored)`, positions in `indptr`'s dtype.

    A binary search within each row's entries, as many steps as the longest row searched
    needs (`lax.while_loop`), not the `log2(nnz)` of a search over all entries.
    """
    rows = rows.astype(indptr.dtype)
    cols = cols.astype(indices.dtype)
    nnz = indices.shape[0]
    last = max(nnz - 1, 0)
    # Bounds clamped into `[0, nnz]`, which an invalid `indptr` may leave: the search
    # then ends within `log2(nnz)` steps, and no midpoint overflows.
    start, end = jnp.clip(indptr[rows], 0, nnz), jnp.clip(indptr[rows + 1], 0, nnz)

    def halve(bounds):
        low, high = bounds
        middle = low + ((high - low) >> 1)  # low <= high where it is used
        before = indices[jnp.clip(middle, 0, last)] < cols
        searching = low < high
        return (
            jnp.where(searching & before, middle + 1, low),
            jnp.where(searching & ~before, middle, high),
        )

    low, _ = jax.lax.while_loop(lambda bounds: jnp.any(bounds[0] < bounds[1]), halve, (start, end))
    stored = (low < end) & (indices[jnp.clip(low, 0, last)] == cols)
    return low, stored


def _lookup_summed(matrix, rows, cols):
    """`_lookup` on the distinct positions, repeats summed: sorted, then searched."""
    m, n = matrix.shape
    stored_rows, stored_cols, stored_values = entries(matrix)
    # Padding slots sit at row `m`, past every position looked up.
    unique_rows, unique_cols, inverse, _ = sorted_distinct(
        stored_rows, stored_cols, matrix.nnz, (m, 0)
    )
    summed = segment_total(stored_values, inverse, num_segments=matrix.nnz)
    # Positions inside the matrix fit its index dtype.
    rows, cols = rows.astype(unique_rows.dtype), cols.astype(unique_cols.dtype)
    position = _search_pairs(unique_rows, unique_cols, rows, cols)
    position = jnp.clip(position, 0, matrix.nnz - 1)
    stored = (unique_rows[position] == rows) & (unique_cols[position] == cols)
    return jnp.where(stored, summed[position], jnp.zeros((), summed.dtype)), stored


@register_for_format("dia", _lookup)
def _dia_lookup(matrix, rows, cols, repeats: bool | None):
    order = np.argsort(np.asarray(matrix.offsets, np.int64), kind="stable")
    sorted_offsets = np.asarray(matrix.offsets, np.int64)[order]
    if len(order) == 0:
        return jnp.zeros(rows.shape, matrix.dtype), jnp.zeros(rows.shape, bool)
    # Offsets lie in (-m, n): their differences fit the index dtype.
    index_dtype = jnp.promote_types(rows.dtype, cols.dtype)
    wanted = cols.astype(index_dtype) - rows.astype(index_dtype)
    offsets = jnp.asarray(np.clip(sorted_offsets, -(2**31) + 1, 2**31 - 1), index_dtype)
    position = jnp.clip(jnp.searchsorted(offsets, wanted), 0, len(order) - 1)
    stored = offsets[position] == wanted
    values = matrix.data[jnp.asarray(order)[position], cols]
    return jnp.where(stored, values, jnp.zeros((), values.dtype)), stored


def _search_pairs(sorted_rows, sorted_cols, rows, cols):
    """For each `(rows[p], cols[p])`, the first slot of the pairs sorted by (row, column)
    not before it: a binary search on the two keys (no combined key to overflow)."""
    size = sorted_rows.shape[0]
    rows = rows.astype(sorted_rows.dtype)
    cols = cols.astype(sorted_cols.dtype)
    low = jnp.zeros(rows.shape, jnp.int32)
    high = jnp.full(rows.shape, size, jnp.int32)

    def halve(_, bounds):
        low, high = bounds
        middle = low + (high - low) // 2  # no overflow past 2**30 pairs
        probe = jnp.clip(middle, 0, size - 1)
        before = (sorted_rows[probe] < rows) | (
            (sorted_rows[probe] == rows) & (sorted_cols[probe] < cols)
        )
        searching = low < high
        return (
            jnp.where(searching & before, middle + 1, low),
            jnp.where(searching & ~before, middle, high),
        )

    low, _ = jax.lax.fori_loop(0, int(size).bit_length() + 1, halve, (low, high))
    return low


@functools.singledispatch
def stored_on_host(matrix, rows: np.ndarray, cols: np.ndarray) -> np.ndarray | None:
    """Whether each position is stored in `matrix`, computed on the host, or None when
    `matrix`'s structure is traced."""
    stored_rows, stored_cols, _ = entries(matrix)
    if not isinstance(stored_rows, np.ndarray):
        return None
    return host_isin(
        host_keys(rows, cols, matrix.shape), host_keys(stored_rows, stored_cols, matrix.shape)
    )


@register_for_format("dia", stored_on_host)
def _dia_stored_on_host(matrix, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    return host_isin(cols.astype(np.int64) - rows, np.asarray(matrix.offsets, np.int64))


def select_entries(matrix, keep: np.ndarray):
    """The CSR matrix of the entries of CSR `matrix` where the host mask `keep` holds, in
    their order (host-side: the structure changes)."""
    keep = np.asarray(keep, bool)
    indices = np.asarray(matrix.indices)[keep]
    rows = np.asarray(entries(matrix)[0])[keep]
    counts = np.bincount(rows, minlength=matrix.shape[0])
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(indices.dtype)
    return format_class("csr")(
        take_at(matrix.data, np.flatnonzero(keep)), indices, indptr, matrix.shape
    )


def distinct_entries(matrix, repeats: bool | None = None):
    """Each stored position once, repeats summed: `(rows, cols, values, valid)`, padded
    to `matrix.nnz` entries (jit-able: at most `nnz` distinct positions exist), sorted by
    row then column.

    Padding entries have `valid` false, value zero and row `m` (outside the matrix).
    `repeats`: `may_repeat(matrix)`, if the caller computed it before entering `jit`.
    """
    return _distinct_entries(matrix, repeats=_repeats(matrix, repeats))


@functools.partial(jax.jit, static_argnames="repeats")
def _distinct_entries(matrix, repeats: bool | None):
    return reduce_distinct(matrix, lambda *distinct: distinct, repeats)


def reduce_distinct(matrix, reduce, repeats: bool | None = None):
    """`reduce(*distinct_entries(matrix))`, jit-able.

    Where no stored position repeats, `reduce` gets the stored entries as they are, without
    the sort that sums repeats. That is known on the host for a concrete structure
    (`may_repeat`); for a traced one, a run-time check picks between the two with
    `lax.cond` around `reduce` (both compile), so that each branch fuses its reduction.
    """
    return _reduce_distinct(matrix, reduce, _repeats(matrix, repeats))


def _repeats(matrix, repeats: bool | None) -> bool | None:
    return may_repeat(matrix) if repeats is None else repeats


@functools.singledispatch
def may_repeat(matrix) -> bool | None:
    """Whether a stored position may repeat, as the host knows it: None for a traced or an
    invalid structure (run-time checks decide), else False when the columns of every row
    strictly increase (the canonical CSR form), True when not. So a value other than None
    also says that the structure passed the host's checks (`known_valid`): inside `jit`,
    where the structure is traced, its values are then read as they are
    (`checked_entries`)."""
    if matrix.indices.ndim != 1 or not known_valid(matrix.indices, matrix.indptr, matrix.shape):
        return None
    return remembered(matrix.indices, matrix.indptr, "may_repeat", lambda: _repeats_on_host(matrix))


def _repeats_on_host(matrix) -> bool:
    indices, indptr = np.asarray(matrix.indices), np.asarray(matrix.indptr)
    rises = indices[1:] > indices[:-1]
    starts = indptr[1:-1]
    # Entry `p` starting a row needs no rise from entry `p - 1`.
    rises[starts[(starts > 0) & (starts < indices.size)] - 1] = True
    return not bool(np.all(rises))


@register_for_format("dia", may_repeat)
def _dia_may_repeat(matrix) -> bool:
    return False


@functools.singledispatch
def _reduce_distinct(matrix, reduce, repeats: bool | None):
    if repeats is False:
        return reduce(*_all_valid(*checked_entries(matrix)))
    if repeats:
        return reduce(*_summed_distinct_entries(matrix, *checked_entries(matrix)))
    if matrix.nnz < 2:
        return reduce(*_all_valid(*entries(matrix)))
    return jax.lax.cond(
        columns_rise(matrix.indices, matrix.indptr),
        lambda matrix: reduce(*_all_valid(*entries(matrix))),
        lambda matrix: reduce(*_summed_distinct_entries(matrix, *entries(matrix))),
        matrix,
    )


def columns_rise(indices, indptr) -> jax.Array:
    """Whether the columns of every row strictly increase: `may_repeat` on traced arrays."""
    rises = indices[1:] > indices[:-1]
    starts = indptr[1:-1]
    # Entry `p` starting a row needs no rise from entry `p - 1`.
    lifted = dropped_outside(starts - 1, rises.shape[0])
    return jnp.all(rises.at[lifted].set(True, mode="drop"))


def at_distinct_positions(matrix, function, repeats: bool | None = None, others=()) -> jax.Array:
    """Values in `matrix.data`'s layout, on the same structure, whose sum at each position
    is `function` of the position's total, for a `function` that does not distribute over
    sums (`abs`, a power): the first entry of a position holds `function(total)`, any
    repeat of it 0, as scipy applies such functions to its summed (`_deduped_data`)
    values. A structure that stores each position once (known on the host, or found so at
    run time under `jit`) takes `function(data)` as it is. `repeats`: as in
    `distinct_entries`; `others`: more values in the same layout (another matrix on the
    same structure), whose totals `function` takes after `data`'s."""
    repeats = _repeats(matrix, repeats)
    values = (matrix.data, *others)
    if repeats is False:
        return function(*values)
    of_totals = functools.partial(_function_of_totals, matrix, function)
    if repeats is None:
        canonical = columns_rise(matrix.indices, matrix.indptr)
        return jax.lax.cond(canonical, function, of_totals, *values)
    return of_totals(*values)


def _function_of_totals(matrix, function, *values) -> jax.Array:
    rows, cols, _ = entries(matrix)
    nnz = matrix.nnz
    keys = host_keys(rows, cols, matrix.shape)
    if keys is not None:
        _, inverse = unique_positions(keys)
        first_entry = np.full(nnz, nnz)
        np.minimum.at(first_entry, inverse, np.arange(nnz))
        first = first_entry[inverse] == np.arange(nnz)
    else:
        _, _, inverse, _ = sorted_distinct(rows, cols, nnz, (0, 0))
        entry = jnp.arange(nnz, dtype=jnp.int32)
        first_entry = jnp.full((nnz,), nnz, jnp.int32).at[inverse].min(entry)
        first = first_entry[inverse] == entry
    result = function(*(segment_total(each, inverse, num_segments=nnz)[inverse] for each in values))
    return jnp.where(first, result, jnp.zeros((), result.dtype))


def _summed_distinct_entries(matrix, rows, cols, values):
    m = matrix.shape[0]
    unique_rows, unique_cols, inverse, found = sorted_distinct(rows, cols, matrix.nnz, (m, 0))
    summed = segment_total(values, inverse, num_segments=matrix.nnz)
    valid = jnp.arange(matrix.nnz, dtype=jnp.int32) < found
    return unique_rows, unique_cols, summed, valid


@register_for_format("dia", _reduce_distinct)
def _dia_reduce_distinct(matrix, reduce, repeats: bool | None):
    """A DIA matrix stores each position once."""
    return reduce(*_all_valid(*entries(matrix)))


def _all_valid(rows, cols, values):
    return rows, cols, values, jnp.ones(values.shape, bool)
