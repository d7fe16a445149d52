"""The dtype iterative methods compute in: float32, float64, complex64 or complex128."""

import jax
import jax.numpy as jnp
import numpy as np


def working_dtype(dtype) -> np.dtype:
    """`dtype` itself when single or double precision; half precisions compute in float32
    (their rounding would stall a Krylov or Taylor iteration), integers in JAX's float."""
    dtype = np.dtype(dtype)
    if dtype in (np.float32, np.float64, np.complex64, np.complex128):
        return dtype
    if jnp.issubdtype(dtype, jnp.floating):
        return np.dtype(np.float32)
    return np.dtype(jax.dtypes.canonicalize_dtype(np.float64))
