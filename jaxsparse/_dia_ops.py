"""The DIA product family, declared as data: what each product computes, and which
implementation families compute it.

- `dia_matmul_p(data, x)   = A @ x`, `x` of shape `(n, k)`;
- `dia_matmul_t_p(data, g) = A^T @ g`, `g` of shape `(m, k)`;
- `dia_sddmm_p(g, x)`: `out[d, j] = sum_c g[j - offsets[d], c] * x[j, c]` on the slots
  inside the matrix, else 0: the gradient of `A @ x` in `data`.

Parameters: the static `offsets` and `shape`, and `backend`. Autodiff, batching and the
choice of implementation come from `_primitive.product_family`.

The `cpu` family (`kernels/cpu_dia.py`) unrolls every diagonal and takes one matrix; its
table entries run it up to `MAX_UNROLLED_DIAGONALS` diagonals (under `jax.vmap` for a
batch), and the XLA family's loop over the diagonals beyond.
"""

from ._dia_layout import unrolls_diagonals
from ._primitive import product_family
from .kernels import pallas_dia
from .kernels._batch import over_batch
from .kernels._xla_cpu import outside_ynn_fusions
from .kernels.cpu_dia import dia_matmul_cpu, dia_matmul_t_cpu, dia_sddmm_cpu
from .kernels.pallas_dia import dia_matmul_pallas, dia_matmul_t_pallas, dia_sddmm_pallas
from .kernels.xla_dia import dia_matmul_t_xla, dia_matmul_xla, dia_sddmm_xla


def _values_shape(*, offsets, shape):
    return (len(offsets), shape[1])


def _cpu(unrolled, looped):
    """The `cpu` family's entry: `unrolled` (one matrix, diagonals unrolled, XLA CPU tuned),
    by `jax.vmap` for a batch, up to `MAX_UNROLLED_DIAGONALS` diagonals; `looped` beyond."""

    def implementation(first, second, *, offsets, shape):
        if unrolls_diagonals(offsets, shape):
            return over_batch(unrolled, (first, second), (2, 2), offsets=offsets, shape=shape)
        return outside_ynn_fusions(looped(first, second, offsets=offsets, shape=shape))

    return implementation


# The table: member -> implementation family -> function (see `_backend.py` for which
# family runs where). A new family is one key per member.
IMPLEMENTATIONS = {
    "matmul": {
        "xla": dia_matmul_xla,
        "cpu": _cpu(dia_matmul_cpu, dia_matmul_xla),
        "pallas": dia_matmul_pallas,
    },
    "matmul_t": {
        "xla": dia_matmul_t_xla,
        "cpu": _cpu(dia_matmul_t_cpu, dia_matmul_t_xla),
        "pallas": dia_matmul_t_pallas,
    },
    "sddmm": {
        "xla": dia_sddmm_xla,
        "cpu": _cpu(dia_sddmm_cpu, dia_sddmm_xla),
        "pallas": dia_sddmm_pallas,
    },
}
DIA_PRODUCTS = product_family(
    "dia",
    values_shape=_values_shape,
    implementations=IMPLEMENTATIONS,
    supports={"pallas": pallas_dia.supports},
)
dia_matmul_p = DIA_PRODUCTS.matmul
dia_matmul_t_p = DIA_PRODUCTS.matmul_t
dia_sddmm_p = DIA_PRODUCTS.sddmm
