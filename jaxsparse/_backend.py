"""Which implementation of a sparse product runs where: the one table.

A product is traced with a requested backend and lowered for a platform; the choice is
made at lowering time, from (requested backend, platform, dtype), so one traced program
lowered for a GPU runs the Pallas kernels and the same program lowered for the CPU runs
XLA. Each product declares a table of implementation families (`_dia_ops.py`,
`_csr_ops.py`); this module walks the families `PREFERENCES` lists for the request and the
platform and takes the first that the product has and that takes the dtype there:

| requested       | cpu                | cuda, rocm                | tpu                           |
|-----------------|--------------------|---------------------------|-------------------------------|
| `"auto"`/`None` | `native`, `xla`    | `triton`, `xla`           | `pallas`, `mosaic_tpu`, `xla` |
| `"pallas"`      | error: no compiler | `triton`                  | `pallas`, `mosaic_tpu`        |
| `"interpret"`   | `triton`, `pallas` in interpret mode, on any platform                     |
| `"xla"`         | `xla`: pure StableHLO, no custom call, on any platform                    |

(the first of the listed families that the product has and that takes the dtype; when
none does, `"auto"` always has `xla`, and the explicit requests raise.)

**Lowering for export.** When `jax.export` lowers a program (the lowering rule sees
`for_export` in JAX's lowering parameters), `"auto"` keeps only the families that
`EXPORTABLE` lists for the platform: those whose lowering holds no custom call, or only
custom calls that `jax.export` guarantees to keep loading (its default checks accept them):

| platform   | `"auto"` exports              |
|------------|-------------------------------|
| cpu        | `xla`                         |
| cuda, rocm | `xla`                         |
| tpu        | `pallas`, `mosaic_tpu`, `xla` |

Every CPU family but `xla` calls a native kernel with no guarantee (jaxsparse's own FFI
kernels). On GPUs the Pallas kernels lower to
Triton, whose `__gpu$xla.gpu.triton` has no guarantee (Mosaic GPU's `mosaic_gpu_v2` has
one: a Mosaic GPU family joins `EXPORTABLE["cuda"]`). Mosaic TPU's `tpu_custom_call` has
one.

A Pallas kernel picks its grid and block sizes from static shapes, so a product with a
symbolic dimension (`jax.export`'s shape polymorphism: a symbolic column count or batch)
never runs one: `"auto"` skips the kernel families, and `"pallas"` or `"interpret"` raise a
`ValueError`.

An explicit backend is exported as it is: `"xla"` anywhere; `"pallas"` on TPU; `"pallas"`
on a GPU only with `disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(
"__gpu$xla.gpu.triton")]`, and lowering it for export warns so (`jax.export` itself
raises without them).

The families: `xla` (pure `jax.numpy`, `kernels/xla_*.py`), `native` (jaxsparse's C++
kernels registered as XLA FFI targets for the CPU: `kernels/native_*.py`; missing when the
extension was not built, and half precision), `pallas` (DIA window kernels,
written for Triton and Mosaic TPU, run on TPU: `kernels/pallas_dia.py`), `triton` and
`mosaic_tpu` (per-platform Pallas kernels: `kernels/triton_dia.py`, `kernels/triton_csr.py`,
`kernels/mosaic_tpu_csr.py`). GPUs run `triton` for DIA, not `pallas`: on an H100 the
window kernels gave wrong results wherever an output block overhangs the array (`k` not
a multiple of the column block, fewer rows than a block, batches), and `triton_dia`'s
masked loads also skip the window kernels' padded copies. A new family is a
key in the products' tables, a line in `PREFERENCES`, if it is a Pallas kernel family (it
takes `interpret` and `platform`) a name in `KERNEL_FAMILIES`, and, where its custom calls
carry `jax.export`'s guarantee, a name in `EXPORTABLE`.

Only `"auto"` falls back. An explicit `"pallas"` or `"interpret"` for a dtype its kernels
cannot take (complex values, float64 on TPU, ...) is a `TypeError` naming the dtype, the
platform and what to use instead, never a silent run of something else; `"pallas"` on a
CPU is a `ValueError` (Pallas has no CPU compiler). The environment variable
`JAXSPARSE_BACKEND` replaces `"auto"` (and `None`) for a whole run.
"""

import os
import warnings
from collections.abc import Callable, Mapping

import numpy as np

BACKENDS = ("auto", "pallas", "interpret", "xla")
BACKEND_ENV_VAR = "JAXSPARSE_BACKEND"
PLATFORMS = ("cpu", "cuda", "rocm", "tpu")
KERNEL_FAMILIES = ("pallas", "triton", "mosaic_tpu")

# (requested backend, platform) -> implementation families to try, in order.
PREFERENCES: dict[tuple[str, str], tuple[str, ...]] = {
    ("auto", "cpu"): ("native", "xla"),
    ("auto", "cuda"): ("triton", "xla"),
    ("auto", "rocm"): ("triton", "xla"),
    ("auto", "tpu"): ("pallas", "mosaic_tpu", "xla"),
    ("pallas", "cpu"): (),
    ("pallas", "cuda"): ("triton",),
    ("pallas", "rocm"): ("triton",),
    ("pallas", "tpu"): ("pallas", "mosaic_tpu"),
    **{("interpret", platform): ("triton", "pallas") for platform in PLATFORMS},
    **{("xla", platform): ("xla",) for platform in PLATFORMS},
}

# Platform -> the families `"auto"` may lower for export there (see the module docstring):
# a family is listed only once its custom calls, if any, carry `jax.export`'s guarantee.
EXPORTABLE: dict[str, tuple[str, ...]] = {
    "cpu": ("xla",),
    "cuda": ("xla",),
    "rocm": ("xla",),
    "tpu": ("pallas", "mosaic_tpu", "xla"),
}
# The custom call that Pallas GPU kernels lower to today (Triton), for the export warning.
TRITON_CUSTOM_CALL = "__gpu$xla.gpu.triton"

# Interpret mode runs on the host whatever the target: kernels pick tiles for "cpu".
_INTERPRET_PLATFORM = "cpu"


def resolve_backend(backend: str | None) -> str:
    """Validate a requested backend; `None` and `"auto"` yield to `JAXSPARSE_BACKEND`."""
    if backend is None:
        backend = "auto"
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"`backend` must be None or one of {BACKENDS}, got {backend!r}.")
    if backend == "auto":
        from_env = os.environ.get(BACKEND_ENV_VAR, "auto")
        if from_env not in BACKENDS:
            raise ValueError(
                f"Environment variable {BACKEND_ENV_VAR} must be one of {BACKENDS}, "
                f"got {from_env!r}."
            )
        return from_env
    return backend


def choose_implementation(
    op_name: str,
    implementations: Mapping[str, Callable],
    supports: Mapping[str, Callable],
    *,
    backend: str,
    platform: str,
    dtype,
    for_export: bool = False,
    symbolic_shapes: bool = False,
) -> Callable:
    """The implementation of one product to lower, with its kernel options bound.

    **Arguments:**

    - `op_name`: the product's name, for error messages.
    - `implementations`: family -> function, the product's table.
    - `supports`: family -> `(dtype, platform) -> bool`; a family missing here takes every
      dtype. Kernel families are asked with platform `"cpu"` in interpret mode.
    - `backend`: a resolved backend (see `resolve_backend`).
    - `platform`: the platform being lowered for.
    - `dtype`: the dtype of the product's floating operands.
    - `for_export`: whether the program is being lowered for `jax.export`; then `"auto"`
      takes only the families `EXPORTABLE` lists for `platform`.
    - `symbolic_shapes`: whether an operand has a symbolic dimension; then no kernel family
      is taken.

    **Returns:** a function of the product's arrays and static parameters. Kernel families
    come with `interpret` and `platform` bound.
    """
    interpret = backend == "interpret"
    kernel_platform = _INTERPRET_PLATFORM if interpret else platform
    preferences = PREFERENCES[backend, platform]
    if for_export and backend == "auto":
        preferences = tuple(f for f in preferences if f in EXPORTABLE[platform])
    for family in preferences:
        if family not in implementations:
            continue
        if not supports.get(family, _takes_every_dtype)(dtype, kernel_platform):
            continue
        if symbolic_shapes and family in KERNEL_FAMILIES:
            continue
        function = implementations[family]
        if for_export and backend == "pallas" and family not in EXPORTABLE[platform]:
            warnings.warn(_unguaranteed_export_message(op_name, platform), stacklevel=2)
        if family in KERNEL_FAMILIES:
            return _with_kernel_options(function, interpret, kernel_platform)
        return function
    raise _no_implementation_error(op_name, backend, platform, dtype, symbolic_shapes)


def _takes_every_dtype(dtype, platform) -> bool:
    return True


def _with_kernel_options(function, interpret: bool, platform: str):
    def kernel(*args, **params):
        return function(*args, interpret=interpret, platform=platform, **params)

    return kernel


def _no_implementation_error(
    op_name: str, backend: str, platform: str, dtype, symbolic_shapes: bool
) -> Exception:
    if backend == "pallas" and platform == "cpu":
        return ValueError(
            f"{op_name}: backend='pallas' compiles Pallas kernels, and Pallas has no CPU "
            "compiler. On a CPU use backend='interpret' to run the Pallas kernels in "
            "interpret mode, or 'auto' / 'xla'."
        )
    if symbolic_shapes:
        return ValueError(
            f"{op_name}: backend={backend!r} runs Pallas kernels, which need static shapes "
            "(they pick their grid and block sizes from them), and this product has a "
            "symbolic dimension (shape polymorphism). Use backend='auto' or 'xla', which "
            "lower symbolic shapes to pure StableHLO."
        )
    where = "in interpret mode" if backend == "interpret" else f"on platform {platform!r}"
    return TypeError(
        f"{op_name}: backend={backend!r} has no Pallas kernel for dtype "
        f"{np.dtype(dtype).name} {where}; an explicit backend never runs another "
        "implementation. Use backend='auto' (which falls back to XLA for this dtype) or "
        "backend='xla'."
    )


def _unguaranteed_export_message(op_name: str, platform: str) -> str:
    return (
        f"{op_name}: backend='pallas' lowers to a Triton kernel for platform {platform!r}, "
        f"and its custom call {TRITON_CUSTOM_CALL!r} has no compatibility guarantee: "
        "jax.export accepts it only with disabled_checks=[jax.export.DisabledSafetyCheck."
        f"custom_call({TRITON_CUSTOM_CALL!r})], and the artifact may not load under another "
        "JAX version. backend='auto' exports pure StableHLO on GPUs."
    )
