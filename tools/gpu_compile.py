"""Compile every GPU kernel of jaxsparse to sm_90a machine code on a machine without a GPU.

Run by `make gpu-compile`, in its own environment (`.venv-gpu-compile`: the package's
`gpu-compile` extra, which brings the CUDA plugin) with `JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1`.
The plugin's own target description of an H100 (`NVIDIA H100 80GB HBM3`, read from the
plugin library) gives a device to compile for: `jax.jit(f).lower(*avals).compile()` then
runs XLA's whole GPU back end, Triton's and Mosaic GPU's compilers and ptxas included, and
their errors come back as exceptions. The programs (`gpu_compile_cases.py`) are every
product and gradient of both formats, for every GPU kernel family of the library, dtype
and number of columns, at realistic sizes; each kernel family is compiled in turn by
narrowing the library's GPU preferences (`_backend.PREFERENCES`) to it, so a family that
`"pallas"` would not pick first is compiled too.

Prints one line per program, then a table of every Pallas kernel compiled (registers per
thread, stack, shared memory, launch shape: `gpu_kernel_resources.py` says where each comes
from) and a summary. A dtype that a family declines (the library's `TypeError` for an
explicit backend) is reported as declined. Exits 1 if any program fails to compile, or a
kernel exceeds the H100's limits per block (threads, registers, shared memory), which XLA
does not check when compiling without a device.

`--plant-oversized-block` compiles only the planted kernels (`planted_programs`), both of
which must fail, to show that this step catches such errors and what it prints. `--only
TEXT` compiles the programs whose label contains `TEXT` (`make gpu-compile
GPU_COMPILE_ARGS="--only CSR"`). `--loops` also prints, under each program, the loops of
its Pallas Triton kernels as their machine code runs them (`gpu_sass_loops.py`: barriers,
loads and fences an iteration). The programs compile in `--jobs` processes (one per core by
default): each compile is mostly one thread, and the programs are independent.
"""

import argparse
import concurrent.futures
import contextlib
import ctypes
import dataclasses
import importlib.util
import multiprocessing
import os
import re
import sys
import tempfile
import time
import traceback
import unittest.mock
from pathlib import Path

import jax
from gpu_compile_cases import PLATFORM, Program, planted_programs, programs
from gpu_kernel_resources import (
    KernelResources,
    read_kernel_cache,
    read_ptxas_report,
    read_triton_cubins,
)
from gpu_sass_loops import Loop, disassemble, loops
from jax.experimental import topologies

from jaxsparse import _backend

TARGET = "NVIDIA H100 80GB HBM3"
PLUGIN_MODULE = "jax_plugins.xla_cuda13"
PLUGIN_LIBRARY = "xla_cuda_plugin.so"
# A compile without a device cannot size CUB's scratch space (XLA's CUB sort asks a device
# and fails with "invalid device ordinal"): XLA's own sort kernel stands in for the argsort
# of the CSR transposed product. Given only to programs that sort, since XLA warns about it
# on every compile. The Pallas kernels are unaffected.
SORT_OPTIONS = {"xla_gpu_deviceless_cub_mode": "DEVICELESS_CUB_DISABLED"}
_LIBC = ctypes.CDLL(None)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What compiling one program gave: `status` is `"compiled"`, `"declined"` or
    `"failed"`; `message` the error for the last two."""

    program: Program
    status: str
    seconds: float
    kernels: tuple[KernelResources, ...] = ()
    message: str = ""
    loops: dict[str, list[Loop]] = dataclasses.field(default_factory=dict)


def target_config() -> str:
    """The CUDA plugin's own `GpuTargetConfigProto` text for `TARGET`."""
    spec = importlib.util.find_spec(PLUGIN_MODULE)
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"gpu_compile: {PLUGIN_MODULE} is not installed (pip install -e '.[gpu-compile]')")
    library = Path(next(iter(spec.submodule_search_locations))) / PLUGIN_LIBRARY
    for text in library.read_bytes().split(b"\0"):
        if (
            b"GpuTargetConfigProto" in text
            and f'device_description_str: "{TARGET}"'.encode() in text
        ):
            return text.decode()
    sys.exit(f"gpu_compile: no target description of {TARGET!r} in {library}")


def block_limits(config: str) -> dict[str, int]:
    """The per-block limits of the target that XLA does not check without a device."""
    names = ("threads_per_block_limit", "registers_per_block_limit", "shared_memory_per_core")
    return {name: int(re.search(rf"\b{name}: (\d+)", config)[1]) for name in names}


def limit_problems(kernel: KernelResources, limits: dict[str, int]) -> list[str]:
    """Why `kernel` could not launch on the target, if it could not."""
    problems = []
    threads = kernel.threads or 0
    if threads > limits["threads_per_block_limit"]:
        problems.append(f"{threads} threads per block > {limits['threads_per_block_limit']}")
    if kernel.registers * threads > limits["registers_per_block_limit"]:
        problems.append(
            f"{kernel.registers} registers x {threads} threads > "
            f"{limits['registers_per_block_limit']} registers per block"
        )
    if kernel.shared_bytes > limits["shared_memory_per_core"]:
        problems.append(
            f"{kernel.shared_bytes} bytes of shared memory > {limits['shared_memory_per_core']}"
        )
    return problems


@contextlib.contextmanager
def only_family(family: str):
    """Lower `"pallas"` products for the GPU with kernel family `family` alone."""
    with unittest.mock.patch.dict(_backend.PREFERENCES, {("pallas", PLATFORM): (family,)}):
        jax.clear_caches()
        yield


@contextlib.contextmanager
def native_stdout_to(path: Path):
    """Send what native code prints (Mosaic GPU's ptxas report) to `path`."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(path, "wb") as sink:
        os.dup2(sink.fileno(), 1)
        try:
            yield
        finally:
            _LIBC.fflush(None)
            os.dup2(saved, 1)
            os.close(saved)


def declined_by_library(error: BaseException) -> bool:
    """Whether `error` is the library's refusal of a dtype for an explicit backend."""
    frames = traceback.extract_tb(error.__traceback__)
    return (
        isinstance(error, TypeError)
        and bool(frames)
        and frames[-1].filename.endswith(f"jaxsparse{os.sep}_backend.py")
    )


def compile_program(
    program: Program, device, workdir: Path, number: int, with_loops: bool = False
) -> Outcome:
    """Lower and compile `program` for `device`; read back what its kernels use (and, with
    `with_loops`, the loops of its Triton kernels)."""
    cache, ptxas_report = workdir / f"{number}.kernels", workdir / f"{number}.ptxas"
    start = time.perf_counter()
    with only_family(program.family), jax.default_device(device):
        try:
            lowered = jax.jit(program.function).lower(*program.avals)
        except Exception as error:
            status = "declined" if declined_by_library(error) else "failed"
            return Outcome(program, status, time.perf_counter() - start, message=_text(error))
        options = {"xla_gpu_kernel_cache_file": str(cache)}
        if "stablehlo.sort" in lowered.as_text():
            options.update(SORT_OPTIONS)
        try:
            with native_stdout_to(ptxas_report):
                lowered.compile(compiler_options=options)
        except Exception as error:
            return Outcome(program, "failed", time.perf_counter() - start, message=_text(error))
    seconds = time.perf_counter() - start  # the compile's, not the disassembly's below
    cached = cache.read_bytes() if cache.exists() else b""
    kernels = read_kernel_cache(cached) + read_ptxas_report(
        ptxas_report.read_text(errors="replace")
    )
    pallas_kernels = tuple(kernel for kernel in kernels if kernel.kind != "xla")
    found = {}
    if with_loops:
        found = {
            name: loops(disassemble(cubin)) for name, cubin in read_triton_cubins(cached).items()
        }
    return Outcome(program, "compiled", seconds, pallas_kernels, loops=found)


def _text(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error).strip()}"


def print_table(outcomes: list[Outcome], limits: dict[str, int]) -> list[str]:
    """The per-kernel table (Markdown); returns the kernels over the target's limits."""
    print(
        "\n| matrix | operation | dtype | k | family | kernel | blocks | threads "
        "| registers | stack B | shared B (static + dynamic) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    over_limits = []
    for outcome in outcomes:
        program = outcome.program
        for kernel in outcome.kernels:
            dynamic = "?" if kernel.dynamic_shared_bytes is None else kernel.dynamic_shared_bytes
            print(
                f"| {program.matrix} | {program.operation} | {program.dtype} | {program.k} "
                f"| {program.family} | {kernel.name} | {kernel.blocks or '?'} "
                f"| {kernel.threads or '?'} | {kernel.registers} | {kernel.stack_bytes} "
                f"| {kernel.static_shared_bytes} + {dynamic} |"
            )
            over_limits += [
                f"{program.label} | {kernel.name}: {problem}"
                for problem in limit_problems(kernel, limits)
            ]
    return over_limits


def print_summary(outcomes: list[Outcome], over_limits: list[str], seconds: float) -> bool:
    """Per-kernel maxima, declined and failed programs; returns whether all passed."""
    print("\nPer kernel, over all programs (max registers, max stack, max shared memory):")
    worst: dict[tuple[str, str], list[int]] = {}
    for outcome in outcomes:
        for kernel in outcome.kernels:
            key = (outcome.program.family, kernel.name)
            seen = worst.setdefault(key, [0, 0, 0, 0])
            seen[0] += 1
            seen[1] = max(seen[1], kernel.registers)
            seen[2] = max(seen[2], kernel.stack_bytes)
            seen[3] = max(seen[3], kernel.shared_bytes)
    for (family, name), (count, registers, stack, shared) in sorted(worst.items()):
        print(
            f"  {family:10} {name:24} in {count:3} programs: {registers} registers, "
            f"{stack} B stack, {shared} B shared"
        )
    declined = [o for o in outcomes if o.status == "declined"]
    failed = [o for o in outcomes if o.status == "failed"]
    reasons = sorted(
        {(o.program.family, o.program.dtype, _first_line_of(o.message, 1000)) for o in declined}
    )
    print(f"\nDeclined by the library ({len(declined)} programs):")
    for family, dtype, message in reasons:
        print(f"  {family} / {dtype}: {message}")
    compiled = len(outcomes) - len(declined) - len(failed)
    print(
        f"\n{compiled} programs compiled to sm_90a, {len(declined)} declined, "
        f"{len(failed)} failed, {len(over_limits)} kernels over the H100's limits, "
        f"in {seconds:.0f} s."
    )
    for outcome in failed:
        print(f"\nFAILED: {outcome.program.label}\n{outcome.message}")
    for problem in over_limits:
        print(f"\nOVER THE LIMITS: {problem}")
    return not failed and not over_limits


def selected_programs(planted: bool, only: str) -> list[Program]:
    """The programs to compile, in the report's order: the planted ones or all, narrowed
    to the labels containing `only`."""
    todo = planted_programs() if planted else programs()
    return [program for program in todo if only in program.label]


def target_device(config: str):
    """A device of `config`'s GPU to compile for, without a GPU."""
    return topologies.get_topology_desc(
        platform=PLATFORM, target_config=config, topology="1x1x1"
    ).devices[0]


# What a compile process keeps between programs (`start_worker`).
_WORKER = {}


def start_worker(config: str, planted: bool, only: str, with_loops: bool, workdir: str) -> None:
    """Set up a compile process for the target `config` (read once, by the parent: reading
    it takes seconds): the same programs as the parent's, by number."""
    jax.config.update("jax_enable_x64", True)
    _WORKER.update(
        device=target_device(config),
        todo=selected_programs(planted, only),
        with_loops=with_loops,
        workdir=Path(workdir),
    )


def compile_numbered(number: int) -> dict:
    """Compile program `number` in a compile process; its `Outcome` but the program (a
    closure, which does not pickle), as keyword arguments."""
    worker = _WORKER
    outcome = compile_program(
        worker["todo"][number], worker["device"], worker["workdir"], number, worker["with_loops"]
    )
    return {
        field.name: getattr(outcome, field.name)
        for field in dataclasses.fields(outcome)
        if field.name != "program"
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--plant-oversized-block",
        action="store_true",
        help="compile only the planted kernels that must fail, to show the errors caught",
    )
    parser.add_argument(
        "--only",
        default="",
        help="compile only the programs whose label contains this text (e.g. 'CSR')",
    )
    parser.add_argument(
        "--loops",
        action="store_true",
        help="print the loops of each Triton kernel's machine code (barriers, loads, fences)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="processes compiling at once (default: one per core)",
    )
    args = parser.parse_args()
    if not os.environ.get("JAX_SKIP_CUDA_CONSTRAINTS_CHECK"):
        sys.exit("gpu_compile: set JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1 (make gpu-compile does)")
    if args.jobs < 1:
        sys.exit(f"gpu_compile: --jobs must be at least 1, got {args.jobs}")
    jax.config.update("jax_enable_x64", True)
    # Mosaic GPU prints ptxas' report of its kernels (registers, shared memory) when asked;
    # set before the compile processes start, which inherit it.
    os.environ["MOSAIC_GPU_DUMP_PTXAS"] = "1"
    config = target_config()
    limits = block_limits(config)
    todo = selected_programs(args.plant_oversized_block, args.only)
    jobs = min(args.jobs, max(len(todo), 1))
    print(
        f"Compiling {len(todo)} programs for {TARGET} (sm_90a), without a GPU, "
        f"in {jobs} process{'es' if jobs > 1 else ''}."
    )
    start = time.perf_counter()
    outcomes = []
    with tempfile.TemporaryDirectory() as workdir, contextlib.ExitStack() as stack:
        setup = (config, args.plant_oversized_block, args.only, args.loops, workdir)
        if jobs == 1:
            start_worker(*setup)
            results = map(compile_numbered, range(len(todo)))
        else:
            # Spawned, not forked: JAX's threads are running in this process.
            pool = stack.enter_context(
                concurrent.futures.ProcessPoolExecutor(
                    jobs,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=start_worker,
                    initargs=setup,
                )
            )
            results = pool.map(compile_numbered, range(len(todo)))
        for program, fields in zip(todo, results, strict=True):
            outcome = Outcome(program, **fields)
            outcomes.append(outcome)
            note = f": {_first_line_of(outcome.message)}" if outcome.message else ""
            print(f"{outcome.status:8} {outcome.seconds:5.1f} s  {program.label}{note}", flush=True)
            for kernel, found in sorted(outcome.loops.items()):
                for loop in found:
                    print(f"    {kernel} loop {loop.describe()}")
    over_limits = print_table(outcomes, limits)
    passed = print_summary(outcomes, over_limits, time.perf_counter() - start)
    return 0 if passed else 1


def _first_line_of(message: str, width: int = 120) -> str:
    line = message.strip().splitlines()[0] if message.strip() else ""
    return line if len(line) <= width else line[: width - 3] + "..."


if __name__ == "__main__":
    sys.exit(main())
