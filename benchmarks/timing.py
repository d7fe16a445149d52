"""Timing: first call (compile) apart, then the median of repeats; and the machine: its
streaming bandwidth, the ceiling beside every GB/s figure, its CPU and its load."""

import platform
import subprocess
import time

import jax
import numpy as np


def time_call(
    fn,
    *,
    budget_s: float,
    min_repeats: int,
    max_repeats: int,
    warmup_s: float = 0.0,
    max_warmup_calls: int = 1,
    first_call_s=None,
) -> dict:
    """Time `fn()` (which must block until its result is ready).

    After the first call, `fn` runs untimed for about `warmup_s` seconds (one call at least,
    `max_warmup_calls` at most): the first calls after a compilation run slower than the
    steady state (a DIA product at 10^6 rows: ten calls at 1.1-1.6 ms, then 0.7 ms), and a
    median over 15 calls would count them. Then as many timed calls as fit in `budget_s`,
    within `[min_repeats, max_repeats]`.

    **Returns:** `{"first_call_s", "median_s", "repeats"}`; the first call includes any
    compilation (pass `first_call_s` if the caller made it).
    """
    if first_call_s is None:
        start = time.perf_counter()
        fn()
        first_call_s = time.perf_counter() - start
    start = time.perf_counter()
    fn()
    warm = time.perf_counter() - start
    warmup_calls = int(np.clip(warmup_s / max(warm, 1e-6), 1, max_warmup_calls))
    for _ in range(warmup_calls - 1):
        start = time.perf_counter()
        fn()
        warm = time.perf_counter() - start
    repeats = int(np.clip(budget_s / max(warm, 1e-6), min_repeats, max_repeats))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return {"first_call_s": first_call_s, "median_s": float(np.median(times)), "repeats": repeats}


def blocking(fn, *args):
    """A zero-argument callable running `fn(*args)` to completion."""
    return lambda: jax.block_until_ready(fn(*args))


def streaming_bandwidth(bytes_per_array: int = 100_000_000, repeats: int = 11) -> dict:
    """`c = a + b` on float32 arrays of `bytes_per_array` each, counted as 3 arrays moved.

    Two figures: numpy writing into a preallocated `c` (the memory system's ceiling), and a
    jitted `a + b`, whose fresh output buffer is allocated (and page-faulted) per call, as
    every jax product's output is.
    """
    size = bytes_per_array // 4
    a = np.ones(size, np.float32)
    b = np.ones(size, np.float32)
    c = np.empty_like(a)
    moved = 3 * size * 4
    numpy_s = time_call(
        lambda: np.add(a, b, out=c), budget_s=0, min_repeats=repeats, max_repeats=repeats
    )["median_s"]
    aj, bj = jax.device_put(a), jax.device_put(b)
    add = jax.jit(lambda x, y: x + y)
    jax_s = time_call(blocking(add, aj, bj), budget_s=0, min_repeats=repeats, max_repeats=repeats)[
        "median_s"
    ]
    return {
        "bytes_per_array": bytes_per_array,
        "numpy_add_gbs": moved / numpy_s / 1e9,
        "jax_add_new_output_gbs": moved / jax_s / 1e9,
    }


def uptime() -> str:
    """The load averages as `uptime` prints them: benchmarks report them before and after."""
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def cpu_name() -> str:
    """The CPU model from `/proc/cpuinfo`, else what `platform` knows."""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()
