"""Builds jaxsparse's native CPU kernels: C++ XLA FFI handlers in an extension module, twice
on x86-64 (for any CPU, and for CPUs with AVX2 and FMA).

Everything else is in pyproject.toml. The kernels compile against the XLA FFI headers
that jaxlib ships (`jaxlib/include`, a build requirement) with the system C++ compiler.
The extensions are optional: without a compiler the package still installs, and CPU
products run on the XLA path with one warning (`jaxsparse/kernels/_native_library.py`).
"""

import importlib.util
import os
import pathlib
import platform

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

NATIVE = pathlib.Path("jaxsparse", "kernels", "native")
JAXLIB_INCLUDE = pathlib.Path(importlib.util.find_spec("jaxlib").origin).parent / "include"


def native_extension(module: str, flags: list[str]) -> Extension:
    """The kernels as the extension module `jaxsparse.kernels.<module>`, compiled with
    `flags`; optional, so a failed build leaves the package installable."""
    return Extension(
        f"jaxsparse.kernels.{module}",
        sources=sorted(str(path) for path in NATIVE.glob("*.cc")),
        depends=sorted(str(path) for path in NATIVE.glob("*.h")),  # rebuilt when one changes
        include_dirs=[str(JAXLIB_INCLUDE)],
        define_macros=[("JAXSPARSE_MODULE", module)],
        extra_compile_args=["-std=c++17", "-O3", *flags],
        language="c++",
        optional=True,
    )


# The baseline build runs on any CPU of the architecture. On x86-64 a second build uses
# AVX2 and FMA, which `kernels/_native_library.py` loads where the CPU has them (the
# 27-point DIA product at k = 1, 10^6 rows: 2.6 vs 3.5 ms; CSR at k = 64: 8-18% faster).
extensions = [native_extension("_native_ffi", [])]
if platform.machine().lower() in ("x86_64", "amd64"):
    extensions.append(native_extension("_native_ffi_avx2", ["-mavx2", "-mfma"]))
# JAXSPARSE_BUILD_NATIVE=0 installs without the CPU kernels (CPU products then run on the
# XLA path): a quick install where only accelerators run products.
if os.environ.get("JAXSPARSE_BUILD_NATIVE") == "0":
    extensions = []


class BuildEachExtensionApart(build_ext):
    """`build_ext` with a temporary directory per extension: both builds compile the same
    sources with different flags, so their object files must not share a path."""

    def build_extension(self, ext):
        shared_temp = self.build_temp
        self.build_temp = str(pathlib.Path(shared_temp, ext.name))
        try:
            super().build_extension(ext)
        finally:
            self.build_temp = shared_temp


setup(ext_modules=extensions, cmdclass={"build_ext": BuildEachExtensionApart})
