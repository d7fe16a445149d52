"""Test-wide JAX settings: 64-bit types available, strict dtype promotion, float32 dense
oracles in full precision; and the `on_cpu` marker.

Strict promotion makes an accidental float32/float64 mix an error instead of a silent
upcast, so every test checks that the library keeps dtypes exactly as it documents.
Dense `jnp` oracles would otherwise run float32 matrix products in TF32 on GPUs.

On a machine with an accelerator (the GPU check, `make gpu-check`), JAX's default device
is the accelerator; tests of CPU behaviour (the native kernels, what `"auto"` runs on a
CPU, CPU exports) carry `@pytest.mark.on_cpu` and run with the CPU as default device.
"""

import jax
import pytest

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_default_matmul_precision", "highest")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "on_cpu: run with the CPU as JAX's default device (tests of CPU behaviour)"
    )


@pytest.fixture(autouse=True)
def _cpu_default_device_for_cpu_tests(request):
    if request.node.get_closest_marker("on_cpu") is None:
        yield
        return
    with jax.default_device(jax.devices("cpu")[0]):
        yield
