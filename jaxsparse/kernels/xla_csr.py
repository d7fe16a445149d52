"""The CSR products in pure `jax.numpy`: the portable XLA path and the test oracle.

Row `i` holds the entries `indptr[i]:indptr[i + 1]`; column indices may be unsorted and
repeated (repeats add up, as in scipy). Dense operands are 2-D, all floating operands of
one call share a dtype, and bfloat16/float16 accumulate in float32. Every routine works
on all entries at once with gathers and segment sums, never on a dense matrix. The
lowering holds no custom call, so it runs on any XLA runtime and exports anywhere.

An invalid structure gives NaN, as the Pallas kernels' does (so do entries in a matrix
with no rows or no columns): a column outside `[0, n)` makes its row of `A @ x` and its
entry of the sampled product NaN (the operand's rows are gathered with NaN past the
ends), and all of `A.T @ g` (the scatter would drop it silently); an index pointer that
does not start at 0, decreases or does not end at `nnz` makes every element of a result
NaN. `check()` reports the same as an error.

Each routine also takes the batch axis of `_primitive.py` ("Batches"): `data` `(B, nnz)`,
dense operands `(B, rows, k)` or shared, through `jax.vmap`: one batched program that
computes the row ids, and gathers a shared operand's rows, once for the whole batch.
"""

import jax
import jax.numpy as jnp

from .._csr_layout import bounds_valid, dropped_outside, row_ids, structure_valid
from ._batch import over_batch
from ._csr_common import nan_unless
from ._precision import accumulation_dtype


def csr_matmul_xla(data, x, indices, indptr, *, shape: tuple[int, int]) -> jax.Array:
    """`A @ x` for a CSR matrix: `(m, k)` in `x.dtype`. `x` is `(n, k)`."""
    return over_batch(_matmul, (data, x, indices, indptr), (1, 2, 1, 1), shape=shape)


def _matmul(data, x, indices, indptr, *, shape):
    m, _ = shape
    if data.shape[0] > 0 and 0 in shape:
        return jnp.full((m, x.shape[1]), jnp.nan, x.dtype)  # entries with no place
    acc = accumulation_dtype(x.dtype)
    rows = row_ids(indptr, data.shape[0])
    products = data[:, None].astype(acc) * _gathered_rows(x, indices).astype(acc)
    out = jax.ops.segment_sum(products, rows, num_segments=m, indices_are_sorted=True)
    return nan_unless(bounds_valid(indptr, data.shape[0]), out.astype(x.dtype))


def csr_matmul_t_xla(data, g, indices, indptr, *, shape: tuple[int, int]) -> jax.Array:
    """`A^T @ g` for a CSR matrix: `(n, k)` in `g.dtype`. `g` is `(m, k)`."""
    return over_batch(_matmul_t, (data, g, indices, indptr), (1, 2, 1, 1), shape=shape)


def _matmul_t(data, g, indices, indptr, *, shape):
    _, n = shape
    if data.shape[0] > 0 and 0 in shape:
        return jnp.full((n, g.shape[1]), jnp.nan, g.dtype)  # entries with no place
    acc = accumulation_dtype(g.dtype)
    rows = row_ids(indptr, data.shape[0])
    products = data[:, None].astype(acc) * g[rows].astype(acc)
    out = jax.ops.segment_sum(products, indices, num_segments=n).astype(g.dtype)
    return nan_unless(structure_valid(indices, indptr, n), out)


def csr_sddmm_xla(g, x, indices, indptr, *, shape: tuple[int, int]) -> jax.Array:
    """Sampled product `out[p] = sum_c g[row(p), c] * x[indices[p], c]`, `(nnz,)`.

    The gradient of `A @ x` with respect to CSR `data`.
    """
    return over_batch(_sddmm, (g, x, indices, indptr), (2, 2, 1, 1), shape=shape)


def _sddmm(g, x, indices, indptr, *, shape):
    if 0 in shape:  # entries with no place
        return jnp.full(indices.shape, jnp.nan, x.dtype)
    acc = accumulation_dtype(x.dtype)
    rows = row_ids(indptr, indices.shape[0])
    products = g[rows].astype(acc) * _gathered_rows(x, indices).astype(acc)
    out = jnp.sum(products, axis=1).astype(x.dtype)
    return nan_unless(bounds_valid(indptr, indices.shape[0]), out)


def _gathered_rows(x, indices):
    """`x[indices]`, with NaN rows for indices outside `x` (rather than clamped ones)."""
    return x.at[dropped_outside(indices, x.shape[0])].get(mode="fill", fill_value=jnp.nan)
