"""Elementwise arithmetic of sparse matrices, with scipy.sparse's array semantics.

- `add`/`subtract`: DIA with DIA gives DIA (the union of the offsets, static); a sum with a
  CSR operand gives CSR with the union of the structures, summed and sorted. Its number of
  entries depends on the index values: counted on the host when they are concrete, a static
  `nnz` under `jax.jit` (two CSR matrices sharing their index arrays need none). With a
  dense operand the result is dense.
- `multiply` (`*`): with a scalar, a dense matrix or a broadcast vector (row or column
  scaling) the result keeps the sparse operand's format and structure. Sparse with sparse
  keeps the intersection: DIA with DIA gives DIA (the common offsets); otherwise CSR, on the
  first CSR operand's structure, with the entries absent from the other operand dropped on
  the host when the indices are concrete, kept as explicit zeros under `jit` (so no `nnz`
  is needed there).
- `divide` by a scalar, `negative`, `absolute`, `power`, `conj`, `real`, `imag` act on the
  stored values (scipy sums repeated CSR entries first; call `sum_duplicates()` before
  `abs` or `**` on a matrix holding repeats).
- Batched matrices (`docs/batching.md`) combine member by member with operands of the same
  batch (a dense one of shape `(*batch, m, n)`) or with unbatched ones shared by the batch.
"""

import functools
import numbers

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse

from ._arrays import take_at
from ._base import (
    SparseMatrix,
    _as_scalar,
    check_broadcasts,
    check_value_dtype,
    dense_shape_error,
    index_dtype_for,
    is_concrete,
    register_for_format,
)
from ._batching import (
    batch_shape,
    batches_structure,
    is_batched,
    map_over_batch,
    over_batch,
    pair_dense_with_batch,
    refuse_batch,
)
from ._coordinates import (
    at_distinct_positions,
    columns_rise,
    csr_from_entries,
    entries,
    entries_to_csr,
    lookup,
    may_repeat,
    select_entries,
    static_nnz,
    stored_on_host,
    unless_invalid_structure,
)
from ._csr_sum import add_known, add_traced, operand_values
from ._dia_layout import inside_mask
from ._structure_primitive import runs_natively


def _is_scalar(value) -> bool:
    # Python bools too: scipy takes `A * True` as it takes `A * np.True_`.
    if isinstance(value, numbers.Number):
        return True
    return isinstance(value, (jax.Array, np.ndarray, np.generic)) and jnp.ndim(value) == 0


def _as_dense(value, operator: str) -> jax.Array:
    if value is None or scipy.sparse.issparse(value):
        raise TypeError(
            f"`{operator}` between a sparse matrix and {type(value).__name__} is not supported"
            + ("; convert it with `from_scipy`." if value is not None else ".")
        )
    try:
        array = jnp.asarray(value)
    except (TypeError, ValueError):
        raise TypeError(
            f"`{operator}` between a sparse matrix and {type(value).__name__} is not supported."
        ) from None
    if not (jnp.issubdtype(array.dtype, jnp.number) or array.dtype == jnp.bool_):
        raise TypeError(f"`{operator}`: the dense operand must be numeric, got {array.dtype}.")
    return array


def _check_same_shape(a, b, operator: str) -> None:
    if a.shape != b.shape:
        raise ValueError(f"inconsistent shapes for `{operator}`: {a.shape} and {b.shape}.")


def add(a, b, *, nnz: int | None = None):
    """`a + b` for sparse matrices and dense arrays (at least one of them sparse).

    **Arguments:**

    - `a`, `b`: a `DIAMatrix`, `CSRMatrix` or dense array (same shape as the sparse one).
    - `nnz`: the number of entries of a CSR result, needed under `jax.jit` when it depends
      on traced indices (ignored for a DIA or dense result).

    **Returns:** DIA for DIA + DIA, CSR for a sum with a CSR operand, dense with a dense
    operand. Adding a nonzero scalar is a TypeError (it would fill the matrix), as scipy.
    """
    return _add(a, b, sign=1, nnz=nnz, operator="+")


def subtract(a, b, *, nnz: int | None = None):
    """`a - b`; see `add`."""
    return _add(a, b, sign=-1, nnz=nnz, operator="-")


def _add(a, b, *, sign: int, nnz, operator: str):
    if is_batched(a) or is_batched(b):
        both_sparse = isinstance(a, SparseMatrix) and isinstance(b, SparseMatrix)
        if nnz is None and both_sparse and (batches_structure(a) or batches_structure(b)):
            refuse_batch(
                f"sparse `{operator}` with a CSR operand, whose structure may differ per "
                "member, without a static `nnz`",
                a,
                b,
            )
        batch = batch_shape(a if is_batched(a) else b)
        a, b = (pair_dense_with_batch(value, batch, operator) for value in (a, b))
        return map_over_batch(functools.partial(_add, sign=sign, nnz=nnz, operator=operator), a, b)
    a_sparse, b_sparse = isinstance(a, SparseMatrix), isinstance(b, SparseMatrix)
    if not (a_sparse and b_sparse):
        sparse, dense = (a, b) if a_sparse else (b, a)
        if _is_scalar(dense):
            if is_concrete(dense) and dense == 0:
                return a if a_sparse else negative(b) if sign < 0 else b
            raise TypeError(
                f"`{operator}` of a sparse matrix and a nonzero scalar would fill the "
                "matrix; use `todense()` first."
            )
        dense = _as_dense(dense, operator)
        check_broadcasts(operator, sparse.shape, dense.shape)
        _refuse_boolean_subtraction(sparse.dtype, dense.dtype, sign)
        first, second = (a.todense(), dense) if a_sparse else (dense, b.todense())
        return first + second if sign > 0 else first - second
    _check_same_shape(a, b, operator)
    dtype = jnp.result_type(a.dtype, b.dtype)
    _refuse_boolean_subtraction(a.dtype, b.dtype, sign)
    if type(a) is type(b):
        return _add_same_format(a, b, sign=sign, dtype=dtype, nnz=nnz, operator=operator)
    return _add_entries(a, b, sign=sign, dtype=dtype, nnz=nnz, operator=operator)


def _refuse_boolean_subtraction(a_dtype, b_dtype, sign: int) -> None:
    """Booleans add by `or`; their difference is a TypeError, as in numpy."""
    if sign < 0 and a_dtype == b_dtype == jnp.bool_:
        raise TypeError(
            "`-` of two boolean operands is not supported, as in numpy: use `A != B` for "
            "their logical difference (xor), or cast first: `A.astype(jnp.float32)`."
        )


def _signed(values, sign: int):
    """`values` or `-values` (`sign * values` would turn booleans into integers)."""
    return values if sign > 0 else -values


@functools.singledispatch
def _add_same_format(a, b, *, sign: int, dtype, nnz, operator: str):
    return _add_entries(a, b, sign=sign, dtype=dtype, nnz=nnz, operator=operator)


@register_for_format("dia", _add_same_format)
def _add_dia_pair(a, b, *, sign: int, dtype, nnz, operator: str):
    return _add_dia(a, b, sign=sign, dtype=np.dtype(dtype))


@register_for_format("csr", _add_same_format)
def _add_csr_pair(a, b, *, sign: int, dtype, nnz, operator: str):
    if a.indices is b.indices and a.indptr is b.indptr:  # one structure: add the values
        return a.with_data(a.data.astype(dtype) + _signed(b.data.astype(dtype), sign))
    traced = not is_concrete(a.indices, a.indptr, b.indices, b.indptr)
    if traced and nnz and a.nnz and b.nnz and a.shape[0] * a.shape[1]:
        nnz = static_nnz(None, nnz, f"sparse `{operator}`")
        return _add_csr_traced(a, b, sign=sign, dtype=np.dtype(dtype), nnz=nnz)
    if not traced and _merges_natively(a, b):
        return add_known(a, b, sign=sign, dtype=np.dtype(dtype), nnz=nnz)
    return _add_entries(a, b, sign=sign, dtype=dtype, nnz=nnz, operator=operator)


def _merges_natively(a, b) -> bool:
    """Whether the native row merge (`_csr_union`) adds these concrete structures here: both
    canonical (columns strictly increasing within rows), one matrix each, with entries,
    and the native merge the one an eager call runs (a sort on the host beats the search)."""
    return (
        a.nnz > 0
        and b.nnz > 0
        and runs_natively(index_dtype_for(a.shape, a.nnz + b.nnz))
        and may_repeat(a) is False
        and may_repeat(b) is False
    )


@functools.partial(jax.jit, static_argnames=("sign", "dtype", "nnz"))
def _add_csr_traced(a, b, *, sign: int, dtype, nnz: int):
    """`a + sign * b` for traced CSR structures and a static `nnz`: the rows merged where
    the columns of both strictly increase within rows (`columns_rise`, checked at run time;
    both branches compile), else the positions sorted as for any list of entries. Each
    branch reads the values itself, so that XLA fuses their check (`stored_values`) into
    the branch's gathers rather than writing them out for the branch to read."""

    def merged(a, b):
        return add_traced(a, b, *operand_values(a, b, sign, dtype), nnz)

    def sorted_positions(a, b):
        a_rows, a_cols, _ = entries(a)
        b_rows, b_cols, _ = entries(b)
        rows, cols = _concatenate_indices(a_rows, b_rows), _concatenate_indices(a_cols, b_cols)
        values = jnp.concatenate(operand_values(a, b, sign, dtype))
        return csr_from_entries(rows, cols, values, a.shape, nnz)

    rise = columns_rise(a.indices, a.indptr) & columns_rise(b.indices, b.indptr)
    return jax.lax.cond(rise, merged, sorted_positions, a, b)


def _add_entries(a, b, *, sign: int, dtype, nnz, operator: str):
    """`a + sign * b` on the union of both structures, as CSR."""
    a_rows, a_cols, a_values = entries(a)
    b_rows, b_cols, b_values = entries(b)
    return entries_to_csr(
        _concatenate_indices(a_rows, b_rows),
        _concatenate_indices(a_cols, b_cols),
        jnp.concatenate([a_values.astype(dtype), _signed(b_values.astype(dtype), sign)]),
        a.shape,
        nnz=nnz,
        operation=f"sparse `{operator}` with a CSR operand",
    )


def _concatenate_indices(first, second) -> jax.Array:
    """Two index arrays end to end, in the wider of their dtypes (strict promotion-safe)."""
    dtype = np.promote_types(first.dtype, second.dtype)
    if isinstance(first, np.ndarray) and isinstance(second, np.ndarray):
        return np.concatenate([first.astype(dtype), second.astype(dtype)])
    return jnp.concatenate([jnp.asarray(first).astype(dtype), jnp.asarray(second).astype(dtype)])


@functools.partial(jax.jit, static_argnames=("sign", "dtype"))
def _add_dia(a, b, sign: int, dtype):
    """The union of the diagonals of two DIA matrices, static."""
    offsets = tuple(sorted(set(a.offsets) | set(b.offsets)))
    data = _placed_rows(a, offsets, dtype) + _signed(_placed_rows(b, offsets, dtype), sign)
    return type(a)(data, offsets, a.shape)


def _placed_rows(matrix, offsets: tuple[int, ...], dtype) -> jax.Array:
    """`matrix`'s diagonals at their rows among `offsets` (a superset), zero rows elsewhere.

    One gather with static indices, not an operation per diagonal, so that sums of many
    terms (and their transposes under autodiff) stay small programs that compile fast.
    """
    data = matrix.data.astype(dtype)
    if matrix.offsets == offsets:
        return data
    if not matrix.offsets:  # no rows to take from (`take` refuses an empty axis)
        return jnp.zeros((len(offsets), *data.shape[1:]), dtype)
    missing = len(matrix.offsets)  # out of range: `take` fills the row with zeros
    index = np.asarray(
        [matrix.offsets.index(off) if off in matrix.offsets else missing for off in offsets]
    )
    return jnp.take(data, index, axis=0, mode="fill", fill_value=0)


def multiply(a, b):
    """The elementwise product `a * b` (`a` sparse), as scipy's `multiply`.

    **Arguments:**

    - `a`: a `DIAMatrix` or `CSRMatrix` of shape `(m, n)`.
    - `b`: a scalar, a dense `(m, n)` array or one that broadcasts to it (`(n,)`, `(1, n)`
      scale columns, `(m, 1)` rows), or a sparse matrix of shape `(m, n)`.

    **Returns:** `a`'s format and structure for a scalar or dense `b`; for a sparse `b`,
    DIA if both are DIA (the common offsets), else CSR holding the intersection (see the
    module docstring for `jit`).
    """
    if is_batched(a) or is_batched(b):
        return map_over_batch(multiply, a, pair_dense_with_batch(b, batch_shape(a), "*"))
    if isinstance(b, SparseMatrix):
        _check_same_shape(a, b, "*")
        return _multiply_sparse(a, b)
    if _is_scalar(b):
        return _with_values(a, a.data * b, f"`{a.dtype} matrix * {_operand_name(b)}`")
    factor = _broadcast_factor(_as_dense(b, "*"), a.shape)
    dtype = jnp.result_type(a.dtype, factor.dtype)
    check_value_dtype(dtype, f"`{a.dtype} matrix * {factor.dtype} array`")
    return a.with_data(a.data.astype(dtype) * _stored_factors(a, factor))


def _with_values(matrix, values, operation: str):
    """`matrix` holding `values`, or a TypeError naming `operation` where they are integers
    (a boolean matrix times an integer scalar, or to an integer power)."""
    check_value_dtype(values.dtype, operation)
    return matrix.with_data(values)


def _operand_name(value) -> str:
    """A scalar operand for an error message: its dtype, or its Python type."""
    return str(getattr(value, "dtype", type(value).__name__))


@functools.singledispatch
def _stored_factors(matrix, factor: jax.Array) -> jax.Array:
    """`factor[row, col]` for every stored entry, in `matrix.data`'s layout."""
    rows, cols, _ = entries(matrix)
    return take_at(
        factor, _broadcast_index(rows, factor.shape[0]), _broadcast_index(cols, factor.shape[1])
    )


def _broadcast_factor(dense: jax.Array, shape: tuple[int, int]) -> jax.Array:
    """A dense factor as 2-D, checked to broadcast to `shape` (kept unbroadcast)."""
    factor = dense[None, :] if dense.ndim == 1 else dense
    fits = factor.ndim == 2 and all(
        size in (1, full) for size, full in zip(factor.shape, shape, strict=True)
    )
    if not fits:
        raise dense_shape_error("*", shape, dense.shape)
    return factor


def _broadcast_index(index, size: int):
    return index if size != 1 else 0


@register_for_format("dia", _stored_factors)
def _dia_slot_factors(matrix, factor: jax.Array) -> jax.Array:
    """`factor[row, col]` for every DIA slot `(d, col)`, zero on the ignored slots."""
    m, n = matrix.shape
    cols = np.arange(n)[None, :]
    rows = cols - np.asarray(matrix.offsets, np.int64).reshape(-1, 1)
    inside = (rows >= 0) & (rows < m)
    rows = np.clip(rows, 0, max(m - 1, 0))
    row_index = rows if factor.shape[0] != 1 else np.zeros_like(rows)
    col_index = np.broadcast_to(cols, rows.shape) if factor.shape[1] != 1 else 0 * rows
    if m == 0 or n == 0:
        return jnp.zeros(rows.shape, factor.dtype)
    return jnp.where(inside, take_at(factor, row_index, col_index), jnp.zeros((), factor.dtype))


@functools.singledispatch
def _multiply_sparse(a, b):
    """`a * b` elementwise: on `a`'s structure, the entries of `b` looked up there."""
    return _multiply_on(a, b)


@register_for_format("dia", _multiply_sparse)
def _multiply_dia(a, b):
    """The common diagonals if both are DIA, else on the other's structure."""
    if type(b) is not type(a):
        return _multiply_on(b, a)
    dtype = jnp.result_type(a.dtype, b.dtype)
    offsets = tuple(off for off in a.offsets if off in b.offsets)
    rows = [
        a.data[a.offsets.index(off)].astype(dtype) * b.data[b.offsets.index(off)].astype(dtype)
        for off in offsets
    ]
    data = jnp.stack(rows) if rows else jnp.zeros((0, a.shape[1]), dtype)
    return type(a)(data, offsets, a.shape)


def _multiply_on(structure, other):
    """The product on the stored entries of `structure` (kept where `other` stores one
    too, when that is known on the host)."""
    dtype = jnp.result_type(structure.dtype, other.dtype)
    rows, cols, values = entries(structure)
    other_values, found = lookup(other, rows, cols)
    # The search reads `other`'s values as they are: NaN where its structure is invalid.
    other_values = unless_invalid_structure(other, other_values)
    product = structure.with_data(values.astype(dtype) * other_values.astype(dtype))
    if not isinstance(rows, np.ndarray):
        return product
    # Outside `jit` the lookup has already said which positions `other` stores.
    stored = np.asarray(found) if is_concrete(found) else stored_on_host(other, rows, cols)
    return product if stored is None else select_entries(product, stored)


def divide(a, scalar):
    """`a / scalar` on the stored values; only scalar divisors (`multiply` by a reciprocal
    scales rows or columns)."""
    return a.with_data(a.data / _as_scalar(scalar, "/"))


def negative(a):
    """`-a`."""
    return a.with_data(-a.data)


@over_batch
def absolute(a):
    """`abs(a)`: absolute stored values (complex becomes real), of each position's total
    where a CSR position repeats."""
    return a.with_data(at_distinct_positions(a, jnp.abs))


@over_batch
def power(a, exponent):
    """`a ** exponent` on the stored values; a zero exponent is a ValueError (it would fill
    the matrix), as scipy's."""
    if not _is_scalar(exponent):
        raise TypeError("`**` of a sparse matrix takes a scalar exponent.")
    if is_concrete(exponent) and exponent == 0:
        raise ValueError("a zero power is not supported: it would fill the matrix.")
    powered = _powered_values(a, exponent)
    return _with_values(a, powered, f"`{a.dtype} matrix ** {_operand_name(exponent)}`")


@functools.singledispatch
def _powered_values(matrix, exponent) -> jax.Array:
    """`matrix.data ** exponent`, in `matrix.data`'s layout (of each position's total where a
    CSR position repeats)."""
    return at_distinct_positions(matrix, lambda values: values**exponent)


@register_for_format("dia", _powered_values)
def _dia_powered_values(matrix, exponent) -> jax.Array:
    """The DIA slots outside the matrix hold 0, raised from a base of 1: neither the power
    of their values nor its derivative (infinite at 0 for exponents below 1) reaches them."""
    inside = inside_mask(matrix.offsets, matrix.shape, range(len(matrix.offsets)))
    base = jnp.where(inside, matrix.data, jnp.ones((), matrix.data.dtype))
    powered = base**exponent
    return jnp.where(inside, powered, jnp.zeros((), powered.dtype))


def conj(a):
    """The complex conjugate (the same matrix for real values)."""
    return a.with_data(jnp.conj(a.data))


def real(a):
    """The real part, in the matching real dtype."""
    return a.with_data(jnp.real(a.data))


def imag(a):
    """The imaginary part, in the matching real dtype (zeros for real values)."""
    return a.with_data(jnp.imag(a.data))
