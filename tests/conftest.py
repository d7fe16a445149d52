"""Test-wide JAX settings: 64-bit types available and strict dtype promotion.

Strict promotion makes an accidental float32/float64 mix an error instead of a silent
upcast, so every test checks that the library keeps dtypes exactly as it documents.
"""

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")
