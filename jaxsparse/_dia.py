"""`DIAMatrix`: the diagonal format, its validation and its conversions."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse
from jaxtyping import Array, Inexact

from ._arrays import take_at
from ._base import (
    SparseMatrix,
    as_value_array,
    empty_shape,
    format_class,
    host_values,
    index_dtype_for,
    is_concrete,
    refuse_scipy_matrix,
    storable_host_values,
    validate_shape,
)
from ._batching import over_batch, refuse_batch
from ._dia_layout import (
    active_diagonals,
    csr_structure,
    diagonal_lengths,
    negate_offsets,
    stored_positions,
    transpose_data,
    validate_offsets,
)
from ._dia_ops import dia_matmul_p, dia_matmul_t_p
from ._matmul import mark_transpose, sparse_times_dense
from ._operators import SparseOperators
from ._setdiag import diagonal_values


class DIAMatrix(SparseMatrix, SparseOperators):
    """A sparse matrix stored by diagonals, in scipy's DIA convention.

    `data[d, j] == A[j - offsets[d], j]`: column `j` of `data` is column `j` of the
    matrix, and diagonal `d` holds the entries `A[i, i + offsets[d]]`. `data` has shape
    `(len(offsets), n)`. Slots whose row `j - offsets[d]` falls outside `[0, m)` are
    ignored: they never change a product and always get a zero gradient. Offsets may
    reach beyond the matrix (such a diagonal is ignored whole).

    `offsets` and `shape` are static: part of `jax.jit`'s cache key, so new values with the
    same offsets, shape and dtype reuse a compiled function, and new offsets compile anew.

    **Arguments:**

    - `data`: `(len(offsets), n)` floating or complex array (1-D for a single diagonal),
      or `(*batch, len(offsets), n)` for a batch of matrices sharing offsets and shape
      (see `docs/batching.md`).
    - `offsets`: distinct Python ints (0 main, > 0 above, < 0 below the main diagonal).
    - `shape`: `(m, n)`.
    """

    data: Inexact[Array, "*batch ndiag n"]
    offsets: tuple[int, ...] = eqx.field(static=True)
    shape: tuple[int, int] = eqx.field(static=True)
    format = "dia"
    leaf_ranks = {"data": 2}

    def __init__(self, data, offsets=None, shape=None):
        refuse_scipy_matrix(data, "DIAMatrix")
        if offsets is None and (empty := empty_shape(data, shape)):
            data, offsets, shape = jnp.zeros((0, empty[1])), (), empty
        if offsets is None or shape is None:
            raise TypeError("`DIAMatrix` needs `offsets` and `shape=(m, n)`.")
        shape = validate_shape(shape)
        offsets = validate_offsets(offsets)
        data = as_value_array(data, "data")
        if data.ndim == 1 and len(offsets) == 1:
            data = data[None, :]
        expected = (len(offsets), shape[1])
        if data.ndim < 2 or (data.ndim > 2 and data.shape[-2:] != expected):
            raise ValueError(
                f"`data` must be 2-D (diagonals, columns) = {expected}, or {expected} after "
                f"leading batch axes; got shape {data.shape}."
            )
        if data.shape[-2] != len(offsets):
            raise ValueError(
                f"`data` has {data.shape[-2]} diagonals (rows) but `offsets` has "
                f"{len(offsets)} entries; they must match."
            )
        if data.shape[-1] != shape[1]:
            raise ValueError(
                f"`data` must have one column per matrix column: {shape[1]} for "
                f"shape={shape}, got {data.shape[-1]}."
            )
        self.data = data
        self.offsets = offsets
        self.shape = shape

    @property
    def nnz(self) -> int:
        """Stored slots inside the matrix (as scipy counts them, zeros included); per
        member for a batch."""
        return sum(diagonal_lengths(self.offsets, self.shape))

    def with_data(self, data) -> "DIAMatrix":
        return DIAMatrix(data, self.offsets, self.shape)

    @over_batch
    def transpose(self) -> "DIAMatrix":
        """`A^T` as a DIA matrix: offsets negated, each diagonal shifted (jit-able).

        Where the values are traced (under `jit`), dense products with the returned matrix
        (`A.T @ x`, `x @ A.T`, unless it holds a batch) are `A`'s transposed products, so
        the diagonals are not shifted when `A.T` serves only these; a matrix rebuilt from it
        (a tree map, `with_data`) is an ordinary `A^T`.
        """
        transposed = DIAMatrix(
            transpose_data(self.data, self.offsets, self.shape),
            negate_offsets(self.offsets),
            (self.shape[1], self.shape[0]),
        )
        return transposed if is_concrete(self.data) else mark_transpose(transposed, self)

    @over_batch
    def todense(self) -> jax.Array:
        positions = stored_positions(self.offsets, self.shape)
        return _dense_from_diagonals(self.data, self.shape, *positions)

    @over_batch
    def tocsr(self):
        """The same matrix as a `CSRMatrix` (jit-able: its structure follows from offsets).

        Every slot inside the matrix becomes a stored entry, zeros included (scipy's
        `tocsr` drops explicit zeros; `to_scipy().tocsr()` does the same here).
        """
        diagonals, cols, indptr = csr_structure(self.offsets, self.shape)
        index_dtype = index_dtype_for(self.shape, len(cols))
        return format_class("csr")(
            take_at(self.data, diagonals, cols),
            np.asarray(cols, index_dtype),
            np.asarray(indptr, index_dtype),
            self.shape,
        )

    def todia(self) -> "DIAMatrix":
        return self

    def setdiag(self, values, k: int = 0) -> "DIAMatrix":
        """The matrix with diagonal `k` set to `values` (a new matrix, jit-able), as scipy's
        `setdiag`: `values[i]` becomes `A[i, i + k]` (`A[i - k, i]` below the main
        diagonal); a scalar fills the diagonal, a shorter array its first entries.
        Offset `k` is added to the offsets (static) when the matrix has none; one outside
        the matrix (`k >= n` or `k <= -m`) is a ValueError, as in scipy. The values
        are cast to the matrix's dtype, as scipy's and `.at[].set` do; complex values into
        a real matrix are a TypeError (their imaginary parts would be dropped).
        """
        refuse_batch("`setdiag`", self)
        k, filled = diagonal_values(values, k, self.shape, self.dtype)
        offsets = self.offsets if k in self.offsets else (*self.offsets, k)
        data = self.data
        if k not in self.offsets:
            data = jnp.concatenate([data, jnp.zeros((1, self.shape[1]), data.dtype)])
        start = max(k, 0)
        data = data.at[offsets.index(k), start : start + filled.shape[0]].set(filled)
        return DIAMatrix(data, offsets, self.shape)

    def eliminate_zeros(self) -> "DIAMatrix":
        """The matrix without the diagonals that hold only zeros inside it (a new matrix,
        on the host: which diagonals remain depends on the values). Call it once on an
        operator built from products or Kronecker terms, before using it in a loop."""
        refuse_batch("`eliminate_zeros()`", self)
        if not is_concrete(self.data):
            raise TypeError(
                "`eliminate_zeros()` drops diagonals by value, so the offsets (static) depend "
                "on the values, which are traced (under `jax.jit`, `jax.grad` or `jax.vmap`): "
                "call it on concrete values, once, and pass traced ones in with `with_data`."
            )
        diagonals, _, cols = stored_positions(self.offsets, self.shape)
        nonzero = np.zeros(len(self.offsets), bool)
        np.logical_or.at(
            nonzero, diagonals, np.asarray(host_values(self.data))[diagonals, cols] != 0
        )
        keep = np.flatnonzero(nonzero)
        return DIAMatrix(self.data[keep], tuple(self.offsets[d] for d in keep), self.shape)

    def check(self) -> "DIAMatrix":
        """Value checks under `jit`: a DIA matrix has none beyond its shapes, so `self`."""
        return self

    def to_scipy(self) -> scipy.sparse.dia_array:
        """A `scipy.sparse.dia_array` on the host (bfloat16 values become float32)."""
        refuse_batch("`to_scipy()`", self)
        # Only diagonals inside the matrix: scipy casts offsets to its index dtype.
        index, offsets = active_diagonals(self.offsets, self.shape)
        data = np.asarray(host_values(self.data))[list(index)]
        return scipy.sparse.dia_array((data, np.asarray(offsets, dtype=np.int64)), shape=self.shape)

    @classmethod
    def from_scipy(cls, matrix) -> "DIAMatrix":
        """From any `scipy.sparse` matrix or array, converted to DIA on the host.

        Integer values become the default floating dtype; booleans stay boolean.
        """
        if not scipy.sparse.issparse(matrix):
            raise TypeError(
                f"`matrix` must be a scipy.sparse matrix or array, got {type(matrix).__name__}."
            )
        dia = scipy.sparse.dia_array(matrix)
        m, n = dia.shape
        values = storable_host_values(dia.data)
        data = np.zeros((len(dia.offsets), n), values.dtype)
        width = min(values.shape[1], n)
        data[:, :width] = values[:, :width]
        return cls(data, tuple(int(off) for off in dia.offsets), (m, n))

    @classmethod
    def fromdense(cls, dense, offsets=None) -> "DIAMatrix":
        """From a dense 2-D array.

        With `offsets` given, the diagonals are read from `dense` (jit-able; entries off
        those diagonals are dropped). Without, the offsets of every diagonal holding a
        nonzero are found on the host, which needs a concrete array.
        """
        if scipy.sparse.issparse(dense):
            raise TypeError("`dense` is a scipy.sparse matrix: use `DIAMatrix.from_scipy`.")
        dense = as_value_array(dense, "dense")
        if dense.ndim != 2:
            raise ValueError(f"`dense` must be 2-D, got shape {dense.shape}.")
        if offsets is None:
            if not is_concrete(dense):
                raise TypeError(
                    "`DIAMatrix.fromdense` needs `offsets` when `dense` is traced (under "
                    "`jax.jit`, `jax.grad` or `jax.vmap`): "
                    "the offsets are static and cannot depend on traced values."
                )
            rows, cols = np.nonzero(np.asarray(dense))
            offsets = tuple(int(off) for off in np.unique(cols - rows))
        offsets = validate_offsets(offsets)
        shape = (int(dense.shape[0]), int(dense.shape[1]))
        positions = stored_positions(offsets, shape)
        return cls(_diagonals_from_dense(dense, len(offsets), *positions), offsets, shape)

    def _repr_fields(self) -> dict:
        return {**super()._repr_fields(), "offsets": self.offsets}


@sparse_times_dense.register(DIAMatrix)
def _dia_times_dense(matrix: DIAMatrix, data, columns, *, transposed: bool, backend: str):
    product = dia_matmul_t_p if transposed else dia_matmul_p
    return product.bind(data, columns, offsets=matrix.offsets, shape=matrix.shape, backend=backend)


@functools.partial(jax.jit, static_argnums=1)
def _dense_from_diagonals(data, shape, diagonals, rows, cols) -> jax.Array:
    """The dense matrix of `shape` from the slots `(diagonals, rows, cols)` of
    `stored_positions`, as one compiled program (eagerly, its operations would dispatch
    one by one)."""
    # Offsets are distinct (checked on construction): each slot has its own position,
    # which `jax.linear_transpose` needs to transpose the scatter.
    dense = jnp.zeros(shape, data.dtype)
    return dense.at[rows, cols].set(data[diagonals, cols], unique_indices=True)


@functools.partial(jax.jit, static_argnums=1)
def _diagonals_from_dense(dense, count: int, diagonals, rows, cols) -> jax.Array:
    """The `(count, n)` DIA data of `dense` at the slots of `stored_positions`, as one
    compiled program; each slot `(diagonal, column)` is written once, so the scatter
    transposes."""
    data = jnp.zeros((count, dense.shape[1]), dense.dtype)
    return data.at[diagonals, cols].set(dense[rows, cols], unique_indices=True)
