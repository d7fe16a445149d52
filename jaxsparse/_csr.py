"""`CSRMatrix`: compressed sparse rows, its validation and its conversions."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse
from jaxtyping import Array, Inexact, Integer

from ._arrays import device_array
from ._backend import resolve_backend
from ._base import (
    SparseMatrix,
    as_value_array,
    empty_shape,
    format_class,
    host_values,
    index_dtype_for,
    is_concrete,
    leaf_dtype_name,
    refuse_scipy_matrix,
    storable_host_values,
    validate_shape,
)
from ._batching import over_batch, refuse_batch
from ._coordinates import entries, scatter_total, stored_values
from ._csr_checks import check_known_structure
from ._csr_layout import indptr_from_counts, row_ids, structure_faults
from ._csr_ops import csr_matmul_p, csr_matmul_t_p
from ._csr_transpose import transposed_structure
from ._interop import (
    eliminate_zeros,
    from_bcoo,
    from_bcsr,
    from_coordinates,
    sort_indices,
    sum_duplicates,
)
from ._matmul import mark_transpose, sparse_times_dense
from ._operators import SparseOperators
from ._setdiag import csr_setdiag
from ._structure_facts import remembered
from .kernels import native_csr

INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))


class CSRMatrix(SparseMatrix, SparseOperators):
    """A sparse matrix in compressed sparse row format, as in scipy.

    Row `i` holds the entries `p` in `indptr[i]:indptr[i + 1]`, at columns `indices[p]`
    with values `data[p]`. Columns within a row may be unsorted; repeated columns add up.
    `indices` and `indptr` are dynamic integer leaves (int32 by default, int64 accepted)
    that never get a gradient: one compiled function serves every sparsity pattern with
    the same shape and number of entries.

    Construction checks shapes and dtypes always, and the index values (indptr starts at
    0, never decreases, ends at `nnz`; indices in range) whenever they are concrete. Under
    `jit`, call `check()` for the value checks; without it an invalid traced structure
    never gives a finite wrong answer: the native products fail the call, the others give
    NaN, and every other operation reads the values as NaN (`A[i]` and `A[i, j]`: NaN
    where row `i` is invalid; booleans: an error at run time). `docs/backends.md` says
    which results are NaN.

    **Arguments:**

    - `data`: `(nnz,)` floating or complex values, or `(*batch, nnz)` for a batch of
      matrices sharing the structure (see `docs/batching.md`).
    - `indices`: `(nnz,)` column indices.
    - `indptr`: `(m + 1,)` row pointers.
    - `shape`: `(m, n)`.

    As in scipy, `CSRMatrix((data, (row, col)), shape=...)` builds the matrix from
    coordinates (see `from_coo`) and `CSRMatrix((data, indices, indptr), shape=...)` from
    the three arrays.
    """

    data: Inexact[Array, "*batch nnz"]
    indices: Integer[Array, "*batch nnz"]
    indptr: Integer[Array, "*batch m_plus_1"]  # noqa: F821 (a jaxtyping axis name)
    shape: tuple[int, int] = eqx.field(static=True)
    format = "csr"
    leaf_ranks = {"data": 1, "indices": 1, "indptr": 1}

    def __init__(self, data, indices=None, indptr=None, shape=None):
        refuse_scipy_matrix(data, "CSRMatrix")
        if indices is None and indptr is None and (empty := empty_shape(data, shape)):
            index_dtype = index_dtype_for(empty, 0)
            data, shape = jnp.zeros((0,)), empty
            indices, indptr = jnp.zeros((0,), index_dtype), jnp.zeros((shape[0] + 1,), index_dtype)
        if indices is None and indptr is None and isinstance(data, tuple):
            data, indices, indptr = _scipy_style_arguments(data, shape)
        if shape is None:
            raise TypeError("`CSRMatrix` needs `shape=(m, n)`.")
        shape = validate_shape(shape)
        data = as_value_array(data, "data")
        indices = _as_index_array(indices, "indices")
        indptr = _as_index_array(indptr, "indptr")
        if data.ndim < 1 or (data.ndim > 1 and data.shape[-1:] != indices.shape[-1:]):
            raise ValueError(
                f"`data` must be 1-D (nnz,), or (nnz,) after leading batch axes; got shape "
                f"{data.shape} with `indices` of shape {indices.shape}."
            )
        if indices.shape[-1:] != data.shape[-1:] or indices.shape[:-1] not in (
            (),
            data.shape[:-1],
        ):
            raise ValueError(
                f"`indices` and `data` must have the same shape (nnz,) (or `data` a batch "
                f"(*batch, nnz)), got {indices.shape} and {data.shape}."
            )
        expected = (*indices.shape[:-1], shape[0] + 1)
        if indptr.shape != expected:
            batch = ", after the batch axes of `indices`" if indices.ndim > 1 else ""
            raise ValueError(
                f"`indptr` must have shape {expected}: (m + 1,) for shape={shape}{batch}; "
                f"got {indptr.shape}."
            )
        if indices.dtype != indptr.dtype:
            raise ValueError(
                f"`indices` and `indptr` must share an index dtype, got {indices.dtype} "
                f"and {indptr.dtype}."
            )
        if is_concrete(indices, indptr):
            check_known_structure(indices, indptr, shape)
        self.data = data
        self.indices = indices
        self.indptr = indptr
        self.shape = shape

    @property
    def nnz(self) -> int:
        """Stored entries, explicit zeros and repeats included (static; per member for a
        batch)."""
        # A partition (`eqx.partition`) may leave `data` or the indices as `None`.
        stored = self.data if self.data is not None else self.indices
        return int(stored.shape[-1])

    @property
    def index_dtype(self) -> np.dtype:
        return self.indices.dtype

    def with_data(self, data) -> "CSRMatrix":
        return CSRMatrix(data, self.indices, self.indptr, self.shape)

    @over_batch
    def row_ids(self) -> jax.Array:
        """The row of every stored entry, `(nnz,)`."""
        return row_ids(self.indptr, self.nnz)

    @over_batch
    def transpose(self) -> "CSRMatrix":
        """`A^T` as a CSR matrix (jit-able): a stable sort of the column indices,
        `O(nnz + m + n)` on the host and under `jit` on a CPU (`_csr_transpose.py`).

        Entries keep their relative order within each new row. Where the structure is
        traced (under `jit`), dense products with the returned matrix (`A.T @ x`,
        `x @ A.T`, unless it holds a batch) are `A`'s transposed products, so no sort runs
        when `A.T` serves only these; a matrix rebuilt from it (a tree map, `with_data`) is
        an ordinary `A^T`. Where the structure is known, its transpose's structure is
        computed once and kept while `A`'s index arrays live, and every `A.T` shares it.
        """
        if is_concrete(self.indices, self.indptr):
            return _transpose_known_structure(self)
        return mark_transpose(_transpose(self), self)

    @over_batch
    def todense(self) -> jax.Array:
        return _dense_from_entries(self.shape, self.indices, self.indptr, stored_values(self))

    def tocsr(self) -> "CSRMatrix":
        return self

    def todia(self):
        """The same matrix as a `DIAMatrix` with a diagonal for each offset holding a stored
        entry (explicit zeros included; repeats add up, booleans by `or`), as scipy's.

        The offsets are static and found on the host from the structure, so the index
        arrays must be concrete; the values may be traced (under `jit`, `grad`).
        """
        refuse_batch("`todia()`", self)
        if not is_concrete(self.indices, self.indptr):
            raise TypeError(
                "`CSRMatrix.todia()` needs concrete index arrays, but `indices` and `indptr` "
                "are traced (under `jax.jit`): the DIA offsets are static and depend on the "
                "structure. Convert outside `jit`, trace only the values of a concrete matrix "
                "(`A.with_data(values).todia()` with `A` closed over), or build the matrix "
                "with known offsets: `DIAMatrix.fromdense(A.todense(), offsets=...)`."
            )
        rows, cols, values = entries(self)
        n = self.shape[1]
        offsets, diagonal = np.unique(cols.astype(np.int64) - rows, return_inverse=True)
        slots = diagonal * n + cols
        data = scatter_total(len(offsets) * n, slots, values).reshape(len(offsets), n)
        return format_class("dia")(data, tuple(offsets.tolist()), self.shape)

    @over_batch
    def check(self) -> "CSRMatrix":
        """The index-value checks, runnable under `jit` (raise at run time if violated).

        They are `eqx.error_if`s: under `eqx.filter_jit` a failed check raises an
        `EquinoxRuntimeError` with its message and the stack inside `jit`; under plain
        `jax.jit` the same message arrives wrapped in the runtime's error for a failed
        host callback ("INTERNAL: CpuCallback error ..." on a CPU, a `JaxRuntimeError` or
        a `ValueError`), deep in a long traceback.

        **Returns:** the same matrix; all three of its arrays carry every check, so any
        use of the result runs them.
        """
        arrays = (self.data, self.indices, self.indptr)
        for failed, message in structure_faults(self.indices, self.indptr, self.shape[1]):
            arrays = eqx.error_if(arrays, failed, message)
        return CSRMatrix(*arrays, self.shape)

    def to_scipy(self) -> scipy.sparse.csr_array:
        """A `scipy.sparse.csr_array` on the host (bfloat16 values become float32), with
        arrays of its own: scipy's in-place operations may change them."""
        refuse_batch("`to_scipy()`", self)
        arrays = (host_values(self.data), self.indices, self.indptr)
        return scipy.sparse.csr_array(tuple(np.array(a) for a in arrays), shape=self.shape)

    @classmethod
    def from_scipy(cls, matrix) -> "CSRMatrix":
        """From any `scipy.sparse` matrix or array, converted to CSR on the host.

        Entries, their order and explicit zeros are kept. Indices are int32 when they fit.
        Integer values become the default floating dtype; booleans stay boolean.
        """
        if not scipy.sparse.issparse(matrix):
            raise TypeError(
                f"`matrix` must be a scipy.sparse matrix or array, got {type(matrix).__name__}."
            )
        csr = scipy.sparse.csr_array(matrix)
        index_dtype = index_dtype_for(csr.shape, csr.nnz)
        return cls(
            storable_host_values(csr.data),
            csr.indices.astype(index_dtype),
            csr.indptr.astype(index_dtype),
            csr.shape,
        )

    @classmethod
    def fromdense(cls, dense, *, nnz: int | None = None, index_dtype=np.int32) -> "CSRMatrix":
        """From a dense 2-D array, keeping its nonzeros in row-major order.

        Without `nnz` the nonzeros are counted on the host (needs a concrete array). With a
        static `nnz` it runs under `jit`: fewer nonzeros are padded with explicit zeros in
        the last row. More nonzeros than `nnz` raise a `ValueError` when `dense` is
        concrete; under `jit`, where they cannot be counted before the program runs, the
        last ones are dropped, as `jax.experimental.sparse` does.
        """
        if scipy.sparse.issparse(dense):
            raise TypeError("`dense` is a scipy.sparse matrix: use `CSRMatrix.from_scipy`.")
        dense = as_value_array(dense, "dense")
        if dense.ndim != 2:
            raise ValueError(f"`dense` must be 2-D, got shape {dense.shape}.")
        index_dtype = np.dtype(index_dtype)
        if index_dtype not in INDEX_DTYPES:
            raise TypeError(f"`index_dtype` must be int32 or int64, got {index_dtype}.")
        m, n = dense.shape
        found = int(np.count_nonzero(np.asarray(dense))) if is_concrete(dense) else None
        if nnz is None:
            if found is None:
                raise TypeError(
                    "`CSRMatrix.fromdense` needs a static `nnz` when `dense` is traced "
                    "(under `jax.jit`, `jax.grad` or `jax.vmap`): the number of entries fixes "
                    "the arrays' shapes."
                )
            nnz = found
        if not isinstance(nnz, int) or nnz < 0:
            raise ValueError(f"`nnz` must be a non-negative Python int, got {nnz!r}.")
        if found is not None and found > nnz:
            raise ValueError(
                f"`dense` has {found} nonzeros but `nnz={nnz}`: {found - nnz} would be "
                f"dropped. Pass `nnz >= {found}`, or leave `nnz` out to count them."
            )
        if (m == 0 or n == 0) and nnz > 0:
            raise ValueError(f"`nnz` must be 0 for an empty matrix of shape {(m, n)}, got {nnz=}.")
        return cls(*_csr_arrays_from_dense(dense, nnz, index_dtype), (m, n))

    @classmethod
    def from_coo(cls, data, row, col, shape, nnz: int | None = None) -> "CSRMatrix":
        """From coordinates: entry `p` is `data[p]` at `(row[p], col[p])`; repeated
        positions add up, as in scipy's `coo_array((data, (row, col))).tocsr()`.

        **Arguments:**

        - `data`: `(k,)` floating, complex or boolean values (integers become the default
          float).
        - `row`, `col`: `(k,)` integer positions, in range (checked when concrete; under
          `jit`, using the result raises for positions out of range).
        - `shape`: `(m, n)`.
        - `nnz`: the number of distinct positions; needed under `jax.jit` (counted on the
          host otherwise). More pads with explicit zeros, fewer raises.

        **Returns:** a `CSRMatrix` with sorted columns and no repeated positions.
        """
        return from_coordinates(data, row, col, validate_shape(shape), nnz)

    # The scipy.sparse clean-ups and jax.experimental.sparse imports (`_interop.py`).

    def sum_duplicates(self, *, nnz: int | None = None) -> "CSRMatrix":
        """Repeated positions summed, columns sorted (a new matrix; `nnz` under `jit`)."""
        refuse_batch("`sum_duplicates()`", self)
        return sum_duplicates(self, nnz=nnz)

    @over_batch
    def sort_indices(self) -> "CSRMatrix":
        """Columns sorted within each row (a new matrix; jit-able)."""
        return sort_indices(self)

    def setdiag(self, values, k: int = 0) -> "CSRMatrix":
        """The matrix with diagonal `k` set to `values` (a new matrix), as scipy's
        `setdiag`: a scalar fills the diagonal, a shorter array its first entries, and
        positions not stored before are added. Host-side: the structure must be concrete
        (the values may be traced). See `jaxsparse._setdiag`."""
        return csr_setdiag(self, values, k)

    def eliminate_zeros(self) -> "CSRMatrix":
        """Explicit zeros removed (a new matrix; host-side, not under `jit`)."""
        refuse_batch("`eliminate_zeros()`", self)
        return eliminate_zeros(self)

    @classmethod
    def from_bcoo(cls, matrix) -> "CSRMatrix":
        """From a 2-D `jax.experimental.sparse.BCOO` (jit-able)."""
        return from_bcoo(matrix)

    @classmethod
    def from_bcsr(cls, matrix) -> "CSRMatrix":
        """From a 2-D `jax.experimental.sparse.BCSR` (jit-able)."""
        return from_bcsr(matrix)

    def _repr_fields(self) -> dict:
        return {**super()._repr_fields(), "index_dtype": leaf_dtype_name(self.indices)}


def _scipy_style_arguments(arguments: tuple, shape):
    """`(data, indices, indptr)` from scipy's `(data, (row, col))` or `(data, indices,
    indptr)` first argument."""
    if len(arguments) == 2 and isinstance(arguments[1], tuple) and len(arguments[1]) == 2:
        if shape is None:
            raise TypeError("`CSRMatrix((data, (row, col)))` needs `shape=(m, n)`.")
        built = from_coordinates(arguments[0], *arguments[1], validate_shape(shape), None)
        return built.data, built.indices, built.indptr
    if len(arguments) == 3:
        return arguments
    raise TypeError(
        "`CSRMatrix` takes `(data, indices, indptr, shape)`, `((data, (row, col)), "
        "shape=...)` or `((data, indices, indptr), shape=...)`."
    )


def _transpose_known_structure(matrix: CSRMatrix) -> CSRMatrix:
    """`CSRMatrix.transpose` with known index arrays: the structure is computed now (a
    constant under `jit`), once per pair of index arrays (`_structure_facts`), so the only
    traced work is one gather of the values. Every eager transpose of one structure shares
    its index arrays, as `with_data` shares them."""
    m, n = matrix.shape
    order, indices_t, indptr_t = remembered(
        matrix.indices, matrix.indptr, ("transpose", n), lambda: _transposed_structure(matrix)
    )
    return CSRMatrix(_gather(matrix.data, order), indices_t, indptr_t, (n, m))


def _transposed_structure(matrix: CSRMatrix):
    """`(order, indices_t, indptr_t)` of known index arrays, checked on the host first:
    `order` a numpy array, which the gather takes to the values' device, and the index
    arrays JAX arrays on no device in particular (uncommitted), which a computation takes
    to its own, as the values' may differ from `matrix`'s index arrays'. By the native
    counting sort (in pieces over the threads) where it takes the index arrays, else by
    scipy's CSR to CSC conversion of the entries' positions, the same stable counting sort,
    which trusts the structure."""
    m, n = matrix.shape
    check_known_structure(matrix.indices, matrix.indptr, matrix.shape)
    if _native_sort_takes(matrix):
        # Run now even under a trace, where a jitted call would be staged instead.
        with jax.ensure_compile_time_eval():
            structure = _native_transposed_structure(matrix.indices, matrix.indptr, n)
        order, indices_t, indptr_t = map(np.asarray, structure)
    else:
        indices, indptr = np.asarray(matrix.indices), np.asarray(matrix.indptr)
        positions = scipy.sparse.csr_array((np.arange(len(indices)), indices, indptr), shape=(m, n))
        by_column = positions.tocsc()
        order = by_column.data
        indices_t = by_column.indices.astype(indices.dtype, copy=False)
        indptr_t = by_column.indptr.astype(indices.dtype, copy=False)
    with jax.ensure_compile_time_eval():
        return order, device_array(indices_t), device_array(indptr_t)


@jax.jit
def _gather(values, order):
    return values[order]


def _native_sort_takes(matrix: CSRMatrix) -> bool:
    """Whether the native counting sort takes `matrix`'s known index arrays: both on one
    CPU device where the kernels are built, and no `JAXSPARSE_BACKEND` asking otherwise."""
    arrays = (matrix.indices, matrix.indptr)
    if not all(isinstance(array, jax.Array) for array in arrays):
        return False
    devices = matrix.indices.devices() | matrix.indptr.devices()
    platform = next(iter(devices)).platform
    auto = resolve_backend(None) == "auto"
    return len(devices) == 1 and auto and native_csr.takes_indices(matrix.indices.dtype, platform)


_native_transposed_structure = jax.jit(transposed_structure, static_argnums=2)


def _transpose(matrix: CSRMatrix) -> CSRMatrix:
    """`CSRMatrix.transpose` for traced index arrays: one primitive for the structure (which
    reads `JAXSPARSE_BACKEND` where it is traced) and a gather of the values."""
    m, n = matrix.shape
    order, indices, indptr = transposed_structure(matrix.indices, matrix.indptr, n)
    return CSRMatrix(matrix.data[order], indices, indptr, (n, m))


@functools.partial(jax.jit, static_argnums=0)
def _dense_from_entries(shape, indices, indptr, values) -> jax.Array:
    """The dense matrix of `shape` holding the stored entries (repeats summed), as one
    compiled program: the rows of the entries and their scatter together."""
    return scatter_total(shape, (row_ids(indptr, indices.shape[0]), indices), values)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _csr_arrays_from_dense(dense, nnz: int, index_dtype):
    """`(data, indices, indptr)` of the first `nnz` nonzeros of `dense` in row-major order,
    padded with explicit zeros in the last row; one compiled program (eagerly, its
    operations would dispatch one by one)."""
    m = dense.shape[0]
    rows, cols = jnp.nonzero(dense, size=nnz, fill_value=(max(m - 1, 0), 0))
    found = jnp.count_nonzero(dense)
    values = jnp.where(jnp.arange(nnz) < found, dense[rows, cols], jnp.zeros((), dense.dtype))
    indptr = indptr_from_counts(jnp.bincount(rows, length=m).astype(index_dtype))
    return values.astype(dense.dtype), cols.astype(index_dtype), indptr


def _as_index_array(values, name: str) -> jax.Array:
    """`values` as an int32 or int64 JAX array (1-D, or with batch axes in front); plain
    sequences of integers become int32."""
    dtype = None
    given = getattr(values, "dtype", None)  # before JAX narrows 64-bit types without x64
    if not isinstance(values, (jax.Array, np.ndarray)):
        dtype = np.int32
        if not any(isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(values)):
            # A sequence of numbers goes to numpy first, to take the array's checks below;
            # one of floats or booleans keeps its dtype, which the dtype check refuses.
            values = np.asarray(values)
            if values.size and values.dtype.kind not in "iu":
                dtype = None
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu" and values.size:
        # JAX would wrap them silently when it stores them as int32: a sequence always,
        # 64-bit indices without x64.
        stored_as_int32 = dtype == np.int32 or jax.dtypes.canonicalize_dtype(np.int64) == np.int32
        if stored_as_int32 and (
            values.min() < np.iinfo(np.int32).min or values.max() > np.iinfo(np.int32).max
        ):
            raise ValueError(
                f"`{name}` holds values outside int32 ({values.min()} to {values.max()}), "
                "which would wrap: a sequence is stored as int32, and so are 64-bit indices "
                "without `jax_enable_x64`. Fix the indices, or pass int64 arrays with x64."
            )
    # Known values stay a concrete array even inside a trace (traced ones stay traced), so
    # a structure built on the host stays known to the next host-side operation.
    with jax.ensure_compile_time_eval():
        array = device_array(values, dtype=dtype)
    if not jnp.issubdtype(array.dtype, jnp.integer):
        raise TypeError(f"`{name}` must have an integer dtype, got {array.dtype}.")
    if np.dtype(array.dtype) not in INDEX_DTYPES:
        raise TypeError(f"`{name}` must be int32 or int64, got {given or array.dtype}.")
    if array.ndim < 1:
        raise ValueError(f"`{name}` must be 1-D, got shape {array.shape}.")
    return array


@sparse_times_dense.register(CSRMatrix)
def _csr_times_dense(matrix: CSRMatrix, data, columns, *, transposed: bool, backend: str):
    product = csr_matmul_t_p if transposed else csr_matmul_p
    return product.bind(
        data, columns, matrix.indices, matrix.indptr, shape=matrix.shape, backend=backend
    )
