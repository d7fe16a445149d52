"""What the CSR kernel families share: argument checks (with the batch axis of
`_primitive.py`: values `(B, nnz)`, dense operands `(B, rows, k)` or shared), NaN as the
answer to an invalid structure, and the transposed product as the family's product on the
transposed structure (Triton, Mosaic TPU)."""

import jax
import jax.numpy as jnp

from .._csr_layout import structure_valid, transposed_structure


def check_structure(values, indices, indptr, shape) -> None:
    """`indices`, `indptr` (and `values`, if not `None`) fit a CSR matrix of `shape`."""
    m, _ = shape
    if indices.ndim != 1 or indptr.ndim != 1:
        raise ValueError(f"{indices.shape=} and {indptr.shape=} must be 1-D")
    if values is not None and (values.ndim not in (1, 2) or values.shape[-1:] != indices.shape):
        raise ValueError(f"data.shape={values.shape} must be {indices.shape=}, or batched")
    if indptr.shape != (m + 1,):
        raise ValueError(f"{indptr.shape=} must be (m + 1,) for {shape=}")
    if indices.dtype != indptr.dtype or indices.dtype not in (jnp.int32, jnp.int64):
        raise ValueError(f"{indices.dtype=} and {indptr.dtype=} must be the same int32/int64")


def nan_unless(valid, out) -> jax.Array:
    """`out` where the boolean scalar `valid` holds, NaN throughout where it does not: a
    product's answer to an invalid structure (complex: NaN in both parts)."""
    if not jnp.issubdtype(out.dtype, jnp.inexact):
        return jnp.where(valid, out, jnp.full_like(out, jnp.nan))
    # `out - 0` is `out`, bit for bit. XLA fuses a subtracted scalar into what reads the
    # result, where a select of whole arrays is written out first (on a CPU).
    nan = jnp.full((), complex(jnp.nan, jnp.nan) if jnp.iscomplexobj(out) else jnp.nan, out.dtype)
    return out - jnp.where(valid, jnp.zeros((), out.dtype), nan)


def nan_if_invalid(out, indices, indptr, num_cols: int) -> jax.Array:
    """`out`, or NaN throughout if `indices` and `indptr` are not a valid structure."""
    return nan_unless(structure_valid(indices, indptr, num_cols), out)


def check_dense(name: str, array, rows: int, dtype, batch=None) -> None:
    """`array` is a `(rows, k)` operand of `dtype`, or `(batch, rows, k)` if `batch`."""
    if array.ndim not in (2, 3) or array.shape[-2] != rows:
        raise ValueError(f"{name}.shape={array.shape} must be ({rows}, k) or (B, {rows}, k)")
    if array.ndim == 3 and array.shape[0] != batch:
        raise ValueError(f"{name}.shape={array.shape} does not match the batch ({batch})")
    if array.dtype != dtype:
        raise ValueError(f"{name}.dtype={array.dtype} must equal {dtype=}")


def check_sddmm(g, x, indices, indptr, shape) -> None:
    """The arguments of a sampled product `g[row(p)] . x[indices[p]]`."""
    m, n = shape
    check_structure(None, indices, indptr, shape)
    batch = next((a.shape[0] for a in (g, x) if a.ndim == 3), None)
    check_dense("g", g, m, g.dtype, batch)
    check_dense("x", x, n, g.dtype, batch)
    if g.shape[-1] != x.shape[-1]:
        raise ValueError(f"{g.shape=} and {x.shape=} must have the same number of columns")


def matmul_t_by_transposed_structure(matmul, data, g, indices, indptr, *, shape, **options):
    """`A.T @ g` as `matmul` (a family's product) on `A.T`'s structure, built in XLA by a
    stable sort (`O(nnz log nnz)` per call): deterministic, right for repeated columns,
    and free of the atomics a scatter kernel would need (which TPU lacks, and which on GPU
    are non-deterministic). NaN throughout for an invalid structure."""
    m, n = shape
    check_structure(data, indices, indptr, shape)
    check_dense("g", g, m, data.dtype, data.shape[0] if data.ndim == 2 else None)
    order, indices_t, indptr_t = transposed_structure(indices, indptr, n)
    out = matmul(data[..., order], g, indices_t, indptr_t, shape=(n, m), **options)
    # The sort drops or wraps what is invalid, so the given structure is checked.
    return nan_if_invalid(out, indices, indptr, n)
