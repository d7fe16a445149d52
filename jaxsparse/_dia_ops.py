"""The DIA product family, declared as data: what each product computes, and which
implementation families compute it.

- `dia_matmul_p(data, x)   = A @ x`, `x` of shape `(n, k)`;
- `dia_matmul_t_p(data, g) = A^T @ g`, `g` of shape `(m, k)`;
- `dia_sddmm_p(g, x)`: `out[d, j] = sum_c g[j - offsets[d], c] * x[j, c]` on the slots
  inside the matrix, else 0: the gradient of `A @ x` in `data`.

Parameters: the static `offsets` and `shape`, and `backend`. Autodiff, batching and the
choice of implementation come from `_primitive.product_family`.

The `native` family (`kernels/native_dia.py`) takes any number of diagonals (the offsets
are an attribute of one kernel call) and a whole batch in one call. The gradient step in
`data` and `x` together (the `pullback` primitive) runs the sampled and the transposed
kernels one after the other: one pass doing both keeps twice the memory streams in
flight (the diagonals read and their gradient written), more than the hardware
prefetchers follow, and measured slower (`benchmarks/results/native-kernels.md`).
"""

from ._backend import KERNEL_FAMILIES
from ._primitive import product_family
from .kernels import mosaic_gpu_dia, native_dia, pallas_dia, triton_dia
from .kernels._complex_planes import with_complex_planes
from .kernels.mosaic_gpu_dia import (
    dia_matmul_mosaic_gpu,
    dia_matmul_t_mosaic_gpu,
    dia_sddmm_mosaic_gpu,
)
from .kernels.native_dia import dia_matmul_native, dia_matmul_t_native, dia_sddmm_native
from .kernels.pallas_dia import dia_matmul_pallas, dia_matmul_t_pallas, dia_sddmm_pallas
from .kernels.triton_dia import dia_matmul_t_triton, dia_matmul_triton, dia_sddmm_triton
from .kernels.xla_dia import dia_matmul_t_xla, dia_matmul_xla, dia_sddmm_xla


def _values_shape(*, offsets, shape):
    return (len(offsets), shape[1])


# The table: member -> implementation family -> function (see `_backend.py` for which
# family runs where). A new family is one key per member. Kernel families take complex
# values on real planes (`kernels/_complex_planes.py`).
IMPLEMENTATIONS, SUPPORTS = with_complex_planes(
    {
        "matmul": {
            "xla": dia_matmul_xla,
            "native": dia_matmul_native,
            "pallas": dia_matmul_pallas,
            "triton": dia_matmul_triton,
            "mosaic_gpu": dia_matmul_mosaic_gpu,
        },
        "matmul_t": {
            "xla": dia_matmul_t_xla,
            "native": dia_matmul_t_native,
            "pallas": dia_matmul_t_pallas,
            "triton": dia_matmul_t_triton,
            "mosaic_gpu": dia_matmul_t_mosaic_gpu,
        },
        "sddmm": {
            "xla": dia_sddmm_xla,
            "native": dia_sddmm_native,
            "pallas": dia_sddmm_pallas,
            "triton": dia_sddmm_triton,
            "mosaic_gpu": dia_sddmm_mosaic_gpu,
        },
    },
    {
        "native": native_dia.supports,
        "pallas": pallas_dia.supports,
        "triton": triton_dia.supports,
        "mosaic_gpu": mosaic_gpu_dia.supports,
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
