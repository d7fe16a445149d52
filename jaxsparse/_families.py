"""The implementation families: one record each, the only home of their names.

A family is one way of computing the products (`_primitive.py`): its functions per format,
the dtypes they take, the platforms it compiles for, whether it is a Pallas kernel family,
where `jax.export` may keep it, and whether it runs on this machine. Everything else is
derived from `FAMILIES`: which family each request tries on each platform, in the table's
order (`_backend.PREFERENCES`), each format's table of implementations
(`implementations`), and the families listed on the documentation's backends page.

A new family is one `Family` here, placed where it is preferred; a new format is one
`Products` in each family that computes it.
"""

import dataclasses
import functools
from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp

from .kernels import (
    mosaic_gpu_dia,
    mosaic_tpu_csr,
    mosaic_tpu_dia,
    native_csr,
    native_dia,
    triton_csr,
    triton_dia,
    xla_csr,
    xla_dia,
)
from .kernels._complex_planes import on_real_planes, supports_on_planes

PLATFORMS = ("cpu", "cuda", "rocm", "tpu")
MEMBERS = ("matmul", "matmul_t", "sddmm")


def _always() -> bool:
    return True


@functools.cache
def _no_local_gpu_older_than_hopper() -> bool:
    """Whether Mosaic GPU kernels can run where this process lowers for CUDA: no local
    CUDA GPU below compute capability 9.0. With no local CUDA GPU at all (lowering for an
    abstract H100, or compiling deviceless for sm_90a), Mosaic GPU is taken."""
    try:
        devices = jax.devices("cuda")
    except RuntimeError:
        return True
    return all(float(getattr(device, "compute_capability", "9.0")) >= 9.0 for device in devices)


@dataclasses.dataclass(frozen=True)
class Products:
    """One format's products in one family.

    - `matmul`, `matmul_t`, `sddmm`: the members (`_primitive.py`), each taking the
      primitive's arrays and static parameters (a Pallas family's also `interpret` and
      `platform`).
    - `supports`: `(dtype, platform) -> bool`, the dtypes the functions take there (for a
      Pallas family, `"cpu"` is interpret mode); `None`: every dtype.
    - `matmul_pullback`: both transposes of `matmul` in one pass (`_primitive.py`,
      "Gradient steps in one pass"), or `None`.
    """

    matmul: Callable
    matmul_t: Callable
    sddmm: Callable
    supports: Callable | None = None
    matmul_pullback: Callable | None = None


@dataclasses.dataclass(frozen=True)
class Family:
    """One implementation family.

    - `name`: how tables, errors and the documentation name it.
    - `summary`, `files`: what it is and where its kernels are, for the documentation.
    - `platforms`: the platforms it compiles for; `"auto"` tries it there.
    - `formats`: format name (`"dia"`, `"csr"`) -> its `Products`.
    - `pallas`: Pallas kernels: its functions take `interpret` and `platform`, take complex
      values on real planes (`kernels/_complex_planes.py`), need static shapes, and
      `"pallas"` tries it on its platforms.
    - `interprets`: `"interpret"` runs it in interpret mode on any platform.
    - `exports`: the platforms where `"auto"` keeps it when lowering for `jax.export`: its
      custom calls, if any, carry `jax.export`'s compatibility guarantee there.
    - `runs_here`: whether this machine can run it where its platform says it can.
    """

    name: str
    summary: str
    files: str
    platforms: tuple[str, ...]
    formats: Mapping[str, Products]
    pallas: bool = False
    interprets: bool = False
    exports: tuple[str, ...] = ()
    runs_here: Callable[[], bool] = _always


# In order of preference: a request takes the first family that has the product, runs
# here and takes the dtype (`_backend.py`).
FAMILIES: dict[str, Family] = {
    family.name: family
    for family in (
        Family(
            "native",
            "C++ XLA FFI kernels for the CPU; missing when the extension was not built, "
            "and for half precision",
            "`kernels/native_*.py`, `kernels/native/`",
            platforms=("cpu",),
            formats={
                "dia": Products(
                    native_dia.dia_matmul_native,
                    native_dia.dia_matmul_t_native,
                    native_dia.dia_sddmm_native,
                    native_dia.supports,
                ),
                "csr": Products(
                    native_csr.csr_matmul_native,
                    native_csr.csr_matmul_t_native,
                    native_csr.csr_sddmm_native,
                    native_csr.supports,
                    matmul_pullback=native_csr.csr_matmul_pullback_native,
                ),
            },
        ),
        Family(
            "mosaic_gpu",
            "Pallas Mosaic GPU kernels (`plgpu.kernel`), NVIDIA Hopper and newer",
            "`kernels/mosaic_gpu_dia.py`",
            platforms=("cuda",),
            formats={
                "dia": Products(
                    mosaic_gpu_dia.dia_matmul_mosaic_gpu,
                    mosaic_gpu_dia.dia_matmul_t_mosaic_gpu,
                    mosaic_gpu_dia.dia_sddmm_mosaic_gpu,
                    mosaic_gpu_dia.supports,
                ),
            },
            pallas=True,
            exports=("cuda",),
            runs_here=_no_local_gpu_older_than_hopper,
        ),
        Family(
            "triton",
            "Pallas Triton kernels, every NVIDIA GPU and ROCm",
            "`kernels/triton_dia.py`, `kernels/triton_csr.py`",
            platforms=("cuda", "rocm"),
            formats={
                "dia": Products(
                    triton_dia.dia_matmul_triton,
                    triton_dia.dia_matmul_t_triton,
                    triton_dia.dia_sddmm_triton,
                    triton_dia.supports,
                ),
                "csr": Products(
                    triton_csr.csr_matmul_triton,
                    triton_csr.csr_matmul_t_triton,
                    triton_csr.csr_sddmm_triton,
                    triton_csr.supports,
                    matmul_pullback=triton_csr.csr_matmul_pullback_triton,
                ),
            },
            pallas=True,
            interprets=True,
        ),
        Family(
            "mosaic_tpu",
            "Pallas Mosaic TPU kernels",
            "`kernels/mosaic_tpu_dia.py`, `kernels/mosaic_tpu_dia_loop.py`, "
            "`kernels/mosaic_tpu_csr.py`",
            platforms=("tpu",),
            formats={
                "dia": Products(
                    mosaic_tpu_dia.dia_matmul_mosaic_tpu,
                    mosaic_tpu_dia.dia_matmul_t_mosaic_tpu,
                    mosaic_tpu_dia.dia_sddmm_mosaic_tpu,
                    mosaic_tpu_dia.supports,
                ),
                "csr": Products(
                    mosaic_tpu_csr.csr_matmul_mosaic_tpu,
                    mosaic_tpu_csr.csr_matmul_t_mosaic_tpu,
                    mosaic_tpu_csr.csr_sddmm_mosaic_tpu,
                    mosaic_tpu_csr.supports,
                ),
            },
            pallas=True,
            interprets=True,
            exports=("tpu",),
        ),
        Family(
            "xla",
            "pure `jax.numpy`: the portable path and the oracle",
            "`kernels/xla_*.py`",
            platforms=PLATFORMS,
            formats={
                "dia": Products(
                    xla_dia.dia_matmul_xla, xla_dia.dia_matmul_t_xla, xla_dia.dia_sddmm_xla
                ),
                "csr": Products(
                    xla_csr.csr_matmul_xla, xla_csr.csr_matmul_t_xla, xla_csr.csr_sddmm_xla
                ),
            },
            exports=PLATFORMS,
        ),
    )
}


def implementations(format_name: str, *, values_rank: int):
    """One format's tables for `_primitive.product_family`, from `FAMILIES`.

    **Arguments:**

    - `format_name`: `"dia"` or `"csr"`.
    - `values_rank`: the rank of one matrix's stored values (DIA 2, CSR 1), for the
      complex planes of the Pallas families.

    **Returns:** `(implementations, supports, fused_pullbacks)`: member -> family ->
    function; family -> `(dtype, platform) -> bool` (families without a check are left
    out: they take every dtype); member -> family -> fused pullback. New dicts, in the
    order of `FAMILIES`.
    """
    families = [f for f in FAMILIES.values() if format_name in f.formats]
    table = {
        member: {
            f.name: _on_planes(f, getattr(f.formats[format_name], member), member, values_rank)
            for f in families
        }
        for member in MEMBERS
    }
    supports = {
        f.name: supports_on_planes(check) if f.pallas else check
        for f in families
        if (check := f.formats[format_name].supports) is not None
    }
    pullbacks = {
        f.name: _pullback_on_planes(f, pullback, table)
        for f in families
        if (pullback := f.formats[format_name].matmul_pullback) is not None
    }
    return table, supports, ({"matmul": pullbacks} if pullbacks else {})


def _pullback_on_planes(family: Family, pullback, table):
    """A Pallas family's fused pullback of `matmul` takes real values; complex ones take
    the family's two transposes, each on real planes (`table`'s members)."""
    if not family.pallas:
        return pullback
    sddmm, matmul_t = table["sddmm"][family.name], table["matmul_t"][family.name]

    def function(ct, values, x, *structure, **params):
        if any(jnp.iscomplexobj(a) for a in (ct, values, x)):
            return sddmm(ct, x, *structure, **params), matmul_t(values, ct, *structure, **params)
        return pullback(ct, values, x, *structure, **params)

    return function


def _on_planes(family: Family, function, member: str, values_rank: int):
    """A Pallas family's function takes complex values on real planes."""
    if family.pallas:
        return on_real_planes(function, member, values_rank=values_rank)
    return function
