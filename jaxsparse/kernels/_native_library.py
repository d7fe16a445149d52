"""Loads the native CPU kernels (`kernels/native/*.cc`, built by `setup.py`) and registers
them as XLA FFI targets for the CPU.

`setup.py` builds the kernels as the extension module `_native_ffi`, for any CPU of the
architecture, and on x86-64 also as `_native_ffi_avx2`, with AVX2 and FMA (a development
install, `JAXSPARSE_NATIVE_VARIANTS=host`, builds only the one its CPU loads). Where the CPU
has both (`_native_cpu.has_avx2_fma()`), the AVX2 build's kernels are registered;
`INSTRUCTION_SET` says which build runs. The environment variable
`JAXSPARSE_NATIVE_BUILD=baseline` keeps the baseline build.

When no build this CPU runs is installed (no C++ compiler at install time, a build that
failed, or a host build moved to a CPU without AVX2), `AVAILABLE` is False, one warning
says why, and `"auto"` runs CPU products on the XLA path instead.
"""

import importlib
import importlib.util
import os
import warnings

import jax

BUILD_ENV_VAR = "JAXSPARSE_NATIVE_BUILD"

# Kernel builds by the instruction set they need, in order of preference.
BUILDS = {"avx2+fma": "_native_ffi_avx2", "baseline": "_native_ffi"}
_REBUILD = "reinstall with a C++17 compiler to build it"


def choose_build(built: set[str], runs_avx2_fma: bool, wanted: str | None):
    """The kernel build to load: `(instruction_set, module)`, or `(None, reason)`.

    `built`: the instruction sets whose modules are installed; `runs_avx2_fma`: whether
    this CPU runs the AVX2 build; `wanted`: `JAXSPARSE_NATIVE_BUILD`'s value.
    """
    if wanted == "baseline":
        if "baseline" in built:
            return "baseline", BUILDS["baseline"]
        return None, (
            f"{BUILD_ENV_VAR}=baseline asks for the baseline build, which this install did "
            "not build (JAXSPARSE_NATIVE_VARIANTS=host builds only the one its CPU loads); "
            "reinstall without it"
        )
    runnable = ("avx2+fma", "baseline") if runs_avx2_fma else ("baseline",)
    for instruction_set in runnable:
        if instruction_set in built:
            return instruction_set, BUILDS[instruction_set]
    if built:
        return None, (
            "this install holds only the AVX2 and FMA build (JAXSPARSE_NATIVE_VARIANTS=host on "
            "another CPU), which this CPU cannot run; reinstall on this machine"
        )
    return None, f"the extension module was not built; {_REBUILD}"


def _installed_builds() -> set[str]:
    return {
        instruction_set
        for instruction_set, module in BUILDS.items()
        if importlib.util.find_spec(f"{__package__}.{module}") is not None
    }


def _load():
    """`(instruction_set, reason)` after registering the chosen build's targets."""
    try:
        from . import _native_cpu
    except ImportError as error:
        return None, f"the extension module did not load ({error}); {_REBUILD}"
    instruction_set, found = choose_build(
        _installed_builds(), _native_cpu.has_avx2_fma(), os.environ.get(BUILD_ENV_VAR)
    )
    if instruction_set is None:
        return None, found
    try:
        module = importlib.import_module(f".{found}", __package__)
    except ImportError as error:
        return None, f"the extension module did not load ({error}); {_REBUILD}"
    for name, capsule in module.targets.items():
        jax.ffi.register_ffi_target(name, capsule, platform="cpu")
    return instruction_set, None


INSTRUCTION_SET, UNAVAILABLE_REASON = _load()
AVAILABLE = INSTRUCTION_SET is not None
if not AVAILABLE:
    warnings.warn(
        f"jaxsparse: native CPU kernels unavailable: {UNAVAILABLE_REASON}. CPU products run "
        "on the slower XLA path.",
        RuntimeWarning,
        stacklevel=2,
    )
