"""The precision every kernel family shares: half precision accumulates in float32."""

import jax.numpy as jnp
import numpy as np


def accumulation_dtype(dtype) -> np.dtype:
    """The dtype products are summed in: float32 for half precision, else `dtype` itself."""
    dtype = np.dtype(dtype)
    if dtype in (jnp.bfloat16, jnp.float16):
        return np.dtype(jnp.float32)
    return dtype
