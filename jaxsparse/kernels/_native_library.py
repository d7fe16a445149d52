"""Loads the native CPU kernels (`kernels/native/*.cc`, built by `setup.py`) and registers
them as XLA FFI targets for the CPU.

`setup.py` builds the kernels as the extension module `_native_ffi`, for any CPU of the
architecture, and on x86-64 also as `_native_ffi_avx2`, with AVX2 and FMA. Where the CPU
has both (`_native_ffi.cpu_has_avx2_fma()`), the AVX2 build's kernels are registered;
`INSTRUCTION_SET` says which build runs. The environment variable
`JAXSPARSE_NATIVE_BUILD=baseline` keeps the baseline build.

When the extension is missing (no C++ compiler at install time, or a build that failed),
`AVAILABLE` is False, one warning says why, and `"auto"` runs CPU products on the XLA
path instead.
"""

import os
import warnings

import jax

BUILD_ENV_VAR = "JAXSPARSE_NATIVE_BUILD"

try:
    from . import _native_ffi
except ImportError as error:  # the optional extension was not built
    AVAILABLE = False
    UNAVAILABLE_REASON = f"the extension module did not load ({error})"
    INSTRUCTION_SET = None
    warnings.warn(
        f"jaxsparse: native CPU kernels unavailable, {UNAVAILABLE_REASON}; CPU products run "
        "on the slower XLA path. Reinstall with a C++17 compiler to build them.",
        RuntimeWarning,
        stacklevel=2,
    )
else:
    AVAILABLE = True
    UNAVAILABLE_REASON = None
    _module, INSTRUCTION_SET = _native_ffi, "baseline"
    if os.environ.get(BUILD_ENV_VAR) != "baseline" and _native_ffi.cpu_has_avx2_fma():
        try:
            from . import _native_ffi_avx2 as _module
        except ImportError:  # not built (another architecture, or a failed build)
            pass
        else:
            INSTRUCTION_SET = "avx2+fma"
    for _name, _capsule in _module.targets.items():
        jax.ffi.register_ffi_target(_name, _capsule, platform="cpu")
