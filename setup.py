"""Builds jaxsparse's native CPU kernels: C++ XLA FFI handlers in one extension module.

Everything else is in pyproject.toml. The kernels compile against the XLA FFI headers
that jaxlib ships (`jaxlib/include`, a build requirement) with the system C++ compiler.
The extension is optional: without a compiler the package still installs, and CPU
products run on the XLA path with one warning (`jaxsparse/kernels/_native_library.py`).
"""

import importlib.util
import pathlib

from setuptools import Extension, setup

NATIVE = pathlib.Path("jaxsparse", "kernels", "native")
JAXLIB_INCLUDE = pathlib.Path(importlib.util.find_spec("jaxlib").origin).parent / "include"

setup(
    ext_modules=[
        Extension(
            "jaxsparse.kernels._native_ffi",
            sources=sorted(str(path) for path in NATIVE.glob("*.cc")),
            include_dirs=[str(JAXLIB_INCLUDE)],
            extra_compile_args=["-std=c++17", "-O3"],
            language="c++",
            optional=True,
        )
    ]
)
