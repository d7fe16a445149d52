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
"""

from ._primitive import product_family
from .kernels import mosaic_tpu_csr, native_csr, triton_csr
from .kernels.mosaic_tpu_csr import (
    csr_matmul_mosaic_tpu,
    csr_matmul_t_mosaic_tpu,
    csr_sddmm_mosaic_tpu,
)
from .kernels.native_csr import csr_matmul_native, csr_matmul_t_native, csr_sddmm_native
from .kernels.triton_csr import csr_matmul_t_triton, csr_matmul_triton, csr_sddmm_triton
from .kernels.xla_csr import csr_matmul_t_xla, csr_matmul_xla, csr_sddmm_xla


def _values_shape(indices, indptr, *, shape):
    return indices.shape


# The table: member -> implementation family -> function (see `_backend.py` for which
# family runs where). A new family is one key per member.
IMPLEMENTATIONS = {
    "matmul": {
        "xla": csr_matmul_xla,
        "native": csr_matmul_native,
        "triton": csr_matmul_triton,
        "mosaic_tpu": csr_matmul_mosaic_tpu,
    },
    "matmul_t": {
        "xla": csr_matmul_t_xla,
        "native": csr_matmul_t_native,
        "triton": csr_matmul_t_triton,
        "mosaic_tpu": csr_matmul_t_mosaic_tpu,
    },
    "sddmm": {
        "xla": csr_sddmm_xla,
        "native": csr_sddmm_native,
        "triton": csr_sddmm_triton,
        "mosaic_tpu": csr_sddmm_mosaic_tpu,
    },
}
CSR_PRODUCTS = product_family(
    "csr",
    values_shape=_values_shape,
    implementations=IMPLEMENTATIONS,
    supports={
        "native": native_csr.supports,
        "triton": triton_csr.supports,
        "mosaic_tpu": mosaic_tpu_csr.supports,
    },
)
csr_matmul_p = CSR_PRODUCTS.matmul
csr_matmul_t_p = CSR_PRODUCTS.matmul_t
csr_sddmm_p = CSR_PRODUCTS.sddmm
