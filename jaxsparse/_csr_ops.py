"""The CSR product family, declared as data: what each product computes, and which
implementation families compute it.

- `csr_matmul_p(data, x, indices, indptr)   = A @ x`, `x` of shape `(n, k)`;
- `csr_matmul_t_p(data, g, indices, indptr) = A^T @ g`, `g` of shape `(m, k)`, on `A`'s
  own structure (no transposed copy on the XLA and CPU paths);
- `csr_sddmm_p(g, x, indices, indptr)`: `out[p] = g[row(p)] . x[indices[p]]`, `(nnz,)`:
  the gradient of `A @ x` in `data`.

`indices` and `indptr` are integer structure and get no gradient. Parameters: the static
`shape`, and `backend`. Autodiff, batching and the choice of implementation come from
`_primitive.product_family`.

The `cpu` family (`kernels/cpu_csr.py`: jaxlib's native product) takes one matrix; its
batched calls run `kernels/cpu_csr_batch.py` (product) and the `jax.vmap` of its sampled
product. A batch of structures (`vmap` over whole matrices) is one block-diagonal matrix
(`_block_diagonal`).
"""

import jax.numpy as jnp
import numpy as np

from ._primitive import product_family
from .kernels import mosaic_tpu_csr, triton_csr
from .kernels._batch import over_batch
from .kernels._xla_cpu import outside_ynn_fusions
from .kernels.cpu_csr import csr_matmul_cpu, csr_sddmm_cpu
from .kernels.cpu_csr_batch import csr_matmul_cpu_batched
from .kernels.mosaic_tpu_csr import (
    csr_matmul_mosaic_tpu,
    csr_matmul_t_mosaic_tpu,
    csr_sddmm_mosaic_tpu,
)
from .kernels.triton_csr import csr_matmul_t_triton, csr_matmul_triton, csr_sddmm_triton
from .kernels.xla_csr import csr_matmul_t_xla, csr_matmul_xla, csr_sddmm_xla


def _values_shape(indices, indptr, *, shape):
    return indices.shape


def _one_or_batch(one, batch, *, first_rank: int):
    """An implementation running `one` for one matrix and `batch` for a batch (a `first`
    argument of more than `first_rank` axes, or a 3-D `second`)."""

    def implementation(first, second, indices, indptr, *, shape):
        function = one if first.ndim == first_rank and second.ndim == 2 else batch
        return function(first, second, indices, indptr, shape=shape)

    return implementation


def _matmul_cpu_batch(data, x, indices, indptr, *, shape):
    return outside_ynn_fusions(csr_matmul_cpu_batched(data, x, indices, indptr, shape=shape))


def _sddmm_cpu_batch(g, x, indices, indptr, *, shape):
    return over_batch(csr_sddmm_cpu, (g, x, indices, indptr), (2, 2, 1, 1), shape=shape)


def _block_diagonal(primitive, args, dims, *, shape, **params):
    """The batching rule for a batch of `B` structures: one product with the block-diagonal
    matrix of the `B` matrices, of shape `(B * m, B * n)`. Values stack their entries and
    dense operands their rows (after any leading batch axis of their own); a shared one is
    repeated."""
    first, second, indices, indptr = args
    size = next(a.shape[d] for a, d in zip(args, dims, strict=True) if d is not None)
    (m, n), nnz = shape, indices.shape[-1]
    if size * max(m, n, nnz) > np.iinfo(indices.dtype).max:
        raise ValueError(
            f"{primitive.name}: a batch of {size} structures of shape {shape} with {nnz} "
            f"entries overflows {indices.dtype} indices; use int64 indices."
        )
    block = jnp.arange(size, dtype=indices.dtype)[:, None]
    indices = (_repeated(indices, dims[2], size) + block * n).reshape(-1)
    indptr = _repeated(indptr, dims[3], size) + block * nnz
    indptr = jnp.concatenate([indptr[:, :-1].reshape(-1), indptr[-1, -1:]])
    sddmm = primitive.name.endswith("_sddmm")
    axes = (-2, -2) if sddmm else (-1, -2)
    first, second = (
        _stacked(a, d, size, axis)
        for a, d, axis in zip((first, second), dims[:2], axes, strict=True)
    )
    out = primitive.bind(first, second, indices, indptr, shape=(size * m, size * n), **params)
    axis = out.ndim + (-1 if sddmm else -2)
    return out.reshape(*out.shape[:axis], size, -1, *out.shape[axis + 1 :]), axis


def _repeated(array, dim, size):
    """`array` with its batch axis (`dim`) first, or repeated `size` times if it has none."""
    if dim is None:
        return jnp.broadcast_to(array, (size, *array.shape))
    return jnp.moveaxis(array, dim, 0)


def _stacked(array, dim, size, axis: int):
    """`array`'s batch axis `dim` (or `size` repeats if `None`) merged into its axis `axis`
    (negative: counted without the batch axis), batch-major."""
    if dim is None:
        at = array.ndim + axis
        shape = list(array.shape)
        shape.insert(at, size)
        array = jnp.broadcast_to(jnp.expand_dims(array, at), shape)
    else:
        array = jnp.moveaxis(array, dim, axis - 1)
    at = array.ndim + axis - 1
    return array.reshape(*array.shape[:at], -1, *array.shape[at + 2 :])


# The table: member -> implementation family -> function (see `_backend.py` for which
# family runs where). A new family is one key per member.
IMPLEMENTATIONS = {
    "matmul": {
        "xla": csr_matmul_xla,
        "cpu": _one_or_batch(csr_matmul_cpu, _matmul_cpu_batch, first_rank=1),
        "triton": csr_matmul_triton,
        "mosaic_tpu": csr_matmul_mosaic_tpu,
    },
    "matmul_t": {
        "xla": csr_matmul_t_xla,
        "triton": csr_matmul_t_triton,
        "mosaic_tpu": csr_matmul_t_mosaic_tpu,
    },
    "sddmm": {
        "xla": csr_sddmm_xla,
        "cpu": _one_or_batch(csr_sddmm_cpu, _sddmm_cpu_batch, first_rank=2),
        "triton": csr_sddmm_triton,
        "mosaic_tpu": csr_sddmm_mosaic_tpu,
    },
}
CSR_PRODUCTS = product_family(
    "csr",
    values_shape=_values_shape,
    implementations=IMPLEMENTATIONS,
    supports={"triton": triton_csr.supports, "mosaic_tpu": mosaic_tpu_csr.supports},
    batch_structure=_block_diagonal,
)
csr_matmul_p = CSR_PRODUCTS.matmul
csr_matmul_t_p = CSR_PRODUCTS.matmul_t
csr_sddmm_p = CSR_PRODUCTS.sddmm
