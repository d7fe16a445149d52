"""Benchmark jaxsparse's products against scipy.sparse, jax.experimental.sparse and dense jnp.

Run `make bench` (or `python benchmarks/run.py --quick` for a < 1 minute smoke run). One
process times every system on every matrix (float32): forward `A @ X` as a single call
and per product inside a jitted loop of 20 (whose buffers XLA reuses), and a gradient step
(forward and backward: a jitted `jax.vjp` along a cotangent `W`, giving the gradients with
respect to the values and `X`), after checking each system's result against scipy's.
Prints progress to stderr, then a table, the machine's streaming bandwidth and the issue's
target ratios; writes JSON and a PNG plot. Four more sections (`--sections`): matrices
with many diagonals (`many_diagonals.py`: compile times), `jax.vmap` over 64 matrices'
values (`batches.py`), and, each float64 in a process of its own so that its 64-bit mode
leaves the products' float32 runs alone, direct solves (`solve.py`) and the CSR transpose
(`transpose.py`).
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import batches  # noqa: E402
import many_diagonals  # noqa: E402
import matrices  # noqa: E402
import report  # noqa: E402
import systems  # noqa: E402
import timing  # noqa: E402
from plot import plot  # noqa: E402

KS = (1, 8, 64)
MAX_ROWS_FOR_K = {1: 10**9, 8: 1_100_000, 64: 150_000}
MAX_ROWS_GRADIENT = 1_100_000
GRADIENT_KS = (1, 8)
TOLERANCE = 1e-4  # max abs error relative to max |reference|, float32
SECTIONS = ("products", "many-diagonals", "batches", "solve", "transpose")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    parser.add_argument("--max-rows", type=int, default=None)
    parser.add_argument("--kinds", default=None, help="comma-separated matrix names")
    parser.add_argument("--k", default=None, help="comma-separated column counts")
    parser.add_argument("--no-gradient", action="store_true")
    parser.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help=f"comma-separated, of {', '.join(SECTIONS)}",
    )
    return parser.parse_args(argv)


def relative_error(result, reference) -> float:
    scale = max(float(np.max(np.abs(reference))), 1e-30)
    return float(np.max(np.abs(np.asarray(result, np.float64) - reference))) / scale


def measure(fn, reference, budget, products: int = 1) -> dict:
    """Check `fn()` against `reference`, then time it (a wrong answer is not timed); times
    are per product when `fn` runs `products` of them."""
    try:
        start = time.perf_counter()
        result = fn()
        first_call_s = time.perf_counter() - start
    except Exception as error:  # a peer that cannot run this case is reported, not fatal
        return {"ok": False, "error": f"{type(error).__name__}: {error}"[:200]}
    if isinstance(result, tuple):  # gradient step: (Y, dX)
        result = result[1]
    error = relative_error(result, reference)
    if not error <= TOLERANCE:
        return {"ok": False, "error": f"wrong result, relative error {error:.2e}"}
    timed = timing.time_call(fn, first_call_s=first_call_s, **budget)
    timed["median_s"] /= products
    return {"ok": True, "rel_error": error, **timed}


def skip_reason(rows, k, max_rows):
    if max_rows is not None and rows > max_rows:
        return f"rows > --max-rows={max_rows}"
    if rows > MAX_ROWS_FOR_K[k]:
        return f"k={k} only up to {MAX_ROWS_FOR_K[k]:.1e} rows (time and memory)"
    return None


def budget_for(args) -> dict:
    if args.quick:
        return {"budget_s": 0.05, "min_repeats": 2, "max_repeats": 3}
    return {
        "budget_s": 0.6,
        "min_repeats": 3,
        "max_repeats": 41,
        "warmup_s": 0.2,
        "max_warmup_calls": 20,
    }


def run_cases(args) -> tuple[list[dict], list[str]]:
    budget = budget_for(args)
    names = set(args.kinds.split(",")) if args.kinds else None
    ks = tuple(int(k) for k in args.k.split(",")) if args.k else ((1, 8) if args.quick else KS)
    records, skipped = [], []
    rng = np.random.default_rng(1)
    for kind in matrices.KINDS:
        if names is not None and kind.name not in names:
            continue
        for target_rows in kind.quick_sizes[:1] if args.quick else kind.sizes:
            dia, csr = matrices.build(kind, target_rows)
            m, n = csr.shape
            csr64 = csr.astype(np.float64)
            for k in ks:
                reason = skip_reason(m, k, args.max_rows)
                if reason:
                    skipped.append(f"{kind.fmt}:{kind.name} rows={m} k={k}: {reason}")
                    continue
                x = rng.standard_normal((n, k)).astype(np.float32)
                w = rng.standard_normal((m, k)).astype(np.float32)
                y_ref = csr64 @ x.astype(np.float64)
                dx_ref = csr64.T @ w.astype(np.float64)
                with_gradient = not args.no_gradient and k in GRADIENT_KS and m <= MAX_ROWS_GRADIENT
                case = {
                    "format": kind.fmt,
                    "matrix": kind.name,
                    "rows": m,
                    "cols": n,
                    "nnz": int(csr.nnz),
                    "ndiag": None if dia is None else int(dia.offsets.size),
                    "k": k,
                }
                for system in systems.systems_for(dia, csr, x, w, kind.fmt):
                    ops = [("forward", system.forward(), y_ref, 1)]
                    if system.loop() is not None:
                        ops.append(("loop", system.loop(), y_ref, systems.LOOP_PRODUCTS))
                    if with_gradient and system.gradient() is not None:
                        ops.append(("gradient", system.gradient(), dx_ref, 1))
                    if with_gradient and system.gradient_loop() is not None:
                        gradient_loop = system.gradient_loop()
                        ops.append(("gradient_loop", gradient_loop, dx_ref, systems.LOOP_PRODUCTS))
                    for op, fn, reference, products in ops:
                        record = {**case, "system": system.name, "op": op}
                        record.update(measure(fn, reference, budget, products))
                        records.append(record)
                        print(report.progress_line(record), file=sys.stderr, flush=True)
    return records, skipped


def run_script_section(name: str, quick: bool) -> str:
    """The tables (stdout) of the section script `<name>.py`, run in a fresh process; an
    error if it failed."""
    script = Path(__file__).resolve().parent / f"{name}.py"
    command = [sys.executable, str(script), *(["--quick"] if quick else [])]
    print(f"{name} section: " + " ".join(command[1:]), file=sys.stderr, flush=True)
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{name}.py failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return done.stdout.rstrip()


def environment() -> dict:
    blas_env = {
        key: os.environ[key]
        for key in (
            "OPENBLAS_CORETYPE",
            "OPENBLAS_L2_SIZE",
            "OPENBLAS_NUM_THREADS",
            "GLIBC_TUNABLES",
            "XLA_FLAGS",
            "JAXSPARSE_BACKEND",
        )
        if key in os.environ
    }
    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()} {_cpu_name()}, {os.cpu_count()} cpus",
        "python": platform.python_version(),
        "jax": jax.__version__,
        "numpy": np.__version__,
        "scipy": __import__("scipy").__version__,
        "jax_devices": [str(d) for d in jax.devices()],
        "environment": blas_env,
        "dtype": "float32",
    }


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main(argv=None) -> dict:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = environment()
    print(report.header(env), file=sys.stderr, flush=True)
    bandwidth = timing.streaming_bandwidth(
        bytes_per_array=10_000_000 if args.quick else 100_000_000
    )
    sections = args.sections.split(",")
    records, skipped = run_cases(args) if "products" in sections else ([], [])
    results = {
        **env,
        "quick": args.quick,
        "bandwidth": bandwidth,
        "skipped": skipped,
        "notes": report.NOTES,
        "records": records,
    }
    if "many-diagonals" in sections:
        results["many_diagonals"] = many_diagonals.run(args.quick, budget_for(args))
    if "batches" in sections:
        results["batches"] = batches.run(args.quick, budget_for(args))
    for name in ("solve", "transpose"):
        if name in sections:
            results[name] = run_script_section(name, args.quick)
    results["targets"] = report.targets(records, bandwidth)
    print(report.header(env))
    if records:
        print(report.tables(records, bandwidth, skipped))
        print(report.targets_text(results["targets"]))
    if "many_diagonals" in results:
        print(many_diagonals.table(results["many_diagonals"]))
    if "batches" in results:
        print(batches.table(results["batches"], bandwidth))
    for name in ("solve", "transpose"):
        if name in results:
            print("\n" + results[name])
    stem = "quick" if args.quick else "results"
    (out / f"{stem}.json").write_text(json.dumps(results, indent=1))
    if records:
        plot(records, str(out / f"{stem}.png"))
    print(
        f"\nwrote {out / (stem + '.json')}" + (f" and {out / (stem + '.png')}" if records else "")
    )
    return results


if __name__ == "__main__":
    main()
