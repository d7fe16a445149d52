"""Which implementation of a sparse product runs where, from the families' table.

A product is traced with a requested backend and lowered for a platform; the choice is
made at lowering time, from (requested backend, platform, dtype), so one traced program
lowered for a GPU runs the Pallas kernels and the same program lowered for the CPU runs
XLA. The families are records in `_families.FAMILIES`, in order of preference;
`PREFERENCES` derives from them which families each request tries on each platform (the
documentation's backends page renders it):

- `"auto"` (and `None`): the families that compile for the platform, `xla` last;
- `"pallas"`: the Pallas families that compile for the platform (none on a CPU: Pallas
  has no CPU compiler, a `ValueError`);
- `"interpret"`: the families that run in interpret mode, on any platform;
- `"xla"`: `xla` only: pure StableHLO, no custom call, on any platform.

The first family that the product has, that runs here and that takes the dtype runs.

**Lowering for export.** When `jax.export` lowers a program (the lowering rule sees
`for_export` in JAX's lowering parameters), `"auto"` keeps only the families whose
`exports` list the platform: those whose lowering holds no custom call, or only custom
calls that `jax.export` guarantees to keep loading (its default checks accept them). The
native CPU kernels and Pallas's Triton custom call `__gpu$xla.gpu.triton` have no such
guarantee; Mosaic GPU's `mosaic_gpu_v2` and Mosaic TPU's `tpu_custom_call` do.

A Pallas kernel picks its grid and block sizes from static shapes, so a product with a
symbolic dimension (`jax.export`'s shape polymorphism: a symbolic column count or batch)
never runs one: `"auto"` skips the Pallas families, and `"pallas"` or `"interpret"` raise
a `ValueError`.

An explicit backend is exported as it is: `"xla"` anywhere; `"pallas"` on TPU; `"pallas"`
on a GPU only with `disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(
"__gpu$xla.gpu.triton")]`, and lowering it for export warns so (`jax.export` itself
raises without them).

Only `"auto"` falls back. An explicit `"pallas"` or `"interpret"` for a dtype its kernels
cannot take (complex128 or float64 on TPU, ...) is a `TypeError` naming the dtype, the
platform and what to use instead, never a silent run of something else. The environment
variable `JAXSPARSE_BACKEND` replaces `"auto"` (and `None`) for a whole run.
"""

import os
import warnings
from collections.abc import Callable, Mapping

import numpy as np

from ._families import FAMILIES, PLATFORMS
from .kernels._pallas import INTERPRET_PLATFORM

BACKENDS = ("auto", "pallas", "interpret", "xla")
BACKEND_ENV_VAR = "JAXSPARSE_BACKEND"


def _preferences(backend: str, platform: str) -> tuple[str, ...]:
    families = FAMILIES.values()
    if backend == "auto":
        return tuple(f.name for f in families if platform in f.platforms)
    if backend == "pallas":
        return tuple(f.name for f in families if f.pallas and platform in f.platforms)
    if backend == "interpret":
        return tuple(f.name for f in families if f.interprets)
    return ("xla",)


# (requested backend, platform) -> implementation families to try, in order: derived from
# `FAMILIES`; `tools/gpu_compile.py` narrows it to one family at a time.
PREFERENCES: dict[tuple[str, str], tuple[str, ...]] = {
    (backend, platform): _preferences(backend, platform)
    for backend in BACKENDS
    for platform in PLATFORMS
}
# The custom call that Pallas GPU kernels lower to today (Triton), for the export warning.
TRITON_CUSTOM_CALL = "__gpu$xla.gpu.triton"


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
      takes only the families whose `exports` list `platform`.
    - `symbolic_shapes`: whether an operand has a symbolic dimension; then no kernel family
      is taken.

    **Returns:** a function of the product's arrays and static parameters. Pallas families
    come with `interpret` and `platform` bound.
    """
    interpret = backend == "interpret"
    kernel_platform = INTERPRET_PLATFORM if interpret else platform
    for name in PREFERENCES[backend, platform]:
        family = FAMILIES.get(name)  # None: a stand-in a test put in PREFERENCES, plain
        pallas = family is not None and family.pallas
        exports = family is not None and platform in family.exports
        if for_export and backend == "auto" and not exports:
            continue
        if name not in implementations or (family is not None and not family.runs_here()):
            continue
        if not supports.get(name, _takes_every_dtype)(dtype, kernel_platform):
            continue
        if symbolic_shapes and pallas:
            continue
        function = implementations[name]
        if for_export and backend == "pallas" and not exports:
            warnings.warn(_unguaranteed_export_message(op_name, platform), stacklevel=2)
        if pallas:
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
