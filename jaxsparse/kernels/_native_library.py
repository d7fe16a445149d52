"""Loads the native CPU kernels (`kernels/native/*.cc`, built by `setup.py` into the
extension module `_native_ffi`) and registers them as XLA FFI targets for the CPU.

When the extension is missing (no C++ compiler at install time, or a build that failed),
`AVAILABLE` is False, one warning says why, and `"auto"` runs CPU products on the XLA
path instead.
"""

import warnings

import jax

try:
    from . import _native_ffi
except ImportError as error:  # the optional extension was not built
    AVAILABLE = False
    UNAVAILABLE_REASON = f"the extension module did not load ({error})"
    warnings.warn(
        f"jaxsparse: native CPU kernels unavailable, {UNAVAILABLE_REASON}; CPU products run "
        "on the slower XLA path. Reinstall with a C++17 compiler to build them.",
        RuntimeWarning,
        stacklevel=2,
    )
else:
    AVAILABLE = True
    UNAVAILABLE_REASON = None
    for _name, _capsule in _native_ffi.targets.items():
        jax.ffi.register_ffi_target(_name, _capsule, platform="cpu")
