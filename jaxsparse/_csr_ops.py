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
"""

from ._primitive import product_family
from .kernels import mosaic_tpu_csr, triton_csr
from .kernels.cpu_csr import csr_matmul_cpu, csr_sddmm_cpu
from .kernels.mosaic_tpu_csr import (
    csr_matmul_mosaic_tpu,
    csr_matmul_t_mosaic_tpu,
    csr_sddmm_mosaic_tpu,
)
from .kernels.triton_csr import csr_matmul_t_triton, csr_matmul_triton, csr_sddmm_triton
from .kernels.xla_csr import csr_matmul_t_xla, csr_matmul_xla, csr_sddmm_xla


def _values_shape(indices, indptr, *, shape):
    return indices.shape


# The table: member -> implementation family -> function (see `_backend.py` for which
# family runs where). A new family is one key per member.
IMPLEMENTATIONS = {
    "matmul": {
        "xla": csr_matmul_xla,
        "cpu": csr_matmul_cpu,
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
        "cpu": csr_sddmm_cpu,
        "triton": csr_sddmm_triton,
        "mosaic_tpu": csr_sddmm_mosaic_tpu,
    },
}
CSR_PRODUCTS = product_family(
    "csr",
    values_shape=_values_shape,
    implementations=IMPLEMENTATIONS,
    supports={"triton": triton_csr.supports, "mosaic_tpu": mosaic_tpu_csr.supports},
)
csr_matmul_p = CSR_PRODUCTS.matmul
csr_matmul_t_p = CSR_PRODUCTS.matmul_t
csr_sddmm_p = CSR_PRODUCTS.sddmm
