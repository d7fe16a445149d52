"""What the CSR Pallas kernel families (Triton, Mosaic TPU) share: argument checks, and
the transposed product as the family's product on the transposed structure."""

import jax.numpy as jnp

from .._csr_layout import transposed_structure


def check_structure(values, indices, indptr, shape) -> None:
    """`indices`, `indptr` (and `values`, if not `None`) fit a CSR matrix of `shape`."""
    m, _ = shape
    if indices.ndim != 1 or indptr.ndim != 1:
        raise ValueError(f"{indices.shape=} and {indptr.shape=} must be 1-D")
    if values is not None and values.shape != indices.shape:
        raise ValueError(f"data.shape={values.shape} must equal {indices.shape=}")
    if indptr.shape != (m + 1,):
        raise ValueError(f"{indptr.shape=} must be (m + 1,) for {shape=}")
    if indices.dtype != indptr.dtype or indices.dtype not in (jnp.int32, jnp.int64):
        raise ValueError(f"{indices.dtype=} and {indptr.dtype=} must be the same int32/int64")


def check_dense(name: str, array, rows: int, dtype) -> None:
    """`array` is a 2-D `(rows, k)` operand of `dtype`."""
    if array.ndim != 2 or array.shape[0] != rows:
        raise ValueError(f"{name}.shape={array.shape} must be ({rows}, k)")
    if array.dtype != dtype:
        raise ValueError(f"{name}.dtype={array.dtype} must equal {dtype=}")


def check_sddmm(g, x, indices, indptr, shape) -> None:
    """The arguments of a sampled product `g[row(p)] . x[indices[p]]`."""
    m, n = shape
    check_structure(None, indices, indptr, shape)
    check_dense("g", g, m, g.dtype)
    check_dense("x", x, n, g.dtype)
    if g.shape[1] != x.shape[1]:
        raise ValueError(f"{g.shape=} and {x.shape=} must have the same number of columns")


def matmul_t_by_transposed_structure(matmul, data, g, indices, indptr, *, shape, **options):
    """`A.T @ g` as `matmul` (a family's product) on `A.T`'s structure, built in XLA by a
    stable sort (`O(nnz log nnz)` per call): deterministic, right for repeated columns,
    and free of the atomics a scatter kernel would need (which TPU lacks, and which on GPU
    are non-deterministic)."""
    m, n = shape
    check_structure(data, indices, indptr, shape)
    check_dense("g", g, m, data.dtype)
    order, indices_t, indptr_t = transposed_structure(indices, indptr, n)
    return matmul(data[order], g, indices_t, indptr_t, shape=(n, m), **options)
