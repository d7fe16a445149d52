"""Sparse @ sparse: the product of two jaxsparse matrices, as a sparse matrix.

- DIA @ DIA gives DIA. Its offsets are the pairwise sums of the factors' offsets (those that
  meet the result), known from static metadata, so the product is fully jit-able: for each
  diagonal `b` of the right factor, the left factor's diagonals shifted by `b` times it.
- Any product with a CSR factor gives CSR (a DIA factor is converted by `tocsr()`, which is
  jit-able). Like scipy, in two phases. When the index arrays are concrete, the structure
  is computed on the host: every pair of entries `A[i, j] B[j, c]` is listed with the
  position `(i, c)` it adds to, by the native kernels on a CPU (`native/csr_product.cc`,
  the rows over XLA's threads), else by numpy (a sort of the positions): the same arrays
  either way. The values are then one gather, product and segment sum of the two `data`
  arrays, so gradients reach both operands' values. Unlike scipy, entries that cancel to
  zero stay stored (the structure never depends on values).
  Under `jax.jit` with traced indices the structure needs a static `nnz` (the number of
  entries of the result; more than needed pads with explicit zeros, fewer raises at run
  time): the structure is then found through a dense `(m, k)` count of the products,
  which costs `m * k` memory, and the values gathered from the dense product `A @ B`.
  Build large products outside `jit` and pass the result in.
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._base import SparseMatrix, index_dtype_for, is_concrete, register_for_format
from ._coordinates import (
    csr_from_entries,
    entries,
    host_keys,
    static_nnz,
    summed_values,
    unique_positions,
)
from ._dia_layout import active_diagonals, diagonal_lengths, inside_slots
from ._matmul import matmul, sparse_times_sparse
from ._structure_primitive import runs_natively
from .kernels import native_csr
from .kernels._precision import accumulation_dtype


@sparse_times_sparse.register(SparseMatrix)
def spgemm(a, b, *, nnz: int | None = None, backend: str = "auto"):
    """The product `a @ b` of two sparse matrices (see the module docstring).

    **Arguments:**

    - `a`, `b`: `DIAMatrix` or `CSRMatrix` of shapes `(m, n)` and `(n, k)`.
    - `nnz`: the number of stored entries of a CSR result: needed under `jax.jit` when the
      factors' indices are traced (0 only where a factor has no stored entries); ignored
      for DIA @ DIA.
    - `backend`: the backend of the dense products on the `jit` path.

    **Returns:** a `DIAMatrix` for DIA @ DIA, else a `CSRMatrix`, of shape `(m, k)` and the
    promoted dtype.
    """
    if not isinstance(b, SparseMatrix):
        raise TypeError(f"`b` must be a sparse matrix, got {type(b).__name__}.")
    if a.shape[1] != b.shape[0]:
        raise ValueError(
            f"matmul: dimension mismatch: {a.shape} @ {b.shape} "
            f"(inner dimensions {a.shape[1]} and {b.shape[0]} differ)."
        )
    if type(a) is type(b):
        return _same_format_product(a, b, nnz, backend)
    return _csr_product(a, b, nnz, backend)


@functools.singledispatch
def _same_format_product(a, b, nnz, backend):
    return _csr_product(a, b, nnz, backend)


@register_for_format("dia", _same_format_product)
def _dia_product(a, b, nnz, backend):
    return _dia_times_dia(a, b)


def _csr_product(a, b, nnz, backend):
    """`a @ b` as CSR: on the host where both structures are concrete, else under `jit`
    with the static `nnz`."""
    a, b = a.tocsr(), b.tocsr()
    if is_concrete(a.indices, a.indptr, b.indices, b.indptr):
        return _csr_times_csr_on_host(a, b, nnz)
    if nnz is None and (a.nnz == 0 or b.nnz == 0 or a.shape[0] * b.shape[1] == 0):
        nnz = 0  # statically empty: no entry to count
    static_nnz(None, nnz, "sparse @ sparse with a CSR factor")
    return _csr_times_csr_traced(a, b, nnz, backend)


@jax.jit
def _dia_times_dia(a, b):
    """`C = A @ B`: `C.data[r, c] += A.data[p, c - b_q] * B.data[q, c]` for every pair of
    diagonals `(p, q)` with `a_p + b_q` the offset of `r`."""
    m, inner = a.shape
    k = b.shape[1]
    dtype = jnp.result_type(a.dtype, b.dtype)
    a_index, a_offsets = active_diagonals(a.offsets, a.shape)
    b_index, b_offsets = active_diagonals(b.offsets, b.shape)
    sums = {x + y for x in a_offsets for y in b_offsets}
    offsets = tuple(sorted(off for off in sums if diagonal_lengths((off,), (m, k))[0] > 0))
    if not offsets:
        return type(a)(jnp.zeros((0, k), dtype), offsets, (m, k))
    position = {off: r for r, off in enumerate(offsets)}
    # Half precision multiplies and adds in float32, as the products do, rounded once.
    accumulate = accumulation_dtype(dtype)
    a_clean = inside_slots(a.data, a.offsets, a.shape, a_index).astype(accumulate)
    b_clean = inside_slots(b.data, b.offsets, b.shape, b_index).astype(accumulate)
    # `a_clean` padded by `k` columns on each side, so that a shift by any offset of B that
    # meets B (`-inner < b_q < k`) is one static slice.
    padded = jnp.pad(a_clean, ((0, 0), (k, k)))
    # Each result diagonal is a plain sum of products, stacked (no scatter): small programs
    # that compile fast.
    sums = [None] * len(offsets)
    for q, b_off in enumerate(b_offsets):
        start = k - b_off
        shifted = padded[:, start : start + k]
        for p, a_off in enumerate(a_offsets):
            r = position.get(a_off + b_off)
            if r is not None:
                term = shifted[p] * b_clean[q]
                sums[r] = term if sums[r] is None else sums[r] + term
    return type(a)(jnp.stack(sums).astype(dtype), offsets, (m, k))


def _csr_times_csr_on_host(a, b, nnz):
    """Phase one on the host (every pair of entries and its position), phase two traced.

    On a CPU the native kernels find the pairs and positions (`_csr_times_csr_natively`),
    else numpy: the same arrays, so the same values bit for bit."""
    m, k = a.shape[0], b.shape[1]
    a_indices, b_indptr = np.asarray(a.indices, np.int64), np.asarray(b.indptr, np.int64)
    starts = b_indptr[a_indices]
    lengths = b_indptr[a_indices + 1] - starts
    pairs = int(lengths.sum())
    index_dtype = index_dtype_for((max(a.shape), k), max(a.nnz, b.nnz, pairs))
    if pairs and runs_natively(index_dtype):
        return _csr_times_csr_natively(a, b, nnz, index_dtype, pairs)
    a_rows = np.asarray(entries(a)[0], np.int64)
    left = np.repeat(np.arange(a.nnz), lengths)
    first_pair = np.cumsum(lengths) - lengths
    right = np.repeat(starts - first_pair, lengths) + np.arange(int(lengths.sum()))
    rows = a_rows[left]
    cols = np.asarray(b.indices, np.int64)[right]
    structure = unique_positions(host_keys(rows, cols, (m, k)))
    found = structure[0].size
    nnz = found if nnz is None else static_nnz(None, nnz, "sparse @ sparse")
    if found > nnz:
        raise ValueError(f"`nnz`={nnz} is smaller than the product's {found} entries.")
    dtype = jnp.result_type(a.dtype, b.dtype)
    entry_index = index_dtype_for((a.nnz, b.nnz), 0)
    left, right = left.astype(entry_index), right.astype(entry_index)
    values = _pair_products(a.data, b.data, left, right, dtype)
    return csr_from_entries(rows, cols, values, (m, k), nnz, structure=structure)


def _csr_times_csr_natively(a, b, nnz, index_dtype, pairs: int):
    """`_csr_times_csr_on_host` with the structure from the native kernels
    (`native/csr_product.cc`), for factors with `pairs` > 0 pairs of entries."""
    m, k = a.shape[0], b.shape[1]
    with jax.ensure_compile_time_eval():  # a structure known on the host stays known
        arrays = tuple(
            jnp.asarray(x).astype(index_dtype) for x in (a.indices, a.indptr, b.indices, b.indptr)
        )
        counts = native_csr.csr_product_counts_native(*arrays, num_cols=k)
        indptr = np.asarray(counts[0])
        found = int(indptr[m])
        indices, left, right, slots = native_csr.csr_product_fill_native(
            *arrays, *counts, num_cols=k, nnz=found, pairs=pairs
        )
    nnz = found if nnz is None else static_nnz(None, nnz, "sparse @ sparse")
    if found > nnz:
        raise ValueError(f"`nnz`={nnz} is smaller than the product's {found} entries.")
    result_index = index_dtype_for((m, k), nnz)
    # numpy, as the numpy path's: the structure stays concrete under an outer `jit`.
    indices = np.asarray(indices).astype(result_index, copy=False)
    if nnz > found:  # padding entries at the end of the last row, as `csr_from_entries`
        indices = np.concatenate([indices, np.full((nnz - found,), k - 1, result_index)])
        indptr = np.concatenate([indptr[:m], [nnz]])
    values = _pair_products(a.data, b.data, left, right, jnp.result_type(a.dtype, b.dtype))
    return type(a)(
        summed_values(values, slots.astype(result_index), nnz),
        indices,
        indptr.astype(result_index),
        (m, k),
    )


@functools.partial(jax.jit, static_argnames="dtype")
def _pair_products(a_data, b_data, left, right, dtype):
    """`a_data[left] * b_data[right]` in `dtype`: one program, not an eager gather per
    operand with host index arrays."""
    return a_data.astype(dtype)[left] * b_data.astype(dtype)[right]


def _csr_times_csr_traced(a, b, nnz: int, backend: str):
    """The structure from a dense count of the products, the values from `A @ B` dense."""
    m, k = a.shape[0], b.shape[1]
    dtype = jnp.result_type(a.dtype, b.dtype)
    if nnz == 0 and a.nnz and b.nnz and m * k:
        # Only a run-time count could tell an empty product, and XLA drops a run-time check
        # on a result with no stored entries: refused rather than zeros silently.
        raise ValueError(
            "`nnz`=0 under `jax.jit` for a product of two matrices with stored entries: "
            "their product's entries are counted at run time, where no check on an empty "
            "result can fire. Pass `nnz` >= 1 (unused slots hold explicit zeros), or "
            "multiply outside `jit`."
        )
    if nnz == 0 or m * k == 0:
        empty = jnp.zeros((0,), jnp.int32)
        return csr_from_entries(empty, empty, jnp.zeros((0,), dtype), (m, k), nnz)
    pattern_b = b.with_data(jnp.ones((b.nnz,), jnp.float32)).todense()
    counts = matmul(a.with_data(jnp.ones((a.nnz,), jnp.float32)), pattern_b, backend=backend)
    found = jnp.count_nonzero(counts > 0)
    rows, cols = jnp.nonzero(counts > 0, size=nnz, fill_value=(m - 1, k - 1))
    product = matmul(a.astype(dtype), b.astype(dtype).todense(), backend=backend)
    values = jnp.where(jnp.arange(nnz) < found, product[rows, cols], jnp.zeros((), dtype))
    values = eqx.error_if(
        values, found > nnz, f"`nnz`={nnz} is smaller than the number of entries of the product"
    )
    return csr_from_entries(rows, cols, values, (m, k), nnz)
