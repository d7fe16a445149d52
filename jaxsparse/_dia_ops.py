"""DIA operations as JAX primitives, with their autodiff and batching rules.

Three primitives, each bilinear in its two array arguments:

- `dia_matmul_p(data, x)   = A @ x`, `x` of shape `(n, k)`;
- `dia_matmul_t_p(data, g) = A^T @ g`, `g` of shape `(m, k)`;
- `dia_sddmm_p(g, x)       = d(A @ x)/d data` contracted with `g`:
  `out[d, j] = sum_c g[j - offsets[d], c] * x[j, c]`.

Their transposes are products of the same three kinds, so every order of differentiation
stays sparse:

| primitive         | transpose in the first argument | transpose in the second argument |
|-------------------|---------------------------------|----------------------------------|
| `A @ x`           | `sddmm(G, x)`                   | `A^T @ G`                        |
| `A^T @ g`         | `sddmm(g, G)`                   | `A @ G`                          |
| `sddmm(g, x)`     | `H @ x` (`H`: DIA with data `H`)| `H^T @ g`                        |

On the XLA path `A^T @ g` reads the diagonals where they are stored and shifts only `g`.
The Pallas kernels compute it as the product with `A^T`'s own diagonals (offsets negated,
each diagonal shifted by `_dia_layout.transpose_data`), so one kernel serves both.
"""

import functools

import jax
from jax.core import ShapedArray
from jax.interpreters import ad, batching

from ._dia_layout import negate_offsets, transpose_data
from ._primitive import (
    batch_by_folding_columns,
    batch_by_mapping,
    check_same_dtype,
    define_primitive,
)
from .kernels import cpu, reference


def _pallas_dia_matmul(data, x, *, interpret, platform, offsets, shape):
    from .kernels import dia

    return dia.dia_matmul(
        data, x, offsets=offsets, shape=shape, interpret=interpret, platform=platform
    )


def _pallas_dia_matmul_t(data, g, *, interpret, platform, offsets, shape):
    from .kernels import dia

    return dia.dia_matmul(
        transpose_data(data, offsets, shape),
        g,
        offsets=negate_offsets(offsets),
        shape=(shape[1], shape[0]),
        interpret=interpret,
        platform=platform,
    )


def _pallas_dia_sddmm(g, x, *, interpret, platform, offsets, shape):
    from .kernels import dia

    return dia.dia_sddmm(g, x, offsets=offsets, shape=shape, interpret=interpret, platform=platform)


def _pallas_supports(dtype, platform):
    from .kernels import dia

    return dia.pallas_supports(dtype, platform)


def _matmul_abstract_eval(data, x, *, offsets, shape, backend):
    check_same_dtype("dia_matmul", data, x)
    return ShapedArray((shape[0], x.shape[1]), x.dtype)


def _matmul_t_abstract_eval(data, g, *, offsets, shape, backend):
    check_same_dtype("dia_matmul_t", data, g)
    return ShapedArray((shape[1], g.shape[1]), g.dtype)


def _sddmm_abstract_eval(g, x, *, offsets, shape, backend):
    check_same_dtype("dia_sddmm", g, x)
    return ShapedArray((len(offsets), shape[1]), x.dtype)


dia_matmul_p = define_primitive(
    "jaxsparse_dia_matmul",
    abstract_eval=_matmul_abstract_eval,
    xla_impl=reference.dia_matmul,
    pallas_impl=_pallas_dia_matmul,
    pallas_supports=_pallas_supports,
    cpu_impl=cpu.dia_matmul,
)

dia_matmul_t_p = define_primitive(
    "jaxsparse_dia_matmul_t",
    abstract_eval=_matmul_t_abstract_eval,
    xla_impl=reference.dia_matmul_transpose,
    pallas_impl=_pallas_dia_matmul_t,
    pallas_supports=_pallas_supports,
    cpu_impl=cpu.dia_matmul_transpose,
)

dia_sddmm_p = define_primitive(
    "jaxsparse_dia_sddmm",
    abstract_eval=_sddmm_abstract_eval,
    xla_impl=reference.dia_sddmm,
    pallas_impl=_pallas_dia_sddmm,
    pallas_supports=_pallas_supports,
    cpu_impl=cpu.dia_sddmm,
)


def dia_matmul(data, x, *, offsets, shape, backend) -> jax.Array:
    """`A @ x` for `x` of shape `(n, k)`; all arguments already validated and promoted."""
    return dia_matmul_p.bind(data, x, offsets=offsets, shape=shape, backend=backend)


def dia_transposed_matmul(data, g, *, offsets, shape, backend) -> jax.Array:
    """`A^T @ g` for `g` of shape `(m, k)`."""
    return dia_matmul_t_p.bind(data, g, offsets=offsets, shape=shape, backend=backend)


def dia_sddmm(g, x, *, offsets, shape, backend) -> jax.Array:
    return dia_sddmm_p.bind(g, x, offsets=offsets, shape=shape, backend=backend)


def _matmul_transpose_data(ct, data, x, **params):
    return dia_sddmm(ad.instantiate_zeros(ct), x, **params)


def _matmul_transpose_x(ct, data, x, **params):
    return dia_transposed_matmul(data, ad.instantiate_zeros(ct), **params)


def _matmul_t_transpose_data(ct, data, g, **params):
    return dia_sddmm(g, ad.instantiate_zeros(ct), **params)


def _matmul_t_transpose_g(ct, data, g, **params):
    return dia_matmul(data, ad.instantiate_zeros(ct), **params)


def _sddmm_transpose_g(ct, g, x, **params):
    return dia_matmul(ad.instantiate_zeros(ct), x, **params)


def _sddmm_transpose_x(ct, g, x, **params):
    return dia_transposed_matmul(ad.instantiate_zeros(ct), g, **params)


ad.defbilinear(dia_matmul_p, _matmul_transpose_data, _matmul_transpose_x)
ad.defbilinear(dia_matmul_t_p, _matmul_t_transpose_data, _matmul_t_transpose_g)
ad.defbilinear(dia_sddmm_p, _sddmm_transpose_g, _sddmm_transpose_x)


def _product_batch(primitive, args, dims, **params):
    """A product batched only in its dense operand is one wider product; otherwise map."""
    data_dim, _ = dims
    if data_dim is None:
        return batch_by_folding_columns(primitive, args, dims, operand=1, params=params)
    return batch_by_mapping(primitive, args, dims, params=params)


def _sddmm_batch(args, dims, **params):
    return batch_by_mapping(dia_sddmm_p, args, dims, params=params)


batching.primitive_batchers[dia_matmul_p] = functools.partial(_product_batch, dia_matmul_p)
batching.primitive_batchers[dia_matmul_t_p] = functools.partial(_product_batch, dia_matmul_t_p)
batching.primitive_batchers[dia_sddmm_p] = _sddmm_batch
