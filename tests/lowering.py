"""Lowering for a platform this machine lacks (cuda, tpu) from a CPU: the one helper."""

import jax
import pytest

NEEDS_CROSS_LOWERING = pytest.mark.skipif(
    jax.__version_info__ < (0, 12),
    reason="lowering for a platform this machine lacks (AbstractDevice) needs JAX >= 0.12",
)
# The custom call each platform's Pallas kernels lower to.
KERNEL_CALLS = {"cuda": "__gpu$xla.gpu.triton", "tpu": "tpu_custom_call"}
# DIA products on cuda run the Mosaic GPU kernels first (`kernels/mosaic_gpu_dia.py`).
DIA_KERNEL_CALLS = {**KERNEL_CALLS, "cuda": "mosaic_gpu_v2"}
# Abstract devices to lower for: Pallas's lowering reads the device kind (TPU DMAs too).
_ABSTRACT_DEVICES = {"cuda": ("NVIDIA H100", 132), "tpu": ("TPU v5p", 1)}


def abstract_mesh(platform: str):
    """A context in which programs lower (and export) for `platform` (`"cuda"`, `"tpu"`)
    as if on one of its devices."""
    kind, cores = _ABSTRACT_DEVICES[platform]
    device = jax.sharding.AbstractDevice(device_kind=kind, num_cores=cores, platform=platform)
    mesh = jax.sharding.AbstractMesh((1,), ("x",), abstract_device=device)
    return jax.sharding.use_abstract_mesh(mesh)


def lower(fn, args, platform: str) -> str:
    """The StableHLO text of `jax.jit(fn)` lowered for `platform`, from this CPU machine.

    `args` are arrays or `jax.ShapeDtypeStruct`s; only their shapes and dtypes are used.
    """
    avals = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args]
    if platform == "cpu":
        return jax.jit(fn).trace(*avals).lower(lowering_platforms=("cpu",)).as_text()
    with abstract_mesh(platform):
        return jax.jit(fn).trace(*avals).lower(lowering_platforms=(platform,)).as_text()
