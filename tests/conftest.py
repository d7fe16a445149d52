"""Test-wide JAX settings: 64-bit types available, strict dtype promotion, float32 dense
oracles in full precision; and the `on_cpu` marker.

Strict promotion makes an accidental float32/float64 mix an error instead of a silent
upcast, so every test checks that the library keeps dtypes exactly as it documents.
Dense `jnp` oracles would otherwise run float32 matrix products in TF32 on GPUs.

On a machine with an accelerator (`make gpu-check`), JAX's default device is the
accelerator; tests of CPU behaviour (the native kernels, what `"auto"` runs on a CPU, CPU
exports) carry `@pytest.mark.on_cpu`, and `make gpu-check` runs them in a second pass with
`JAX_PLATFORMS=cpu`.
"""

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_default_matmul_precision", "highest")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "on_cpu: a test of CPU behaviour (run with JAX_PLATFORMS=cpu on GPU machines)"
    )
    config.addinivalue_line(
        "markers",
        "slow: an exhaustive sweep over a code path that faster tests already cover",
    )
