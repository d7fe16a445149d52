"""Test-wide JAX settings: 64-bit types available, strict dtype promotion, float32 dense
oracles in full precision; and the `on_cpu` marker.

Strict promotion makes an accidental float32/float64 mix an error instead of a silent
upcast, so every test checks that the library keeps dtypes exactly as it documents.
Dense `jnp` oracles would otherwise run float32 matrix products in TF32 on GPUs.

On a machine with an accelerator (`make gpu-check`), JAX's default device is the
accelerator; tests of CPU behaviour (the native kernels, what `"auto"` runs on a CPU, CPU
exports) carry `@pytest.mark.on_cpu`, and `make gpu-check` runs them in a second pass with
`JAX_PLATFORMS=cpu`.

The workers of one run share a persistent compilation cache in a directory of the run's
own (removed when the run ends): a program one worker compiled, another loads instead of
compiling it again. Compilation is most of the suite's time.

XLA maps each compiled CPU program into memory mappings of its own, and JAX's caches keep
every program a worker compiled; a worker past the kernel's limit on mappings
(`vm.max_map_count`) segfaults inside XLA's next compile. So a worker past seven eighths
of that limit clears JAX's caches (later tests reload their programs from the persistent
cache); clearing takes seconds, so it waits until it is needed.
"""

import itertools
import os
import shutil
import tempfile

import jax
import pytest

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_default_matmul_precision", "highest")


_SHARED_CACHE = "JAXSPARSE_TESTS_COMPILATION_CACHE"
_CACHE_OWNER = pytest.StashKey[str]()


def pytest_configure(config):
    if _SHARED_CACHE not in os.environ:  # the controller (or a run without workers)
        os.environ[_SHARED_CACHE] = tempfile.mkdtemp(prefix="jaxsparse-tests-cache-")
        config.stash[_CACHE_OWNER] = os.environ[_SHARED_CACHE]
    jax.config.update("jax_compilation_cache_dir", os.environ[_SHARED_CACHE])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    config.addinivalue_line(
        "markers", "on_cpu: a test of CPU behaviour (run with JAX_PLATFORMS=cpu on GPU machines)"
    )
    config.addinivalue_line(
        "markers",
        "slow: an exhaustive sweep over a code path that faster tests already cover",
    )


# Counting the mappings reads /proc/self/maps (milliseconds at tens of thousands): after every
# few tests, which add at most a few thousand mappings, fewer than the eighth of the limit
# left.
_MAPPINGS_CHECK_PERIOD = 4
_tests_run = itertools.count(1)


def _mapping_count() -> int | None:
    """The memory mappings of this process, or `None` without Linux's /proc."""
    try:
        with open("/proc/self/maps", "rb") as maps:
            return maps.read().count(b"\n")
    except OSError:
        return None


def _mapping_limit() -> int:
    try:
        with open("/proc/sys/vm/max_map_count") as limit:
            return int(limit.read())
    except (OSError, ValueError):
        return 65530  # Linux's default


def pytest_runtest_teardown(item, nextitem):
    if next(_tests_run) % _MAPPINGS_CHECK_PERIOD:
        return
    count = _mapping_count()
    if count is not None and count > _mapping_limit() * 7 // 8:
        jax.clear_caches()


def pytest_unconfigure(config):
    owned = config.stash.get(_CACHE_OWNER, None)
    if owned is not None:
        shutil.rmtree(owned, ignore_errors=True)
