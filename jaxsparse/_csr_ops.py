"""CSR operations as JAX primitives, with their autodiff and batching rules.

Three primitives close on themselves under differentiation. Each is bilinear in its two
floating arguments; `indices` and `indptr` are integer structure and get no gradient.

| primitive                  | result            | transpose in 1st float | in 2nd float |
|----------------------------|-------------------|------------------------|--------------|
| `matmul(data, ..., x)`     | `A @ x`           | `sddmm(G, x)`          | `A^T @ G`    |
| `matmul_t(data, ..., g)`   | `A^T @ g`         | `sddmm(g, H)`          | `A @ H`      |
| `sddmm(..., g, x)`, (nnz,) | `g[row] . x[col]` | `A_h @ x`              | `A_h^T @ g`  |

(`A_h` is the CSR matrix with the structure of `A` and values `h`, the cotangent.)
The transposed product runs on `A`'s own structure, so the backward pass never builds a
dense matrix nor, on the XLA path, a transposed copy of the structure.
"""

import jax
from jax.core import ShapedArray
from jax.interpreters import ad, batching

from ._primitive import (
    batch_by_folding_columns,
    batch_by_mapping,
    check_same_dtype,
    define_primitive,
)
from .kernels import cpu, reference


def _pallas_csr_matmul(data, indices, indptr, x, *, interpret, platform, shape):
    from .kernels import csr

    return csr.csr_matmul(
        data, indices, indptr, x, shape=shape, interpret=interpret, platform=platform
    )


def _pallas_csr_matmul_transpose(data, indices, indptr, g, *, interpret, platform, shape):
    from .kernels import csr

    return csr.csr_matmul_transpose(
        data, indices, indptr, g, shape=shape, interpret=interpret, platform=platform
    )


def _pallas_csr_sddmm(indices, indptr, g, x, *, interpret, platform, shape):
    from .kernels import csr

    return csr.csr_sddmm(indices, indptr, g, x, shape=shape, interpret=interpret, platform=platform)


def _pallas_supports(dtype, platform):
    from .kernels import csr

    return csr.pallas_supports(dtype, platform)


def _matmul_abstract_eval(data, indices, indptr, x, *, shape, backend):
    check_same_dtype("csr_matmul", data, x)
    return ShapedArray((shape[0], x.shape[1]), x.dtype)


def _matmul_t_abstract_eval(data, indices, indptr, g, *, shape, backend):
    check_same_dtype("csr_matmul_transpose", data, g)
    return ShapedArray((shape[1], g.shape[1]), g.dtype)


def _sddmm_abstract_eval(indices, indptr, g, x, *, shape, backend):
    check_same_dtype("csr_sddmm", g, x)
    return ShapedArray(indices.shape, x.dtype)


csr_matmul_p = define_primitive(
    "jaxsparse_csr_matmul",
    abstract_eval=_matmul_abstract_eval,
    xla_impl=reference.csr_matmul,
    pallas_impl=_pallas_csr_matmul,
    pallas_supports=_pallas_supports,
    cpu_impl=cpu.csr_matmul,
)
csr_matmul_t_p = define_primitive(
    "jaxsparse_csr_matmul_transpose",
    abstract_eval=_matmul_t_abstract_eval,
    xla_impl=reference.csr_matmul_transpose,
    pallas_impl=_pallas_csr_matmul_transpose,
    pallas_supports=_pallas_supports,
)
csr_sddmm_p = define_primitive(
    "jaxsparse_csr_sddmm",
    abstract_eval=_sddmm_abstract_eval,
    xla_impl=reference.csr_sddmm,
    pallas_impl=_pallas_csr_sddmm,
    pallas_supports=_pallas_supports,
    cpu_impl=cpu.csr_sddmm,
)


def csr_matmul(data, indices, indptr, x, *, shape, backend) -> jax.Array:
    """`A @ x` for `x` of shape `(n, k)`; all arguments already validated and promoted."""
    return csr_matmul_p.bind(data, indices, indptr, x, shape=shape, backend=backend)


def csr_transposed_matmul(data, indices, indptr, g, *, shape, backend) -> jax.Array:
    """`A^T @ g` for `g` of shape `(m, k)`."""
    return csr_matmul_t_p.bind(data, indices, indptr, g, shape=shape, backend=backend)


def csr_sddmm(indices, indptr, g, x, *, shape, backend) -> jax.Array:
    """`out[p] = g[row(p)] . x[indices[p]]`, shape `(nnz,)`."""
    return csr_sddmm_p.bind(indices, indptr, g, x, shape=shape, backend=backend)


def _is_zero(tangent) -> bool:
    return type(tangent) is ad.Zero


def _bilinear_jvp(primitive, first: int, second: int):
    """JVP of a primitive bilinear in arguments `first` and `second`: two more products.

    JAX calls a JVP rule only when some tangent is nonzero, and the integer structure's
    tangents are always zero, so at least one of the two products is formed.
    """

    def jvp(primals, tangents, **params):
        out = primitive.bind(*primals, **params)
        terms = []
        for position in (first, second):
            if not _is_zero(tangents[position]):
                args = list(primals)
                args[position] = tangents[position]
                terms.append(primitive.bind(*args, **params))
        return out, sum(terms[1:], start=terms[0])

    return jvp


def _matmul_transpose(ct, data, indices, indptr, x, **params):
    if _is_zero(ct):
        return None, None, None, None
    if ad.is_undefined_primal(data):
        return csr_sddmm(indices, indptr, ct, x, **params), None, None, None
    return None, None, None, csr_transposed_matmul(data, indices, indptr, ct, **params)


def _matmul_t_transpose(ct, data, indices, indptr, g, **params):
    if _is_zero(ct):
        return None, None, None, None
    if ad.is_undefined_primal(data):
        return csr_sddmm(indices, indptr, g, ct, **params), None, None, None
    return None, None, None, csr_matmul(data, indices, indptr, ct, **params)


def _sddmm_transpose(ct, indices, indptr, g, x, **params):
    if _is_zero(ct):
        return None, None, None, None
    if ad.is_undefined_primal(g):
        return None, None, csr_matmul(ct, indices, indptr, x, **params), None
    return None, None, None, csr_transposed_matmul(ct, indices, indptr, g, **params)


ad.primitive_jvps[csr_matmul_p] = _bilinear_jvp(csr_matmul_p, 0, 3)
ad.primitive_jvps[csr_matmul_t_p] = _bilinear_jvp(csr_matmul_t_p, 0, 3)
ad.primitive_jvps[csr_sddmm_p] = _bilinear_jvp(csr_sddmm_p, 2, 3)
ad.primitive_transposes[csr_matmul_p] = _matmul_transpose
ad.primitive_transposes[csr_matmul_t_p] = _matmul_t_transpose
ad.primitive_transposes[csr_sddmm_p] = _sddmm_transpose


def _batch_dense_operand(primitive):
    """Fold a batch of dense operands into columns; map over anything else batched."""

    def rule(args, dims, **params):
        if all(d is None for d in dims[:3]):
            return batch_by_folding_columns(primitive, args, dims, operand=3, params=params)
        return batch_by_mapping(primitive, args, dims, params=params)

    return rule


batching.primitive_batchers[csr_matmul_p] = _batch_dense_operand(csr_matmul_p)
batching.primitive_batchers[csr_matmul_t_p] = _batch_dense_operand(csr_matmul_t_p)
batching.primitive_batchers[csr_sddmm_p] = lambda args, dims, **params: batch_by_mapping(
    csr_sddmm_p, args, dims, params=params
)
