"""The DIA product family, declared as data: what each product computes, and which
implementation families compute it.

- `dia_matmul_p(data, x)   = A @ x`, `x` of shape `(n, k)`;
- `dia_matmul_t_p(data, g) = A^T @ g`, `g` of shape `(m, k)`;
- `dia_sddmm_p(g, x)`: `out[d, j] = sum_c g[j - offsets[d], c] * x[j, c]` on the slots
  inside the matrix, else 0: the gradient of `A @ x` in `data`.

Parameters: the static `offsets` and `shape`, and `backend`. Autodiff, batching and the
choice of implementation come from `_primitive.product_family`.

The `native` family (`kernels/native_dia.py`) takes any number of diagonals (the offsets
are an attribute of one kernel call) but one matrix at a time; batched calls run the XLA
family's batch axis.
"""

from ._backend import KERNEL_FAMILIES
from ._primitive import product_family
from .kernels import native_dia, pallas_dia, triton_dia
from .kernels._complex_planes import with_complex_planes
from .kernels._xla_cpu import outside_ynn_fusions
from .kernels.native_dia import dia_matmul_native, dia_matmul_t_native, dia_sddmm_native
from .kernels.pallas_dia import dia_matmul_pallas, dia_matmul_t_pallas, dia_sddmm_pallas
from .kernels.triton_dia import dia_matmul_t_triton, dia_matmul_triton, dia_sddmm_triton
from .kernels.xla_dia import dia_matmul_t_xla, dia_matmul_xla, dia_sddmm_xla


def _values_shape(*, offsets, shape):
    return (len(offsets), shape[1])


def _unbatched_or_xla(unbatched, xla):
    """An implementation running `unbatched` for one matrix and `xla` for a batch (an
    argument with a leading batch axis), kept out of its consumer's YNNPACK fusion (64 DIA
    5-point products with a sum: 552 -> 44 ms, `kernels/_xla_cpu.py`)."""

    def implementation(first, second, *, offsets, shape):
        if first.ndim == 2 and second.ndim == 2:
            return unbatched(first, second, offsets=offsets, shape=shape)
        return outside_ynn_fusions(xla(first, second, offsets=offsets, shape=shape))

    return implementation


# The table: member -> implementation family -> function (see `_backend.py` for which
# family runs where). A new family is one key per member. Kernel families take complex
# values on real planes (`kernels/_complex_planes.py`).
IMPLEMENTATIONS, SUPPORTS = with_complex_planes(
    {
        "matmul": {
            "xla": dia_matmul_xla,
            "native": _unbatched_or_xla(dia_matmul_native, dia_matmul_xla),
            "pallas": dia_matmul_pallas,
            "triton": dia_matmul_triton,
        },
        "matmul_t": {
            "xla": dia_matmul_t_xla,
            "native": _unbatched_or_xla(dia_matmul_t_native, dia_matmul_t_xla),
            "pallas": dia_matmul_t_pallas,
            "triton": dia_matmul_t_triton,
        },
        "sddmm": {
            "xla": dia_sddmm_xla,
            "native": _unbatched_or_xla(dia_sddmm_native, dia_sddmm_xla),
            "pallas": dia_sddmm_pallas,
            "triton": dia_sddmm_triton,
        },
    },
    {
        "native": native_dia.supports,
        "pallas": pallas_dia.supports,
        "triton": triton_dia.supports,
    },
    families=KERNEL_FAMILIES,
    values_rank=2,
)
DIA_PRODUCTS = product_family(
    "dia",
    values_shape=_values_shape,
    implementations=IMPLEMENTATIONS,
    supports=SUPPORTS,
)
dia_matmul_p = DIA_PRODUCTS.matmul
dia_matmul_t_p = DIA_PRODUCTS.matmul_t
dia_sddmm_p = DIA_PRODUCTS.sddmm
