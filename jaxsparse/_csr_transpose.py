"""The structure of a CSR matrix's transpose as a primitive: the native counting sort on a
CPU, XLA's sort everywhere else.

`transposed_structure(indices, indptr, num_cols)` returns `(order, indices_t, indptr_t)` as
`_csr_layout.transposed_structure` does, all three in the index dtype: entry `q` of `A^T`
is entry `order[q]` of `A`, so `A^T`'s values are `data[order]`, a gather through which
gradients reach `data`. Both implementations give the same arrays for any structure, an
invalid one included: there no error, since a transpose is only built, but an `indptr_t`
of `_csr_layout.INVALID_TRANSPOSE_INDPTR` throughout, so that the products on `A^T`
answer as on `A` (native: an error; XLA and Pallas: NaN).

The native counting sort (`O(nnz + m + n)`, `kernels/native/csr_transpose.cc`) runs on a
CPU, XLA's sort (`O(nnz log nnz)`) elsewhere, for `jax.export` and under
`JAXSPARSE_BACKEND=xla`, as `_structure_primitive` chooses. Batches: one leading batch
axis on both index arrays; `jax.vmap` at any depth folds into it.
"""

from jax.core import ShapedArray

from . import _csr_layout
from ._structure_primitive import structure_primitive
from .kernels import native_csr
from .kernels._batch import over_batch


def transposed_structure(indices, indptr, num_cols: int):
    """The CSR structure of `A^T` for `A` with `num_cols` columns.

    **Arguments:**

    - `indices`: `(nnz,)` column indices, int32 or int64.
    - `indptr`: `(m + 1,)` row pointers, of `indices`' dtype.
    - `num_cols`: `n`, a static int.

    **Returns:** `(order, indices_t, indptr_t)`, `(nnz,)`, `(nnz,)` and `(n + 1,)` in the
    index dtype: a stable sort of the column indices (see the module docstring).
    """
    return _bind(indices, indptr, num_cols=num_cols)


def _abstract_eval(indices, indptr, *, num_cols, backend):
    if indices.dtype != indptr.dtype or indices.shape[:-1] != indptr.shape[:-1]:
        raise ValueError(
            f"{_NAME}: {indices.shape=} {indices.dtype} and {indptr.shape=} "
            f"{indptr.dtype} must share a dtype and batch axes."
        )
    entries = ShapedArray(indices.shape, indices.dtype)
    return [entries, entries, ShapedArray((*indices.shape[:-1], num_cols + 1), indices.dtype)]


def _by_sort(indices, indptr, *, num_cols):
    def one(indices, indptr):
        order, indices_t, indptr_t = _csr_layout.transposed_structure(indices, indptr, num_cols)
        return order.astype(indices.dtype), indices_t, indptr_t

    return over_batch(one, (indices, indptr), (1, 1))


_NAME = "jaxsparse_csr_transpose"
_bind = structure_primitive(
    _NAME, _abstract_eval, native=native_csr.csr_transposed_structure_native, portable=_by_sort
)
