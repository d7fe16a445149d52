"""The CSR product family, declared as data: what each product computes, and which
implementation families compute it.

- `csr_matmul_p(data, x, indices, indptr)   = A @ x`, `x` of shape `(n, k)`;
- `csr_matmul_t_p(data, g, indices, indptr) = A^T @ g`, `g` of shape `(m, k)`, on `A`'s
  own structure (no transposed copy on the XLA and native paths);
- `csr_sddmm_p(g, x, indices, indptr)`: `out[p] = g[row(p)] . x[indices[p]]`, `(nnz,)`:
  the gradient of `A @ x` in `data`.

`indices` and `indptr` are integer structure and get no gradient. Parameters: the static
`shape`, and `backend`. Autodiff, batching and the choice of implementation come from
`_primitive.product_family`.

The gradient step of `A @ x` in `data` and `x` together is one `pullback` primitive, which
the `native` family computes in one pass over the entries (`csr_matmul_pullback_native`).

Every family takes the batch axis of the product contract; the `native` family
(`kernels/native_csr.py`, C++) runs a whole batch in one call that reads the structure
once. A batch of structures (`vmap` over whole matrices) is one block-diagonal matrix
(`_block_diagonal`); a member whose structure is invalid gets NaN in all of its result.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ._csr_layout import structure_valid
from ._families import implementations
from ._primitive import product_family


def _values_shape(indices, indptr, *, shape):
    return indices.shape


def _block_diagonal(primitive, args, dims, *, shape, **params):
    """The batching rule for a batch of `B` structures: one product with the block-diagonal
    matrix of the `B` matrices, of shape `(B * m, B * n)`. Values stack their entries and
    dense operands their rows (after any leading batch axis of their own); a shared one is
    repeated.

    Each member's structure is checked here, because one member's bad index would land in
    another member's block. An invalid member gets NaN in all of its result, not an error:
    `vmap` of a `cond` runs the branch not taken with zero-filled structures and discards
    what it computes."""
    first, second, indices, indptr = args
    size = next(a.shape[d] for a, d in zip(args, dims, strict=True) if d is not None)
    (m, n), nnz = shape, indices.shape[-1]
    if size == 0:
        return _empty_batch(primitive, args, dims, shape=shape, **params)
    if size * max(m, n, nnz) > np.iinfo(indices.dtype).max:
        raise ValueError(
            f"{primitive.name}: a batch of {size} structures of shape {shape} with {nnz} "
            f"entries overflows {indices.dtype} indices; use int64 indices."
        )
    indices, indptr = _repeated(indices, dims[2], size), _repeated(indptr, dims[3], size)
    valid = _valid_members(indices, indptr, shape)
    indices = jnp.where(valid[:, None], indices, 0)
    # An invalid member's stand-in: every entry in row 0, column 0.
    indptr = jnp.where(valid[:, None] | (jnp.arange(m + 1) == 0), indptr, nnz)
    block = jnp.arange(size, dtype=indices.dtype)[:, None]
    indices = (indices + block * n).reshape(-1)
    indptr = indptr + block * nnz
    indptr = jnp.concatenate([indptr[:, :-1].reshape(-1), indptr[-1, -1:]])
    sddmm = primitive.name.endswith("_sddmm")
    axes = (-2, -2) if sddmm else (-1, -2)
    first, second = (
        _stacked(a, d, size, axis)
        for a, d, axis in zip((first, second), dims[:2], axes, strict=True)
    )
    out = primitive.bind(first, second, indices, indptr, shape=(size * m, size * n), **params)
    axis = out.ndim + (-1 if sddmm else -2)
    # Explicit sizes: `reshape(-1)` divides by the other sizes, which may be 0.
    out = out.reshape(*out.shape[:axis], size, out.shape[axis] // size, *out.shape[axis + 1 :])
    valid = valid.reshape(size, *(1,) * (out.ndim - axis - 1))
    return jnp.where(valid, out, jnp.nan), axis


def _valid_members(indices, indptr, shape):
    """`(B,)`: whether each member's `(nnz,)` indices and `(m + 1,)` index pointer form a
    valid structure of `shape`."""
    valid = functools.partial(structure_valid, num_cols=shape[1])
    return jax.vmap(valid)(indices, indptr)


def _empty_batch(primitive, args, dims, *, shape, **params):
    """A batch of no structures: the results of one member, with no member."""
    member = [
        jax.ShapeDtypeStruct(a.shape if d is None else a.shape[:d] + a.shape[d + 1 :], a.dtype)
        for a, d in zip(args, dims, strict=True)
    ]
    out = jax.eval_shape(lambda *a: primitive.bind(*a, shape=shape, **params), *member)
    return jnp.zeros((0, *out.shape), out.dtype), 0


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
    merged = array.shape[at] * array.shape[at + 1]
    return array.reshape(*array.shape[:at], merged, *array.shape[at + 2 :])


# The families' functions for CSR (`_families.FAMILIES`: which family runs where).
IMPLEMENTATIONS, SUPPORTS, FUSED_PULLBACKS = implementations("csr", values_rank=1)
CSR_PRODUCTS = product_family(
    "csr",
    values_shape=_values_shape,
    implementations=IMPLEMENTATIONS,
    supports=SUPPORTS,
    batch_structure=_block_diagonal,
    fused_pullbacks=FUSED_PULLBACKS,
)
csr_matmul_p = CSR_PRODUCTS.matmul
csr_matmul_t_p = CSR_PRODUCTS.matmul_t
csr_sddmm_p = CSR_PRODUCTS.sddmm
