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

from ._families import implementations
from ._primitive import product_family


def _values_shape(*, offsets, shape):
    return (len(offsets), shape[1])


# The families' functions for DIA (`_families.FAMILIES`: which family runs where).
IMPLEMENTATIONS, SUPPORTS, FUSED_PULLBACKS = implementations("dia", values_rank=2)
DIA_PRODUCTS = product_family(
    "dia",
    values_shape=_values_shape,
    implementations=IMPLEMENTATIONS,
    supports=SUPPORTS,
    fused_pullbacks=FUSED_PULLBACKS,
)
dia_matmul_p = DIA_PRODUCTS.matmul
dia_matmul_t_p = DIA_PRODUCTS.matmul_t
dia_sddmm_p = DIA_PRODUCTS.sddmm
