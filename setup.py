"""Builds jaxsparse's native CPU kernels: C++ XLA FFI handlers in an extension module, twice
on x86-64 (for any CPU, and for CPUs with AVX2 and FMA).

Everything else is in pyproject.toml. The kernels compile against the XLA FFI headers
that jaxlib ships (`jaxlib/include`, a build requirement) with the system C++ compiler.
The extensions are optional: without a compiler (or with `JAXSPARSE_BUILD_NATIVE=0`) the
package still installs, and CPU products run on the XLA path with one warning
(`jaxsparse/kernels/_native_library.py`). `JAXSPARSE_BUILD_NATIVE=1` requires them: a
failed compilation fails the install (the Makefile's builds), instead of leaving an older
build in place. `JAXSPARSE_NATIVE_VARIANTS=host` builds only the kernels this CPU loads
(the Makefile's development installs): half the compile time, for an install that runs
on CPUs like this one.
"""

import concurrent.futures
import copy
import importlib.machinery
import importlib.util
import os
import pathlib
import platform

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

NATIVE = pathlib.Path("jaxsparse", "kernels", "native")
JAXLIB_INCLUDE = pathlib.Path(importlib.util.find_spec("jaxlib").origin).parent / "include"


# The module that tells the loader which kernel build this CPU runs, built for any CPU.
CPU_FEATURES = NATIVE / "cpu_features.cc"
OPTIONAL = os.environ.get("JAXSPARSE_BUILD_NATIVE") != "1"


def native_extension(module: str, flags: list[str]) -> Extension:
    """The kernels as the extension module `jaxsparse.kernels.<module>`, compiled with
    `flags`; optional unless `JAXSPARSE_BUILD_NATIVE=1`, so by default a failed build
    leaves the package installable."""
    return Extension(
        f"jaxsparse.kernels.{module}",
        sources=sorted(str(path) for path in NATIVE.glob("*.cc") if path != CPU_FEATURES),
        depends=sorted(str(path) for path in NATIVE.glob("*.h")),  # rebuilt when one changes
        include_dirs=[str(JAXLIB_INCLUDE)],
        define_macros=[("JAXSPARSE_MODULE", module)],
        # -g0: no debug information, which costs a quarter of the compile time.
        extra_compile_args=["-std=c++17", "-O3", "-g0", *flags],
        language="c++",
        optional=OPTIONAL,
    )


def host_runs_avx2_fma() -> bool | None:
    """Whether this machine's CPU and kernel run AVX2 and FMA, from `/proc/cpuinfo`
    (Linux, which drops a flag its kernel does not support); None where unknown."""
    try:
        lines = pathlib.Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return None
    flags = next(
        (line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), None
    )
    return None if flags is None else {"avx2", "fma"} <= set(flags)


def kernel_builds() -> dict[str, list[str]]:
    """The kernel builds to compile: module name -> extra compiler flags.

    The baseline build runs on any CPU of the architecture. On x86-64 a second build uses
    AVX2 and FMA, which `kernels/_native_library.py` loads where the CPU has them (its
    speedups are in `benchmarks/results/native-kernels.md`). `JAXSPARSE_NATIVE_VARIANTS=host`
    keeps the one this CPU loads (both where that is unknown).
    """
    builds = {"_native_ffi": []}
    if platform.machine().lower() in ("x86_64", "amd64"):
        builds["_native_ffi_avx2"] = ["-mavx2", "-mfma"]
        host_only = os.environ.get("JAXSPARSE_NATIVE_VARIANTS", "all") == "host"
        if host_only and (runs_avx2 := host_runs_avx2_fma()) is not None:
            del builds["_native_ffi" if runs_avx2 else "_native_ffi_avx2"]
    return builds


def remove_in_place_builds_not_made(builds: dict[str, list[str]]) -> None:
    """Deletes an earlier in-place build (editable installs) of a module this build skips,
    for this Python: the loader would otherwise find kernels older than the sources."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    for module in ("_native_ffi", "_native_ffi_avx2"):
        if module not in builds:
            pathlib.Path("jaxsparse", "kernels", module + suffix).unlink(missing_ok=True)


# `JAXSPARSE_BUILD_NATIVE=0` builds nothing: for environments that only read the package
# (the documentation's) or only run products on accelerators.
extensions = []
if os.environ.get("JAXSPARSE_BUILD_NATIVE") != "0":
    builds = kernel_builds()
    remove_in_place_builds_not_made(builds)
    extensions = [native_extension(module, flags) for module, flags in builds.items()]
    extensions.append(
        Extension(
            "jaxsparse.kernels._native_cpu",
            sources=[str(CPU_FEATURES)],
            extra_compile_args=["-O2", "-g0"],
            language="c++",
            optional=OPTIONAL,
        )
    )


# Compilations running at once across both builds: one per core this process may use.
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
COMPILATIONS = concurrent.futures.ThreadPoolExecutor(CORES or 1)


def compiling_sources_at_once(compiler):
    """A copy of `compiler` whose `compile` runs each source file as its own compilation
    in COMPILATIONS: the sources are independent, and on a machine with many cores the
    build then takes about as long as its longest file."""
    apart = copy.copy(compiler)

    def compile_all(sources, *args, **kwargs):
        done = COMPILATIONS.map(lambda source: compiler.compile([source], *args, **kwargs), sources)
        return [obj for objects in done for obj in objects]

    apart.compile = compile_all
    return apart


class BuildExtensionsAtOnce(build_ext):
    """`build_ext` compiling every extension at once (the builds are independent), and
    every source of each at once (`compiling_sources_at_once`), each extension in a
    temporary directory of its own: both builds compile the same sources with different
    flags, so their object files must not share a path."""

    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:
            self.parallel = len(self.extensions)

    def build_extension(self, ext):
        # A copy per extension: the builds run in threads, and each needs its own
        # `build_temp`.
        apart = copy.copy(self)
        apart.build_temp = str(pathlib.Path(self.build_temp, ext.name))
        apart.compiler = compiling_sources_at_once(self.compiler)
        super(BuildExtensionsAtOnce, apart).build_extension(ext)


setup(ext_modules=extensions, cmdclass={"build_ext": BuildExtensionsAtOnce})
