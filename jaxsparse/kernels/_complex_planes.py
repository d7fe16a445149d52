"""Complex values on real kernels: a product family's members computed on real planes.

Triton, Mosaic GPU and Mosaic TPU have no complex type, so a Pallas family takes complex
values through this wrapper (`_families.implementations` applies it). Every member of a
product family is bilinear, and over the reals a complex bilinear product splits into real
products of the planes:
`P(a, b) = P(ar, br) - P(ai, bi) + i (P(ar, bi) + P(ai, br))`. The wrapper computes all
four in **one** kernel call, through the batch axis every implementation takes
(`_primitive.py`, "Batches"), so the structure is read once:

- `matmul`, `matmul_t` (`values`, `dense`): the values' planes become a batch of two
  matrices, `[ar, ai]`, and the dense operand's planes two column blocks of one shared
  operand, `[br | bi]`. Member 0 gives `[P(ar, br) | P(ar, bi)]`, member 1
  `[P(ai, br) | P(ai, bi)]`. Bytes: the values once, the dense operand twice.
- `sddmm` (`g`, `x`): a sum over columns, so the combinations go into the columns:
  member 0 is `([gr | -gi], [xr | xi])`, the real part, and member 1 `([gr | gi],
  [xi | xr])`, the imaginary part.

A call that is already a batch of `B` gets `2 B` members. Real values go straight to the
kernel. complex64 runs on the float32 kernels and complex128 on the float64 ones, where the
platform has them (not on TPU).
"""

import jax.numpy as jnp
from jax import lax


def real_dtype(dtype):
    """The dtype of a complex dtype's planes (float32 for complex64), or `dtype` itself."""
    dtype = jnp.dtype(dtype)
    return jnp.finfo(dtype).dtype if jnp.issubdtype(dtype, jnp.complexfloating) else dtype


def supports_on_planes(supports):
    """`supports(dtype, platform)` extended to complex dtypes whose planes it takes."""

    def supports_complex(dtype, platform) -> bool:
        return supports(real_dtype(dtype), platform)

    return supports_complex


def on_real_planes(function, member: str, *, values_rank: int):
    """`function`, an implementation of `member` (`"matmul"`, `"matmul_t"` or `"sddmm"`) for
    real values, extended to complex values by real planes in one call.

    **Arguments:**

    - `function`: takes `(first, second, *structure, **params)` with the batch contract.
    - `member`: which product it is.
    - `values_rank`: the rank of one matrix's stored values (DIA 2, CSR 1).

    **Returns:** an implementation with `function`'s signature.
    """
    if member == "sddmm":
        return _sddmm_on_planes(function)
    return _matmul_on_planes(function, values_rank)


def _is_complex(array) -> bool:
    return jnp.issubdtype(array.dtype, jnp.complexfloating)


def _matmul_on_planes(function, values_rank):
    def implementation(values, dense, *structure, **params):
        if not _is_complex(values):
            return function(values, dense, *structure, **params)
        batched = values.ndim > values_rank
        if not batched:
            values = values[None]
        size, k = values.shape[0], dense.shape[-1]
        planes = jnp.concatenate([jnp.real(values), jnp.imag(values)])
        columns = jnp.concatenate([jnp.real(dense), jnp.imag(dense)], axis=-1)
        if columns.ndim == 3:
            columns = jnp.concatenate([columns, columns])
        out = function(planes, columns, *structure, **params)
        from_real, from_imag = out[:size], out[size:]
        result = lax.complex(
            from_real[..., :k] - from_imag[..., k:], from_real[..., k:] + from_imag[..., :k]
        )
        return result if batched else result[0]

    return implementation


def _sddmm_on_planes(function):
    def implementation(g, x, *structure, **params):
        if not _is_complex(g):
            return function(g, x, *structure, **params)
        batched = g.ndim == 3 or x.ndim == 3
        size = (g if g.ndim == 3 else x).shape[0] if batched else 1
        g, x = (jnp.broadcast_to(a, (size, *a.shape[-2:])) for a in (g, x))
        gr, gi, xr, xi = jnp.real(g), jnp.imag(g), jnp.real(x), jnp.imag(x)
        sampled = jnp.concatenate(
            [jnp.concatenate([gr, -gi], axis=-1), jnp.concatenate([gr, gi], axis=-1)]
        )
        sampling = jnp.concatenate(
            [jnp.concatenate([xr, xi], axis=-1), jnp.concatenate([xi, xr], axis=-1)]
        )
        out = function(sampled, sampling, *structure, **params)
        result = lax.complex(out[:size], out[size:])
        return result if batched else result[0]

    return implementation
