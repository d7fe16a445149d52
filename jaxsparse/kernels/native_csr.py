"""The CSR products on CPU by jaxsparse's native kernels (`native/csr_kernels.cc`), and
the structure of the transpose (`native/csr_transpose.cc`).

Same contracts as `xla_csr.py`. Work is split over XLA's intra-op threads by stored
entries, so power-law rows balance; results are identical bit for bit from run to run.
Each kernel validates the structure as it reads it: an index pointer that does not start
at 0, decreases, or does not end at `nnz`, or a column index outside `[0, n)`, fails the
call with an error naming the problem (under `jit` too), never a wrong answer or an
out-of-bounds read. float32, float64, complex64 and complex128 values, int32 or int64
indices; half precision stays on the XLA path. The transposed product scatters without
building the transposed structure (`native/scatter.h`): on banded columns each piece of
entries writes the output rows of an interval of columns it owns and defers the few
entries outside it, added afterwards in a fixed order; on scattered columns each piece
after the first (at most 8, and buffers at most twice the entries) fills a buffer of all
the rows, the buffers added in a fixed order.

The gradient step of `A @ x` in the values and `x` (`csr_matmul_pullback_native`, the
`pullback` of `_primitive.py`) is one kernel call for one matrix: one pass over the
entries for both where columns sit near those of the row before (banded and stencil
structures), the two kernels' passes one after the other on scattered columns, where one
pass would make two random accesses an entry (`native/csr_kernels.cc`). Each gradient has
the bits of its own kernel for real values; complex ones may differ in the last bit (where
GCC vectorizes a complex product it may fuse its multiply and subtract, depending on the
loop around it). A batch runs the two kernels.

Batches follow the product contract (`_primitive.py`, "Batches"): values `(B, nnz)` and
dense operands `(B, rows, k)`, or shared without the leading axis; one kernel call runs
the whole batch and reads the structure once, a chunk of entries at a time for every
member.

The structure of `A^T` (`csr_transposed_structure_native`, `native/csr_transpose.cc`) is a
counting sort of the column indices, the same arrays as `_csr_layout.transposed_structure`
for any structure, an invalid one included. The structure of `A + B` for rows whose
columns increase (`csr_union_native`, `native/csr_union.cc`) merges each pair of rows, the
same arrays as `_csr_union._union_by_search` for valid structures; an invalid one fails
the call. The structure of `A @ B` (`csr_product_counts_native`, `csr_product_fill_native`,
`native/csr_product.cc`) gives the arrays `_spgemm` finds with numpy; an invalid structure
fails the call. The structure of a list of positions (`csr_positions_native`,
`native/csr_positions.cc`) sorts them by row, then each row's columns, the same arrays as
`_csr_positions._by_sort`; a position outside the matrix fails the call.
"""

import jax
import numpy as np

from . import _native_library

_VALUE_DTYPES = tuple(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))
_INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))


def supports(dtype, platform: str) -> bool:
    """Whether the native kernels take `dtype` on `platform` (the CPU, once built)."""
    return platform == "cpu" and _native_library.AVAILABLE and np.dtype(dtype) in _VALUE_DTYPES


def takes_indices(dtype, platform: str) -> bool:
    """Whether the native structure kernels (transpose, sum, product) take index dtype
    `dtype` on `platform`."""
    return platform == "cpu" and _native_library.AVAILABLE and np.dtype(dtype) in _INDEX_DTYPES


def _call(target: str, out_shape, *args):
    return jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(out_shape, args[0].dtype))(*args)


def _batch(first, first_rank: int, second) -> tuple[int, ...]:
    """The leading batch axis of a call, `(B,)`, or `()` for one matrix."""
    if first.ndim > first_rank:
        return first.shape[:1]
    return second.shape[:1] if second.ndim == 3 else ()


def csr_matmul_native(data, x, indices, indptr, *, shape: tuple[int, int]) -> jax.Array:
    """`A @ x`, `(m, k)` (batched: `(B, m, k)`)."""
    out_shape = (*_batch(data, 1, x), shape[0], x.shape[-1])
    return _call("jaxsparse_csr_matmul", out_shape, data, x, indices, indptr)


def csr_matmul_t_native(data, g, indices, indptr, *, shape: tuple[int, int]) -> jax.Array:
    """`A^T @ g`, `(n, k)` (batched: `(B, n, k)`)."""
    out_shape = (*_batch(data, 1, g), shape[1], g.shape[-1])
    return _call("jaxsparse_csr_matmul_t", out_shape, data, g, indices, indptr)


def csr_sddmm_native(g, x, indices, indptr, *, shape: tuple[int, int]) -> jax.Array:
    """`out[p] = g[row(p)] . x[indices[p]]`, `(nnz,)` (batched: `(B, nnz)`)."""
    del shape
    out_shape = (*_batch(g, 2, x), indices.shape[0])
    return _call("jaxsparse_csr_sddmm", out_shape, g, x, indices, indptr)


def csr_matmul_pullback_native(g, data, x, indices, indptr, *, shape: tuple[int, int]):
    """`(csr_sddmm(g, x), A^T @ g)`, the gradients of `A @ x` in `data` and in `x` along
    the cotangent `g`: one call for one matrix, the two kernels for a batch."""
    if data.ndim > 1 or x.ndim > 2 or g.ndim > 2:
        return (
            csr_sddmm_native(g, x, indices, indptr, shape=shape),
            csr_matmul_t_native(data, g, indices, indptr, shape=shape),
        )
    out = (
        jax.ShapeDtypeStruct(indices.shape, data.dtype),
        jax.ShapeDtypeStruct((shape[1], g.shape[-1]), data.dtype),
    )
    return jax.ffi.ffi_call("jaxsparse_csr_matmul_pullback", out)(g, data, x, indices, indptr)


def csr_union_native(a_indices, a_indptr, b_indices, b_indptr, *, num_cols: int, nnz: int):
    """`(a_source, b_source, indices, indptr)`, the structure of `A + B` (see `_csr_union`),
    all in the index dtype; the four arrays may carry one leading batch axis, which the
    results then have."""
    batch, rows = a_indptr.shape[:-1], a_indptr.shape[-1]
    out = tuple(
        jax.ShapeDtypeStruct((*batch, size), a_indices.dtype) for size in (nnz, nnz, nnz, rows)
    )
    call = jax.ffi.ffi_call("jaxsparse_csr_union", out)
    return tuple(call(a_indices, a_indptr, b_indices, b_indptr, num_cols=np.int64(num_cols)))


def csr_positions_native(rows, cols, *, num_rows: int, num_cols: int, nnz: int):
    """`(slots, indices, indptr)`, the CSR structure of the listed positions `(rows[p],
    cols[p])` of an `num_rows x num_cols` matrix, repeats merged (see `_csr_positions`), in
    the index dtype; `rows` and `cols` may carry one leading batch axis, which the results
    then have."""
    batch, length = rows.shape[:-1], rows.shape[-1]
    out = tuple(
        jax.ShapeDtypeStruct((*batch, size), rows.dtype) for size in (length, nnz, num_rows + 1)
    )
    call = jax.ffi.ffi_call("jaxsparse_csr_positions", out)
    return tuple(call(rows, cols, num_cols=np.int64(num_cols)))


def csr_product_counts_native(a_indices, a_indptr, b_indices, b_indptr, *, num_cols: int):
    """`(indptr, pair_indptr)` of `A @ B` for one pair of CSR structures, `B` with `num_cols`
    columns: the product's row pointers and those of its pairs of entries `A[i, j] B[j, c]`
    (`native/csr_product.cc`), in the index dtype of the four arrays."""
    rows = jax.ShapeDtypeStruct(a_indptr.shape, a_indptr.dtype)
    call = jax.ffi.ffi_call("jaxsparse_csr_product_counts", (rows, rows))
    return tuple(call(a_indices, a_indptr, b_indices, b_indptr, num_cols=np.int64(num_cols)))


def csr_product_fill_native(
    a_indices,
    a_indptr,
    b_indices,
    b_indptr,
    indptr,
    pair_indptr,
    *,
    num_cols: int,
    nnz: int,
    pairs: int,
):
    """`(indices, left, right, slots)` of `A @ B` from `csr_product_counts_native`'s row
    pointers, which end at `nnz` and `pairs`: the product's columns, and for each pair of
    entries, its entry of `A`, its entry of `B` and the product's slot it adds to."""
    dtype = a_indices.dtype
    out = (jax.ShapeDtypeStruct((nnz,), dtype), *[jax.ShapeDtypeStruct((pairs,), dtype)] * 3)
    call = jax.ffi.ffi_call("jaxsparse_csr_product_fill", out)
    arrays = (a_indices, a_indptr, b_indices, b_indptr, indptr, pair_indptr)
    return tuple(call(*arrays, num_cols=np.int64(num_cols)))


def csr_transposed_structure_native(indices, indptr, *, num_cols: int):
    """`(order, indices_t, indptr_t)`, the structure of `A^T` for `A` with `num_cols`
    columns (see `_csr_layout.transposed_structure`), all in the index dtype; `indices` and
    `indptr` may carry one leading batch axis, which the results then have."""
    batch, nnz = indices.shape[:-1], indices.shape[-1]
    entries = jax.ShapeDtypeStruct((*batch, nnz), indices.dtype)
    out = (entries, entries, jax.ShapeDtypeStruct((*batch, num_cols + 1), indices.dtype))
    return tuple(jax.ffi.ffi_call("jaxsparse_csr_transpose", out)(indices, indptr))
