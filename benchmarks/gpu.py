"""The GPU section of the benchmark: each kernel family's time per product on this GPU,
its achieved bandwidth against the card's peak and a measured copy, and cuSPARSE beside it.

Run on a machine with a GPU (`make gpu-check` runs it after the test suite):

    python benchmarks/gpu.py [--rows 4194304] [--ks 1,8,64] [--out results/gpu.json]

Per matrix and `k` (columns of the dense operand), float32:

- every jaxsparse GPU kernel family that takes the product (`triton`, `mosaic_gpu`, ...,
  read from the backend table), and the `xla` backend with `--with-xla`;
- cuSPARSE through `jax.experimental.sparse.BCSR` with `jax_bcoo_cusparse_lowering` on,
  and through `cupyx.scipy.sparse` when CuPy is installed.

Times are medians over repeats of a jitted loop of `LOOP` dependent products (`x <- A @ x`,
the matrix scaled to norm 1; `products_in_a_loop`), divided by `LOOP`: the product's own
time without the per-call dispatch; the single call (dispatch included) is reported
beside it. Each figure takes `REPEATS` repeats, or fewer (at least `MIN_REPEATS`) where
they would pass `REPEAT_BUDGET_S`.
A case's programs are compiled all at once on threads (`--compile-threads`, by default one
a core) before any is timed.
The gradient step is one jitted `jax.vjp` of the product in the values and the operand.
Bytes are the ideal bytes of each product (DIA: `ndiag*n*v + n*k*v + m*k*v`; CSR:
`nnz*(v+i) + (m+1)*i + n*k*v + m*k*v`), so GB/s is an effective figure.
"""

import argparse
import concurrent.futures
import contextlib
import dataclasses
import functools
import json
import os
import pathlib
import platform
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse
from jax import lax
from jax.experimental import sparse as jsparse

try:
    import cupy
    import cupyx.scipy.sparse as cupy_sparse
except ImportError:
    cupy = None

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import matrices  # noqa: E402

import jaxsparse as js  # noqa: E402
from jaxsparse import _backend  # noqa: E402

LOOP = 20
REPEATS = 15
MIN_REPEATS = 5
REPEAT_BUDGET_S = 2.0  # seconds of repeats a figure may take before it settles for fewer
PEAK_TBS = {"H100": 3.35, "H200": 4.8, "A100": 2.0, "L4": 0.3}
KINDS = (
    ("poisson2d-5pt", "dia", matrices.poisson2d),
    ("stencil3d-27pt", "dia", matrices.stencil27),
    ("poisson2d-5pt", "csr", matrices.poisson2d),
    ("random-8", "csr", lambda rows, rng: matrices.random_uniform(rows, rng, per_row=8)),
    ("power-law", "csr", matrices.power_law),
)


def median_time(fn, *args) -> float:
    """Median seconds of `REPEATS` calls of `fn(*args)` (fewer past `REPEAT_BUDGET_S`),
    after one untimed call."""
    jax.block_until_ready(fn(*args))

    def timed() -> float:
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        return time.perf_counter() - start

    return _median_of_repeats(timed)


def _median_of_repeats(timed) -> float:
    """Median of `timed()` (seconds) over `REPEATS` repeats, or over `MIN_REPEATS` and
    more until `REPEAT_BUDGET_S` have passed."""
    times = []
    while len(times) < REPEATS and (len(times) < MIN_REPEATS or sum(times) < REPEAT_BUDGET_S):
        times.append(timed())
    return float(np.median(times))


@dataclasses.dataclass(frozen=True)
class _Program:
    """A lowered program, the arguments it is timed with, and the products one call makes."""

    lowered: jax.stages.Lowered
    args: tuple
    products: int = 1


def _lowered(fn, *args, products: int = 1) -> _Program:
    return _Program(jax.jit(fn).lower(*args), args, products)


def products_in_a_loop(step, x):
    """`x <- step(x)`, `LOOP` times in a `lax.fori_loop`, two an iteration: XLA keeps the
    carried operand in one buffer, and a product cannot write over the operand it reads, so
    with one an iteration each would end with a copy into that buffer (a copy of the
    operand per product, `gpu_loop_copy.py`); the second of two writes over the first's
    operand."""
    return lax.fori_loop(0, LOOP, lambda _, y: step(y), x, unroll=2)


def _product_programs(product, matrix, x) -> dict[str, _Program]:
    """Per product: a loop of `LOOP` dependent products and one call."""

    def loop(matrix, x):
        return products_in_a_loop(lambda y: product(matrix, y), x)

    return {
        "loop_s": _lowered(loop, matrix, x, products=LOOP),
        "single_s": _lowered(product, matrix, x),
    }


def _gradient_program(matrix, x, backend) -> _Program:
    """One jitted vjp in the values and the operand; the matrix is an argument, so a CSR
    structure is not a constant that XLA would fold."""

    def step(matrix, x, cotangent):
        def product(data, x):
            return js.matmul(matrix.with_data(data), x, backend=backend)

        y, pullback = jax.vjp(product, matrix.data, x)
        return y, pullback(cotangent)

    return _lowered(step, matrix, x, x)


def _compiled(programs: dict, threads) -> dict:
    """`{system: {figure: compiled}}` for `{system: {figure: _Program}}`, every program
    compiled on `threads` at once (XLA compiles without the GIL) before any is timed.
    Lowering stays on the caller's thread, where the family table and the configuration
    it reads are set."""
    jobs = {
        system: {figure: threads.submit(p.lowered.compile) for figure, p in figures.items()}
        for system, figures in programs.items()
    }
    return {
        system: {figure: job.result() for figure, job in figures.items()}
        for system, figures in jobs.items()
    }


def _times(programs: dict[str, _Program], compiled: dict) -> dict:
    """Each figure's median seconds per product."""
    return {
        figure: median_time(compiled[figure], *program.args) / program.products
        for figure, program in programs.items()
    }


def _ideal_bytes(fmt, scipy_matrix, k, itemsize=4, index_size=4) -> int:
    m, n = scipy_matrix.shape
    dense = (n + m) * k * itemsize
    if fmt == "dia":
        return scipy_matrix.data.shape[0] * n * itemsize + dense
    return scipy_matrix.nnz * (itemsize + index_size) + (m + 1) * index_size + dense


def _gpu_families() -> tuple[str, ...]:
    return tuple(f for f in _backend.PREFERENCES["auto", "cuda"] if f != "xla")


def _checked_columns(k: int) -> list[int]:
    """The operand's columns whose products are checked against scipy: the first, middle
    and last, which lie in different column tiles of a wide operand; scipy's product of
    all 64 columns at 2^22 rows would take tens of seconds of a short GPU lease."""
    return sorted({0, k // 2, k - 1})


def _relative_error(got, want) -> float:
    return float(np.linalg.norm(np.asarray(got, np.float64) - want) / np.linalg.norm(want))


@contextlib.contextmanager
def _family(family: str):
    """`backend="pallas"` on a GPU lowers to `family` alone inside the block."""
    table = _backend.PREFERENCES
    saved = table["pallas", "cuda"]
    table["pallas", "cuda"] = (family,)
    try:
        yield
    finally:
        table["pallas", "cuda"] = saved


def _jaxsparse_programs(matrix, x, with_xla: bool) -> tuple[dict, list[dict]]:
    """The programs of every GPU kernel family that takes this product (then `xla`, if
    asked), by system, and a row for each family that declined it."""
    programs, declined = {}, []
    for family in (*_gpu_families(), *(("xla",) if with_xla else ())):
        backend = "xla" if family == "xla" else "pallas"
        product = functools.partial(js.matmul, backend=backend)
        with _family(family):
            try:
                figures = _product_programs(product, matrix, x)
                figures["gradient_s"] = _gradient_program(matrix, x, backend)
            except TypeError as error:
                declined.append({"system": f"jaxsparse {family}", "declined": str(error)[:120]})
                continue
        programs[f"jaxsparse {family}"] = figures
    return programs, declined


def _bcsr_programs(scipy_csr, x) -> dict[str, _Program]:
    jax.config.update("jax_bcoo_cusparse_lowering", True)
    try:
        matrix = jsparse.BCSR.from_scipy_sparse(scipy_csr)
        return _product_programs(lambda a, y: a @ y, matrix, x)
    finally:
        jax.config.update("jax_bcoo_cusparse_lowering", False)


def _cupy_row(scipy_csr, x) -> dict | None:
    if cupy is None:
        return None
    matrix = cupy_sparse.csr_matrix(scipy_csr)
    y = cupy.asarray(np.asarray(x))
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    for _ in range(3):
        y = matrix @ y

    def timed() -> float:
        nonlocal y
        start.record()
        for _ in range(LOOP):
            y = matrix @ y
        end.record()
        end.synchronize()
        return cupy.cuda.get_elapsed_time(start, end) / 1e3

    return {"system": "cupyx (cuSPARSE)", "loop_s": _median_of_repeats(timed) / LOOP}


def _systems(matrix, csr, x, with_xla: bool, expected, threads) -> list[dict]:
    """One row per system: each jaxsparse family (with its relative error against
    `expected`, scipy in float64 on `_checked_columns`) or its refusal, BCSR, and CuPy."""
    programs, declined = _jaxsparse_programs(matrix, x, with_xla)
    programs["BCSR (cuSPARSE)"] = _bcsr_programs(csr, x)
    compiled = _compiled(programs, threads)
    rows = declined
    for system, figures in programs.items():
        row = {"system": system, **_times(figures, compiled[system])}
        if system.startswith("jaxsparse"):
            got = compiled[system]["single_s"](matrix, x)[:, _checked_columns(x.shape[1])]
            row["relative_error"] = _relative_error(got, expected)
        rows.append(row)
    cupy_row = _cupy_row(csr, x)
    return rows + [cupy_row] if cupy_row else rows


def _normalized(matrix):
    """`matrix` over its largest absolute row sum, in its own format and dtype: repeated
    products (`x <- A @ x`) stay bounded. (scipy's sparse division returns float64, which
    would hand CuPy a float64 matrix beside our float32 one.)"""
    norm = abs(matrix).sum(axis=1).max()
    if isinstance(matrix, scipy.sparse.dia_array):
        data = (matrix.data / norm).astype(matrix.dtype)
        return scipy.sparse.dia_array((data, matrix.offsets), shape=matrix.shape)
    return scipy.sparse.csr_array(matrix / norm).astype(matrix.dtype)


def copy_bandwidth(nbytes: int = 2**30) -> float:
    """Device-to-device streaming (`x + 1` over `nbytes`, read and written), GB/s."""
    x = jnp.zeros(nbytes // 4, jnp.float32)
    seconds = median_time(jax.jit(lambda x: x + 1), x)
    return 2 * nbytes / seconds / 1e9


def run(
    rows: int,
    ks=(1, 8, 64),
    with_xla: bool = False,
    formats=("dia", "csr"),
    compile_threads: int | None = None,
) -> dict:
    """Every case of `KINDS` in `formats` at each `k`, each case's programs compiled
    `compile_threads` at once (default: one a core); an interrupt (`make gpu-check`'s time
    limit sends one) ends the run with the cases done, marked `interrupted`."""
    device = jax.devices()[0]
    peak = next((v for key, v in PEAK_TBS.items() if key in device.device_kind), None)
    results = {
        "device": device.device_kind,
        "jax": jax.__version__,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "peak_tbs": peak,
        "copy_gbs": copy_bandwidth(),
        "families": _gpu_families(),
        "cases": [],
    }
    print(f"{device.device_kind}, JAX {jax.__version__}; copy {results['copy_gbs']:.0f} GB/s")
    try:
        _run_cases(results, rows, ks, with_xla, formats, compile_threads or os.cpu_count() or 1)
    except KeyboardInterrupt:  # `make gpu-check`'s time limit: keep the cases measured
        results["interrupted"] = True
        print(f"\ninterrupted after {len(results['cases'])} cases", flush=True)
    return results


def _run_cases(results, rows, ks, with_xla, formats, compile_threads: int):
    """Times every case into `results["cases"]`, printing each as it is done."""
    rng = np.random.default_rng(0)
    threads = concurrent.futures.ThreadPoolExecutor(compile_threads)
    try:
        for name, fmt, build in (kind for kind in KINDS if kind[1] in formats):
            scipy_matrix = _normalized(build(rows, rng))
            csr = scipy.sparse.csr_array(scipy_matrix)
            if fmt == "dia":
                matrix = js.DIAMatrix.from_scipy(scipy_matrix)
            else:
                matrix = js.CSRMatrix.from_scipy(csr)
            for k in ks:
                start = time.perf_counter()
                x = jnp.asarray(rng.standard_normal((csr.shape[1], k), np.float32))
                case = {"matrix": name, "format": fmt, "rows": csr.shape[0], "nnz": csr.nnz}
                case["k"] = k
                case["dtype"] = str(csr.dtype)  # every system's, CuPy's too
                case["bytes"] = _ideal_bytes(fmt, scipy_matrix if fmt == "dia" else csr, k)
                checked = np.asarray(x[:, _checked_columns(k)], np.float64)
                expected = csr.astype(np.float64) @ checked
                case["systems"] = _systems(matrix, csr, x, with_xla, expected, threads)
                # What the case took, compilation and CuPy included: what sizes a GPU lease.
                case["seconds"] = time.perf_counter() - start
                results["cases"].append(case)
                _print_case(case, results["copy_gbs"])
    finally:  # an interrupt leaves no compilation queued
        threads.shutdown(wait=False, cancel_futures=True)


def _print_case(case, copy_gbs):
    title = f"{case['format'].upper()} {case['matrix']}, {case['rows']} rows"
    print(f"\n{title}, nnz {case['nnz']}, k={case['k']} ({case['seconds']:.0f} s)")
    header = (
        "system",
        "loop us",
        "single us",
        "grad us",
        "grad ratio",
        "GB/s",
        "% copy",
    )
    print(f"  {header[0]:<22}" + "".join(f"{h:>11}" for h in header[1:]))
    for system in case["systems"]:
        if "declined" in system:
            print(f"  {system['system']:<22} declined: {system['declined']}")
            continue
        loop = system["loop_s"]
        gbs = case["bytes"] / loop / 1e9
        single = f"{system['single_s'] * 1e6:.1f}" if "single_s" in system else "-"
        grad, ratio = "-", "-"
        if "gradient_s" in system:
            grad = f"{system['gradient_s'] * 1e6:.1f}"
            ratio = f"{system['gradient_s'] / system['single_s']:.2f}"
        cells = (
            f"{loop * 1e6:.1f}",
            single,
            grad,
            ratio,
            f"{gbs:.0f}",
            f"{100 * gbs / copy_gbs:.0f}",
        )
        print(f"  {system['system']:<22}" + "".join(f"{c:>11}" for c in cells))


def summary(results) -> list[str]:
    """One line per case: jaxsparse's fastest family against cuSPARSE (CuPy) and BCSR (in
    the loop), the share of the measured copy bandwidth, the gradient step over the
    product (both single calls), and the product's relative error against scipy."""
    lines = [
        f"{results['device']}, JAX {results['jax']}, {results['date']}; "
        f"copy {results['copy_gbs']:.0f} GB/s",
        f"{'matrix':<22}{'k':>4}{'ours us':>10}{'CuPy us':>10}{'BCSR us':>10}"
        f"{'vs CuPy':>9}{'vs best':>9}{'% copy':>8}{'grad/prod':>11}{'rel err':>9}",
    ]
    for case in results["cases"]:
        ours = [s for s in case["systems"] if s["system"].startswith("jaxsparse") and "loop_s" in s]
        ours = [s for s in ours if not s["system"].endswith("xla")] or ours
        if not ours:
            continue
        best = min(ours, key=lambda s: s["loop_s"])
        others = {s["system"]: s["loop_s"] for s in case["systems"] if "loop_s" in s}
        cupy_s = others.get("cupyx (cuSPARSE)")
        bcsr_s = others.get("BCSR (cuSPARSE)")
        fastest_other = min(t for t in (cupy_s, bcsr_s) if t is not None)
        gbs = case["bytes"] / best["loop_s"] / 1e9
        grad = best.get("gradient_s", float("nan")) / best["single_s"]
        name = f"{case['format'].upper()} {case['matrix']}"
        cupy_us = f"{cupy_s * 1e6:.1f}" if cupy_s else "-"
        vs_cupy = f"{cupy_s / best['loop_s']:.2f}" if cupy_s else "-"
        lines.append(
            f"{name:<22}{case['k']:>4}{best['loop_s'] * 1e6:>10.1f}{cupy_us:>10}"
            f"{bcsr_s * 1e6:>10.1f}{vs_cupy:>9}{fastest_other / best['loop_s']:>9.2f}"
            f"{100 * gbs / results['copy_gbs']:>8.0f}{grad:>11.2f}"
            f"{best.get('relative_error', float('nan')):>9.1e}"
        )
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2**22)
    parser.add_argument("--ks", default="1,8,64", help="columns of the dense operand")
    parser.add_argument("--out", type=pathlib.Path, default=None)
    parser.add_argument("--with-xla", action="store_true", help="also time the xla backend")
    parser.add_argument("--formats", default="dia,csr", help="the formats to time")
    parser.add_argument(
        "--compile-threads", type=int, default=None, help="programs compiled at once (1: in turn)"
    )
    args = parser.parse_args()
    if jax.default_backend() != "gpu":
        sys.exit(
            f"benchmarks/gpu.py needs a GPU; JAX's default backend is {jax.default_backend()!r}."
        )
    results = run(
        args.rows,
        ks=tuple(int(k) for k in args.ks.split(",")),
        with_xla=args.with_xla,
        formats=tuple(args.formats.split(",")),
        compile_threads=args.compile_threads,
    )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1))
    print("\n== summary\n" + "\n".join(summary(results)))


if __name__ == "__main__":
    main()
