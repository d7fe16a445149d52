"""Module-level constructors, after `scipy.sparse`: `diags` (`diags_array`), `eye`
(`eye_array`), `identity`, `kron`, `block_diag`, `vstack`, `hstack`, `bmat`, `tril`, `triu`,
`random`, and `issparse`.

Each runs under `jax.jit` wherever the result's structure follows from static arguments:
shapes, DIA offsets and CSR entry counts are Python ints, values and CSR index arrays may be
traced. `kron` and `block_diag` of DIA matrices give DIA (the result's offsets follow from
the inputs' offsets and shapes); `vstack`, `hstack` and anything involving CSR give CSR.
Values keep their dtype (two dtypes combine by `jnp.result_type`), and gradients flow
through them to the inputs' values. As in scipy, `format=` (`"csr"` or `"dia"`) converts
the result, and the stacking functions take a `dtype=` for it.
"""

import collections
import functools
import itertools
import numbers

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._arrays import device_array
from ._base import (
    SparseMatrix,
    index_dtype_for,
    is_concrete,
    is_value_dtype,
    storable_dtype,
    validate_shape,
)
from ._batching import refuse_batch
from ._coordinates import entries, segment_total, select_entries
from ._csr import CSRMatrix
from ._csr_layout import indptr_from_counts, row_ids
from ._dia import DIAMatrix
from ._dia_layout import (
    active_diagonals,
    inside_slots,
    valid_rows,
    validate_offset,
    validate_offsets,
)
from ._interop import asformat

# `random` samples positions by one permutation of all `m * n` of them up to this many;
# beyond, and at densities up to 1/4, by drawing with replacement and redrawing repeats.
_PERMUTATION_LIMIT = 1 << 20


def diags(diagonals, offsets=0, shape=None, format=None, dtype=None) -> SparseMatrix:
    """A `DIAMatrix` from its diagonals, in scipy's `diags` convention (jit-able).

    Diagonal `d` holds `A[i, i + offsets[d]]` for consecutive rows `i`: its values run
    along the diagonal from its first entry inside the matrix, unlike DIA storage
    (`DIAMatrix(data, ...)`), whose `data[d, j]` sits in column `j`. A diagonal of one
    value is broadcast along the whole diagonal; a longer one is cut to the diagonal's
    length, as scipy does.

    **Arguments:**

    - `diagonals`: a sequence of 1-D arrays (or scalars), one per offset; or one 1-D array
        when `offsets` is an int.
    - `offsets`: distinct Python ints (or one int).
    - `shape`: `(m, n)`; by default square, `len(diagonals[0]) + abs(offsets[0])`.
    - `format`: `None` or `"dia"` for a `DIAMatrix`, `"csr"` for a `CSRMatrix`.
    - `dtype`: of the values (floating, complex or boolean); by default that of the
        diagonals (`jnp.result_type`), and the default floating dtype for integers.

    **Returns:** a `DIAMatrix` with these offsets, in the given order (or that matrix in
    `format`).
    """
    if isinstance(offsets, (numbers.Integral, np.integer)) and not isinstance(offsets, bool):
        if not _holds_one_diagonal(diagonals):
            raise ValueError(
                "`offsets` is one int but `diagonals` holds several diagonals: pass one "
                "offset per diagonal."
            )
        diagonals = [diagonals]
    offsets = validate_offsets(offsets)
    values = [_as_diagonal(diagonal) for diagonal in diagonals]
    if len(values) != len(offsets):
        raise ValueError(
            f"`diagonals` has {len(values)} diagonals but `offsets` has {len(offsets)} "
            "entries; they must match."
        )
    if shape is None:
        if not values:
            raise ValueError("`shape` is needed when `diagonals` is empty.")
        size = values[0].shape[0] + abs(offsets[0])
        shape = (size, size)
    shape = validate_shape(shape)
    dtype = _values_dtype(dtype, *values)
    m, n = shape
    for d, (diagonal, off) in enumerate(zip(values, offsets, strict=True)):
        length = min(m + off, n - off, m, n)
        if length < 0:
            raise ValueError(f"`offsets[{d}]` = {off} lies outside a matrix of shape {shape}.")
        if diagonal.ndim != 1:
            raise ValueError(f"`diagonals[{d}]` must be 1-D, got shape {diagonal.shape}.")
        if diagonal.shape[0] != 1 and diagonal.shape[0] < length:
            raise ValueError(
                f"`diagonals[{d}]` has {diagonal.shape[0]} values but the diagonal at offset "
                f"{off} of a matrix of shape {shape} has {length} entries."
            )
    matrix = DIAMatrix(_diagonals_as_data(values, offsets, shape, dtype), offsets, shape)
    return _in_format(matrix, format)


def _as_diagonal(diagonal) -> jax.Array:
    """One diagonal as an array of at least one dimension (a scalar as one value)."""
    array = device_array(diagonal)
    return array.reshape(1) if array.ndim == 0 else array


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _diagonals_as_data(values, offsets, shape, dtype) -> jax.Array:
    """`diags`' checked diagonals as DIA data, one compiled program: each diagonal (one
    value broadcast along it, a longer one cut to its length) moved to its columns."""
    m, n = shape
    rows = []
    for diagonal, off in zip(values, offsets, strict=True):
        length = min(m + off, n - off, m, n)
        if diagonal.shape[0] == 1:
            diagonal = jnp.broadcast_to(diagonal, (length,))
        first_column = max(0, off)
        rows.append(
            jnp.pad(diagonal[:length].astype(dtype), (first_column, n - first_column - length))
        )
    return jnp.stack(rows) if rows else jnp.zeros((0, n), dtype)


def eye(m: int, n: int | None = None, k: int = 0, dtype=None, format=None) -> SparseMatrix:
    """The `(m, n)` matrix with ones on diagonal `k` (jit-able), as `scipy.sparse.eye`.

    **Arguments:**

    - `m`, `n`: rows and columns (`n` defaults to `m`).
    - `k`: the offset of the diagonal of ones (0 main, > 0 above, < 0 below).
    - `dtype`: floating, complex or boolean; the default floating dtype if `None`.
    - `format`: `None` or `"dia"` for a `DIAMatrix`, `"csr"` for a `CSRMatrix`.

    **Returns:** a `DIAMatrix` with offsets `(k,)` (or that matrix in `format`).
    """
    shape = validate_shape((m, m if n is None else n))
    k = validate_offset(k)
    length = min(shape[0] + k, shape[1] - k, *shape)
    if length < 0:
        raise ValueError(f"`k` = {k} lies outside a matrix of shape {shape}.")
    return diags(jnp.ones((length,), _values_dtype(dtype)), k, shape, format)


def identity(n: int, dtype=None, format=None) -> SparseMatrix:
    """The `(n, n)` identity matrix as a `DIAMatrix` with offsets `(0,)` (jit-able).

    **Arguments:** `n`, the size; `dtype` and `format` as in `eye`.
    """
    return eye(n, dtype=dtype, format=format)


def kron(A: SparseMatrix, B: SparseMatrix, format=None) -> SparseMatrix:
    """The Kronecker product: `kron(A, B)[i * r + k, j * s + l] == A[i, j] * B[k, l]` for
    `B` of shape `(r, s)` (jit-able, differentiable in both factors' values).

    Two `DIAMatrix` factors give a `DIAMatrix`: for a square `B`, diagonal `a` of `A` and
    `b` of `B` make diagonal `a * s + b` of the product, so `kron(T, eye(N)) + kron(eye(N),
    T)` is a 2-D Laplacian with 5 static offsets. For a non-square `B` the offsets depend on
    the column as well: the product has a diagonal for each slot of `A` inside the matrix
    and each diagonal of `B`, each at most `s` long; convert to CSR first for such
    factors. Any `CSRMatrix` factor gives a `CSRMatrix` with `A.nnz * B.nnz` entries (DIA
    factors convert by `tocsr`: every slot inside the matrix, zeros included), row by row
    in the factors' order.

    **Arguments:** `A` and `B`, jaxsparse matrices; `format`, `"csr"` or `"dia"` to convert
    the result to.

    **Returns:** a `DIAMatrix` or `CSRMatrix` of shape `(p * r, q * s)`.
    """
    for name, factor in (("A", A), ("B", B)):
        _check_sparse(factor, name)
    refuse_batch("`kron`", A, B)
    if isinstance(A, DIAMatrix) and isinstance(B, DIAMatrix):
        on_host = B.shape[0] == B.shape[1] and _on_host(A, B)
        product = _kron_square_dia_on_host(A, B) if on_host else _kron_dia(A, B)
    else:
        product = _kron_csr(A.tocsr(), B.tocsr())
    return _in_format(product, format)


def block_diag(mats, format=None, dtype=None) -> SparseMatrix:
    """The block-diagonal matrix with the blocks `mats` in order (jit-able).

    Blocks need not be square: block `t` starts at the row and column after those of the
    blocks before it. All-DIA blocks give a `DIAMatrix` (block `t`'s diagonal `a` becomes
    diagonal `a + column_start - row_start`); any `CSRMatrix` gives a `CSRMatrix`.

    **Arguments:** `mats`, a non-empty sequence of jaxsparse matrices; `format` and `dtype`
    of the result, as in `vstack`.

    **Returns:** a `DIAMatrix` or `CSRMatrix` whose shape sums the blocks' shapes.
    """
    mats = _matrices(mats, "mats")
    if all(isinstance(block, DIAMatrix) for block in mats):
        return _in_format(_block_diag_dia(mats), format, dtype)
    column_starts = [0, *itertools.accumulate(block.shape[1] for block in mats[:-1])]
    shape = (sum(block.shape[0] for block in mats), sum(block.shape[1] for block in mats))
    stacked = _stack_rows([block.tocsr() for block in mats], column_starts, shape)
    return _in_format(stacked, format, dtype)


def vstack(blocks, format=None, dtype=None) -> SparseMatrix:
    """The blocks stacked top to bottom, as a `CSRMatrix` (jit-able).

    **Arguments:**

    - `blocks`: a non-empty sequence of jaxsparse matrices with the same number of columns.
    - `format`: `None` or `"csr"` for a `CSRMatrix`, `"dia"` for a `DIAMatrix` (outside
      `jit`: the offsets come from the structure).
    - `dtype`: of the result's values; by default the blocks' (`jnp.result_type`).

    **Returns:** a `CSRMatrix` whose rows are the blocks' rows in order.
    """
    blocks = _matrices(blocks, "blocks")
    _check_equal_sizes(blocks, axis=1)
    shape = (sum(block.shape[0] for block in blocks), blocks[0].shape[1])
    stacked = _stack_rows([block.tocsr() for block in blocks], [0] * len(blocks), shape)
    return _in_format(stacked, format, dtype)


def hstack(blocks, format=None, dtype=None) -> SparseMatrix:
    """The blocks side by side, as a `CSRMatrix` (jit-able).

    Row `i` of the result holds row `i` of each block in turn, columns shifted past the
    blocks before it.

    **Arguments:** `blocks`, a non-empty sequence of jaxsparse matrices with the same
    number of rows; `format` and `dtype` as in `vstack`.

    **Returns:** a `CSRMatrix` of shape `(m, sum of the blocks' columns)`.
    """
    blocks = [block.tocsr() for block in _matrices(blocks, "blocks")]
    _check_equal_sizes(blocks, axis=0)
    shape = (blocks[0].shape[0], sum(block.shape[1] for block in blocks))
    values_dtype, index_dtype, nnz = _joined_layout(blocks, shape)
    widths = tuple(block.shape[1] for block in blocks)
    with jax.ensure_compile_time_eval():  # a structure known on the host stays known
        indices, indptr, destinations = _side_by_side_structure(
            [block.indices for block in blocks],
            [block.indptr for block in blocks],
            widths,
            nnz,
            index_dtype,
        )
    values = _placed_values([block.data for block in blocks], destinations, nnz, values_dtype)
    return _in_format(CSRMatrix(values, indices, indptr, shape), format, dtype)


@functools.partial(jax.jit, static_argnums=(3, 4))
def _side_by_side_structure(block_indices, block_indptrs, widths, nnz: int, index_dtype):
    """`hstack`'s structure, one compiled program: `(indices, indptr, destinations)`,
    where entry `p` of block `b` lands at `destinations[b][p]`. The blocks' `widths` are
    arguments, not constants: new widths with the same entry counts compile nothing."""
    lengths = [jnp.diff(indptr).astype(index_dtype) for indptr in block_indptrs]
    indptr = indptr_from_counts(sum(lengths))
    indices = jnp.zeros((nnz,), index_dtype)
    before = jnp.zeros_like(indptr[:-1])  # entries of the same row in earlier blocks
    destinations, column_start = [], 0
    for block_cols, block_indptr, length, width in zip(
        block_indices, block_indptrs, lengths, widths, strict=True
    ):
        count = block_cols.shape[0]
        rows = row_ids(block_indptr, count)
        within = jnp.arange(count, dtype=index_dtype) - block_indptr[rows].astype(index_dtype)
        destinations.append(indptr[rows] + before[rows] + within)
        indices = indices.at[destinations[-1]].set(block_cols.astype(index_dtype) + column_start)
        before = before + length
        column_start += width
    return indices, indptr, destinations


@functools.partial(jax.jit, static_argnums=(2, 3))
def _placed_values(block_data, destinations, nnz: int, dtype) -> jax.Array:
    """The blocks' values at their `destinations` in `nnz` slots, one compiled program."""
    data = jnp.zeros((nnz,), dtype)
    for values, destination in zip(block_data, destinations, strict=True):
        data = data.at[destination].set(values.astype(dtype))
    return data


def diags_array(diagonals, /, *, offsets=0, shape=None, format=None, dtype=None):
    """`diags` under scipy's newer name (`scipy.sparse.diags_array`)."""
    return diags(diagonals, offsets, shape, format, dtype)


def eye_array(m: int, n: int | None = None, *, k: int = 0, dtype=None, format=None):
    """`eye` under scipy's newer name (`scipy.sparse.eye_array`)."""
    return eye(m, n, k, dtype, format)


def issparse(value) -> bool:
    """Whether `value` is a jaxsparse matrix (`DIAMatrix`, `CSRMatrix`), as scipy's."""
    return isinstance(value, SparseMatrix)


def tril(A: SparseMatrix, k: int = 0, format=None) -> SparseMatrix:
    """The entries of `A` on and below diagonal `k` (`col - row <= k`), as `scipy.sparse.tril`.

    DIA keeps its offsets up to `k` (jit-able). CSR drops the other entries on the host when
    the indices are concrete; under `jit` it keeps them as explicit zeros (same structure).
    `format`, `"csr"` or `"dia"`, converts the result.
    """
    return _in_format(_triangle(A, k, lower=True), format)


def triu(A: SparseMatrix, k: int = 0, format=None) -> SparseMatrix:
    """The entries of `A` on and above diagonal `k` (`col - row >= k`); see `tril`."""
    return _in_format(_triangle(A, k, lower=False), format)


def _triangle(A, k: int, *, lower: bool):
    _check_sparse(A, "A")
    k = validate_offset(k)
    if isinstance(A, DIAMatrix):
        keep = [d for d, off in enumerate(A.offsets) if (off <= k if lower else off >= k)]
        data = A.data[..., np.asarray(keep, np.int64), :]
        return DIAMatrix(data, tuple(A.offsets[d] for d in keep), A.shape)
    refuse_batch("`js.tril`/`js.triu` of a `CSRMatrix`", A)
    rows, cols, _ = entries(A)
    # Differences of non-negative indices fit their dtype; `k` beyond `[-m, n]` acts as
    # its bound does.
    index_dtype = np.promote_types(rows.dtype, cols.dtype)
    diagonal = cols.astype(index_dtype) - rows.astype(index_dtype)
    k = min(max(k, -A.shape[0]), A.shape[1])
    inside = diagonal <= k if lower else diagonal >= k
    if isinstance(rows, np.ndarray):
        return select_entries(A, inside)
    return A.with_data(jnp.where(inside, A.data, jnp.zeros((), A.dtype)))


def bmat(blocks, format=None, dtype=None) -> SparseMatrix:
    """The matrix of the grid `blocks` (a list of rows of matrices or `None` for zero
    blocks), as `scipy.sparse.bmat`; a `CSRMatrix` (jit-able), or one in `format` and
    `dtype` as in `vstack`.

    The matrices of a block row share a height, those of a block column a width; a block
    row or column of `None` only is empty (height or width 0), as scipy's.
    """
    grid = [list(row) for row in blocks]
    if not grid or not grid[0] or any(len(row) != len(grid[0]) for row in grid):
        raise ValueError("`blocks` must be a non-empty rectangular grid (a list of rows).")
    heights = [_block_size(row, 0, f"block row {i}") for i, row in enumerate(grid)]
    columns = [[row[j] for row in grid] for j in range(len(grid[0]))]
    widths = [_block_size(column, 1, f"block column {j}") for j, column in enumerate(columns)]
    present = [block for row in grid for block in row if block is not None]
    # No matrix at all: the default float type, as scipy's float64.
    blocks_dtype = jnp.result_type(*(block.dtype for block in present)) if present else float
    rows = []
    for height, row in zip(heights, grid, strict=True):
        cells = [
            _empty_csr((height, width), blocks_dtype) if block is None else block
            for width, block in zip(widths, row, strict=True)
        ]
        rows.append(hstack(cells))
    return vstack(rows, format, dtype)


def _block_size(blocks, axis: int, where: str) -> int:
    sizes = {block.shape[axis] for block in blocks if block is not None}
    for block in blocks:
        if block is not None:
            _check_sparse(block, "blocks")
    if len(sizes) > 1:
        what = "heights" if axis == 0 else "widths"
        raise ValueError(f"`blocks`: {where} needs blocks of equal {what}, got {sorted(sizes)}.")
    return sizes.pop() if sizes else 0


def _empty_csr(shape, dtype) -> CSRMatrix:
    return CSRMatrix(
        jnp.zeros((0,), dtype),
        np.zeros((0,), np.int32),
        np.zeros((shape[0] + 1,), np.int32),
        shape,
    )


def random(
    m: int, n: int, density: float = 0.01, format: str = "csr", dtype=None, *, key
) -> SparseMatrix:
    """A random `(m, n)` matrix with `round(density * m * n)` entries at distinct uniformly
    random positions, values uniform in `[0, 1)` (complex: real and imaginary parts each),
    as `scipy.sparse.random`.

    `format="csr"` runs under `jit` (the number of entries is static; the key may be
    traced), columns sorted within each row. `format="dia"` needs a concrete `key`: the
    offsets are static and depend on the positions drawn.

    **Arguments:**

    - `m`, `n`: the shape.
    - `density`: the fraction of stored entries, in `[0, 1]`.
    - `format`: `"csr"` or `"dia"`.
    - `dtype`: floating or complex; the default floating dtype if `None`.
    - `key`: a `jax.random` key (keyword-only: JAX has no global random state).

    **Returns:** a `CSRMatrix` or `DIAMatrix`.
    """
    shape = validate_shape((m, n))
    if isinstance(density, bool) or not isinstance(density, numbers.Real):
        raise TypeError(f"`density` must be a Python number, got {density!r}.")
    if not 0 <= density <= 1:
        raise ValueError(f"`density` must lie in [0, 1], got {density}.")
    if format not in ("csr", "dia"):
        raise ValueError(f'`format` must be "csr" or "dia", got {format!r}.')
    if format == "dia" and not is_concrete(key):
        raise TypeError(
            '`random(..., format="dia")` needs a concrete `key`: the DIA offsets are static '
            'and depend on the positions drawn. Use `format="csr"` under `jit`, or call '
            "it outside `jit`."
        )
    dtype = _values_dtype(dtype)
    if dtype == jnp.bool_:
        raise TypeError("`dtype` must be floating or complex: random values are numbers.")
    m, n = shape
    total = m * n
    nnz = int(round(density * total))
    position_dtype = np.int32 if total <= np.iinfo(np.int32).max else np.int64
    if np.dtype(position_dtype) != jax.dtypes.canonicalize_dtype(position_dtype):
        raise ValueError(
            f"`random` of shape {shape} needs 64-bit positions: enable `jax_enable_x64`."
        )
    positions_key, values_key = jax.random.split(key)
    positions = jnp.sort(_distinct_positions(positions_key, total, nnz, position_dtype))
    index_dtype = index_dtype_for(shape, nnz)
    rows = (positions // max(n, 1)).astype(index_dtype)
    counts = jnp.zeros((m,), index_dtype).at[rows].add(1)
    matrix = CSRMatrix(
        _uniform_values(values_key, nnz, dtype),
        (positions % max(n, 1)).astype(index_dtype),
        indptr_from_counts(counts),
        shape,
    )
    return matrix.todia().astype(dtype) if format == "dia" else matrix


def _in_format(matrix, format, dtype=None):
    """`matrix` converted to `format` and `dtype` where given (scipy's `format=`, `dtype=`)."""
    if dtype is not None:
        matrix = matrix.astype(dtype)
    return matrix if format is None else asformat(matrix, format)


def _holds_one_diagonal(diagonals) -> bool:
    """Whether `diagonals` is one diagonal (a scalar, a 1-D array, a list of scalars)."""
    if isinstance(diagonals, (jax.Array, np.ndarray)):
        return diagonals.ndim <= 1
    if isinstance(diagonals, (numbers.Number, np.generic)):
        return True
    diagonals = list(diagonals)
    first = diagonals[0] if diagonals else None
    return not diagonals or isinstance(first, (numbers.Number, np.generic)) or np.ndim(first) == 0


def _values_dtype(dtype, *values) -> np.dtype:
    """`dtype` if given (floating, complex or boolean), else that of `values`, integers and
    an empty list giving the default floating dtype (`storable_dtype`)."""
    if dtype is None:
        if not values:
            return np.dtype(jax.dtypes.canonicalize_dtype(np.float64))
        return storable_dtype(jnp.result_type(*values))
    dtype = np.dtype(dtype)
    if not is_value_dtype(dtype):
        raise TypeError(f"`dtype` must be floating or complex (or boolean), got {dtype}.")
    return dtype


def _check_sparse(matrix, name: str) -> None:
    if not isinstance(matrix, SparseMatrix):
        raise TypeError(
            f"`{name}` must be a jaxsparse matrix, got {type(matrix).__name__}; convert "
            "dense arrays with `DIAMatrix.fromdense` or `CSRMatrix.fromdense`."
        )


def _matrices(matrices, name: str) -> list:
    """`matrices` as a non-empty list of jaxsparse matrices, or a clear error."""
    if isinstance(matrices, SparseMatrix):
        raise TypeError(f"`{name}` must be a sequence of matrices, got one matrix.")
    matrices = list(matrices)
    if not matrices:
        raise ValueError(f"`{name}` must hold at least one matrix.")
    for t, matrix in enumerate(matrices):
        _check_sparse(matrix, f"{name}[{t}]")
    refuse_batch("Stacking matrices", *matrices)
    return matrices


def _check_equal_sizes(blocks, axis: int) -> None:
    what = ("rows", "columns")[axis]
    for t, block in enumerate(blocks[1:], start=1):
        if block.shape[axis] != blocks[0].shape[axis]:
            raise ValueError(
                f"`blocks[{t}]` has {block.shape[axis]} {what} but `blocks[0]` has "
                f"{blocks[0].shape[axis]}; they must match."
            )


def _inside_slots(matrix: DIAMatrix, d: int):
    """Diagonal `d` of `matrix`'s `data` with its ignored slots zeroed, or `None` when the
    diagonal has no slot inside the matrix."""
    lo, hi = valid_rows(matrix.offsets[d], matrix.shape)
    if hi <= lo:
        return None
    first, n = lo + matrix.offsets[d], matrix.shape[1]
    return jnp.pad(matrix.data[d, first : first + hi - lo], (first, n - first - (hi - lo)))


_HOST_DTYPES = tuple(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))


def _on_host(*matrices) -> bool:
    """Whether every value is known (not traced) in a dtype numpy computes in."""
    return all(
        is_concrete(matrix.data) and np.dtype(matrix.dtype) in _HOST_DTYPES for matrix in matrices
    )


def _kron_square_dia_on_host(A: DIAMatrix, B: DIAMatrix) -> DIAMatrix:
    """`_kron_dia` for a square `B` and known values, in numpy: no program to compile (a
    chain of Kronecker products of small factors would otherwise compile one per shape)."""
    (p, q), (r, s) = A.shape, B.shape
    dtype = np.result_type(A.dtype, B.dtype)
    terms = collections.defaultdict(list)
    for a, off_a in enumerate(A.offsets):
        row_a = _inside_slots_on_host(A, a)
        for b, off_b in enumerate(B.offsets):
            row_b = _inside_slots_on_host(B, b)
            if row_a is not None and row_b is not None:
                terms[off_a * s + off_b].append(np.outer(row_a, row_b).reshape(-1))
    offsets = tuple(sorted(terms))
    rows = [np.sum(terms[off], axis=0, dtype=dtype) for off in offsets]
    data = np.stack(rows) if rows else np.zeros((0, q * s), dtype)
    # Known values stay known under an outer `jit`, so a chain of products stays on the host.
    with jax.ensure_compile_time_eval():
        return DIAMatrix(data.astype(dtype), offsets, (p * r, q * s))


def _inside_slots_on_host(matrix: DIAMatrix, d: int):
    """`_inside_slots` in numpy."""
    lo, hi = valid_rows(matrix.offsets[d], matrix.shape)
    if hi <= lo:
        return None
    row = np.zeros(matrix.shape[1], matrix.dtype)
    first = lo + matrix.offsets[d]
    # To numpy before slicing: under an outer `jit` a slice of a known array is traced.
    row[first : first + hi - lo] = np.asarray(matrix.data)[d, first : first + hi - lo]
    return row


# Jitted, as the other structure builders: an eager call compiles one program, and a second
# call with the same shapes, dtypes and offsets reuses it.
@jax.jit
def _kron_dia(A: DIAMatrix, B: DIAMatrix) -> DIAMatrix:
    """`kron` of two DIA matrices. Entry `(i, j)` of `A` on diagonal `a` and `(k, l)` of `B`
    on diagonal `b` land at column `j * s + l` on diagonal `j * (s - r) + a * r + b`."""
    (p, q), (r, s) = A.shape, B.shape
    shape = (p * r, q * s)
    dtype = jnp.result_type(A.dtype, B.dtype)
    if r == s:
        return _kron_dia_square(A, B, dtype)
    pairs = []
    for a, off_a in enumerate(A.offsets):
        row_a = _inside_slots(A, a)
        for b, off_b in enumerate(B.offsets):
            row_b = _inside_slots(B, b)
            if row_a is not None and row_b is not None:
                pairs.append((off_a, off_b, row_a.astype(dtype), row_b.astype(dtype)))
    # Each stored column `j` of `A`'s diagonal starts a diagonal of its own.
    placed = []
    for off_a, off_b, row_a, row_b in pairs:
        lo, hi = valid_rows(off_a, A.shape)
        columns_a = np.arange(lo + off_a, hi + off_a)
        placed.append((columns_a, columns_a * (s - r) + off_a * r + off_b, row_a, row_b))
    offsets = tuple(sorted({int(off) for _, offs, _, _ in placed for off in offs}))
    position = {off: d for d, off in enumerate(offsets)}
    # Blocks overlap in slots outside the matrix, where they hold zeros: added, booleans
    # as numbers (they have no add).
    summed = jnp.float32 if dtype == jnp.bool_ else dtype
    data = jnp.zeros((len(offsets), q * s), summed)
    for columns_a, offs, row_a, row_b in placed:
        diagonal = np.asarray([position[int(off)] for off in offs])
        columns = columns_a[:, None] * s + np.arange(s)[None, :]
        block = row_a[columns_a][:, None] * row_b[None, :]
        data = data.at[diagonal[:, None], columns].add(block.astype(summed))
    return DIAMatrix(data.astype(dtype), offsets, shape)


def _kron_dia_square(A: DIAMatrix, B: DIAMatrix, dtype) -> DIAMatrix:
    """`_kron_dia` for a square `B`: every pair of diagonals `(a, b)` is the outer product of
    their rows on diagonal `a * s + b`, all pairs in one broadcast product, so a chain of
    Kronecker products stays a few operations per factor and compiles fast."""
    (p, q), s = A.shape, B.shape[1]
    a_index, a_offsets = active_diagonals(A.offsets, A.shape)
    b_index, b_offsets = active_diagonals(B.offsets, B.shape)
    if not a_offsets or not b_offsets:
        return DIAMatrix(jnp.zeros((0, q * s), dtype), (), (p * s, q * s))
    rows_a = inside_slots(A.data, A.offsets, A.shape, a_index).astype(dtype)
    rows_b = inside_slots(B.data, B.offsets, B.shape, b_index).astype(dtype)
    pairs = (rows_a[:, None, :, None] * rows_b[None, :, None, :]).reshape(-1, q * s)
    pair_offsets = (np.asarray(a_offsets)[:, None] * s + np.asarray(b_offsets)[None, :]).ravel()
    offsets, slot = np.unique(pair_offsets, return_inverse=True)
    if offsets.size == pair_offsets.size:
        # Distinct offsets (the rule when `B` has no two diagonals `s` apart): a reordering.
        order = np.argsort(pair_offsets)
        data = pairs if np.all(order[1:] > order[:-1]) else pairs[order]
    else:
        data = segment_total(pairs, slot.ravel(), num_segments=offsets.size)
    return DIAMatrix(data, tuple(int(off) for off in offsets), (p * s, q * s))


def _kron_csr(A: CSRMatrix, B: CSRMatrix) -> CSRMatrix:
    """`kron` of two CSR matrices: row `i * r + k` holds, for each entry of `A`'s row `i`
    in order, the entries of `B`'s row `k`."""
    (p, q), (r, s) = A.shape, B.shape
    shape = (p * r, q * s)
    nnz = A.nnz * B.nnz
    dtype = jnp.result_type(A.dtype, B.dtype)
    index_dtype = np.promote_types(
        _csr_index_dtype(shape, nnz), np.promote_types(A.indices.dtype, B.indices.dtype)
    )
    with jax.ensure_compile_time_eval():  # a structure known on the host stays known
        indptr, indices, entry_a, entry_b = _kron_csr_structure(
            A.indices, A.indptr, B.indices, B.indptr, s=s, nnz=nnz, index_dtype=index_dtype
        )
    data = A.data[entry_a].astype(dtype) * B.data[entry_b].astype(dtype)
    return CSRMatrix(data, indices, indptr, shape)


@functools.partial(jax.jit, static_argnames=("s", "nnz", "index_dtype"))
def _kron_csr_structure(indices_a, indptr_a, indices_b, indptr_b, *, s: int, nnz: int, index_dtype):
    """The row pointers and column indices of `kron(A, B)` for `B` with `s` columns, and
    the entries of `A` and of `B` whose values make each of its entries."""
    lengths_a = jnp.diff(indptr_a).astype(index_dtype)
    lengths_b = jnp.diff(indptr_b).astype(index_dtype)
    indptr = indptr_from_counts(jnp.outer(lengths_a, lengths_b).reshape(-1))
    if nnz == 0:
        empty = jnp.zeros((0,), index_dtype)
        return indptr, empty, empty, empty
    rows = row_ids(indptr, nnz)
    within = jnp.arange(nnz, dtype=index_dtype) - indptr[rows]
    row_a, row_b = rows // len(lengths_b), rows % len(lengths_b)
    entry_a = indptr_a[row_a].astype(index_dtype) + within // lengths_b[row_b]
    entry_b = indptr_b[row_b].astype(index_dtype) + within % lengths_b[row_b]
    indices = indices_a[entry_a].astype(index_dtype) * s + indices_b[entry_b].astype(index_dtype)
    return indptr, indices, entry_a, entry_b


def _block_diag_dia(blocks) -> DIAMatrix:
    """`block_diag` of DIA blocks: each output diagonal concatenates, block by block, that
    block's diagonal (ignored slots zeroed) or zeros."""
    shape = (sum(block.shape[0] for block in blocks), sum(block.shape[1] for block in blocks))
    dtype = jnp.result_type(*(block.dtype for block in blocks))
    shifts, row_start, column_start = [], 0, 0
    for block in blocks:
        shifts.append(column_start - row_start)
        row_start += block.shape[0]
        column_start += block.shape[1]
    pieces = [{} for _ in blocks]
    for t, (block, shift) in enumerate(zip(blocks, shifts, strict=True)):
        for d, off in enumerate(block.offsets):
            row = _inside_slots(block, d)
            if row is not None:
                pieces[t][off + shift] = row.astype(dtype)
    offsets = tuple(sorted({off for piece in pieces for off in piece}))
    rows = [
        jnp.concatenate(
            [
                piece.get(off, jnp.zeros((block.shape[1],), dtype))
                for piece, block in zip(pieces, blocks, strict=True)
            ]
        )
        for off in offsets
    ]
    data = jnp.stack(rows) if rows else jnp.zeros((0, shape[1]), dtype)
    return DIAMatrix(data, offsets, shape)


def _csr_index_dtype(shape, nnz: int):
    """The index dtype of a CSR result; 64-bit indices without `jax_enable_x64` would wrap
    silently, so they are a ValueError."""
    index_dtype = index_dtype_for(shape, nnz)
    if np.dtype(index_dtype) != jax.dtypes.canonicalize_dtype(index_dtype):
        raise ValueError(
            f"a `CSRMatrix` of shape {shape} with {nnz=} needs 64-bit indices: enable "
            "`jax_enable_x64`."
        )
    return index_dtype


def _joined_layout(blocks, shape):
    """The value dtype, index dtype and entry count of a CSR matrix of `shape` holding the
    entries of all the CSR `blocks`."""
    nnz = sum(block.nnz for block in blocks)
    dtype = jnp.result_type(*(block.dtype for block in blocks))
    index_dtype = np.promote_types(
        _csr_index_dtype(shape, nnz), np.result_type(*(block.indices.dtype for block in blocks))
    )
    return dtype, index_dtype, nnz


def _stack_rows(blocks, column_starts, shape) -> CSRMatrix:
    """The CSR `blocks` one below the other, block `t`'s columns shifted by
    `column_starts[t]`, in a matrix of `shape`."""
    dtype, index_dtype, _ = _joined_layout(blocks, shape)
    data = _joined_values([block.data for block in blocks], dtype)
    with jax.ensure_compile_time_eval():  # a structure known on the host stays known
        indices, indptr = _stacked_structure(
            [block.indices for block in blocks],
            [block.indptr for block in blocks],
            tuple(column_starts),
            index_dtype,
        )
    return CSRMatrix(data, indices, indptr, shape)


@functools.partial(jax.jit, static_argnums=1)
def _joined_values(block_data, dtype) -> jax.Array:
    return jnp.concatenate([values.astype(dtype) for values in block_data])


@functools.partial(jax.jit, static_argnums=3)
def _stacked_structure(block_indices, block_indptrs, column_starts, index_dtype):
    """`_stack_rows`' `(indices, indptr)`, one compiled program (`column_starts` are
    arguments, as `hstack`'s widths)."""
    indices = jnp.concatenate(
        [
            cols.astype(index_dtype) + start
            for cols, start in zip(block_indices, column_starts, strict=True)
        ]
    )
    pointers, before = [jnp.zeros((1,), index_dtype)], 0
    for cols, indptr in zip(block_indices, block_indptrs, strict=True):
        pointers.append(indptr[1:].astype(index_dtype) + before)
        before += cols.shape[0]
    return indices, jnp.concatenate(pointers)


def _distinct_positions(key, total: int, count: int, dtype) -> jax.Array:
    """`count` distinct integers drawn uniformly from `[0, total)`, in no particular order."""
    if count == 0:
        return jnp.zeros((0,), dtype)
    if total <= _PERMUTATION_LIMIT or 4 * count > total:
        return jax.random.permutation(key, jnp.arange(total, dtype=dtype))[:count]
    return _redrawing_repeats(key, total, count, dtype)


def _redrawing_repeats(key, total: int, count: int, dtype) -> jax.Array:
    """`count` distinct integers from `[0, total)`, sorted: draws with replacement, then
    redraws every repeated copy until none is left. Uniform over the subsets, since no step
    depends on which integers the values are; `O(count)` memory whatever `total`, and few
    rounds while `count` is a small fraction of `total`."""

    def repeated(positions):
        return jnp.concatenate([jnp.zeros((1,), bool), positions[1:] == positions[:-1]])

    def redraw(state):
        key, positions = state
        key, fresh_key = jax.random.split(key)
        fresh = jax.random.randint(fresh_key, (count,), 0, total, dtype)
        return key, jnp.sort(jnp.where(repeated(positions), fresh, positions))

    key, first_key = jax.random.split(key)
    first = jnp.sort(jax.random.randint(first_key, (count,), 0, total, dtype))
    _, positions = lax.while_loop(lambda state: jnp.any(repeated(state[1])), redraw, (key, first))
    return positions


def _uniform_values(key, count: int, dtype) -> jax.Array:
    """`count` values uniform in `[0, 1)`; complex ones have uniform real and imaginary
    parts, as scipy draws them."""
    if not jnp.issubdtype(dtype, jnp.complexfloating):
        return jax.random.uniform(key, (count,), dtype)
    real_dtype = jnp.finfo(dtype).dtype
    real_key, imag_key = jax.random.split(key)
    return lax.complex(
        jax.random.uniform(real_key, (count,), real_dtype),
        jax.random.uniform(imag_key, (count,), real_dtype),
    )
