"""The CSR transpose (float64): `A.T` and `A.T @ x`, eagerly and jitted, and `A[:, cols]`
(100 columns), against scipy's `A.T.tocsr()`, `A.T @ x` and `A[:, cols]`, on random
matrices with 5 entries a row; and the DIA transpose's `A.T` and `A.T @ x` (against
scipy's DIA `A.T` and `A.T @ x`) on the 2-D 5-point and 3-D 27-point stencils of about as
many rows.

Each jaxsparse result is checked against scipy's before it is timed; medians in ms, the
first call (compilation included) apart. `--compare-with DIR` runs the same cases in a
second process importing jaxsparse from `DIR` (a checkout of another commit, its native
kernels built) and prints both, with the speedup of this checkout over it.

Run from the repository, one benchmark at a time:
`flock /tmp/jaxsparse-bench.lock python benchmarks/transpose.py [--quick] [--compare-with DIR]`.
A section of `benchmarks/run.py` too (`--sections transpose`, its own process).
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import matrices  # noqa: E402
import timing  # noqa: E402

import jaxsparse as js  # noqa: E402
from jaxsparse.kernels import _native_library  # noqa: E402

SIZES, QUICK_SIZES = (10**4, 10**5, 10**6), (10**3,)
PER_ROW, COLUMNS = 5, 100
BUDGET = {"budget_s": 0.5, "min_repeats": 3, "max_repeats": 31, "warmup_s": 0.1}
QUICK_BUDGET = {"budget_s": 0.02, "min_repeats": 2, "max_repeats": 3}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one small size, few repeats")
    parser.add_argument("--sizes", default=None, help="comma-separated row counts")
    parser.add_argument("--compare-with", default=None, help="a checkout to time beside this one")
    parser.add_argument("--json", action="store_true", help="print the records as JSON only")
    return parser.parse_args(argv)


def _cases(S, x, cols):
    """(op, system, function, check): each function runs one call to completion; check
    compares its result with scipy's."""
    A = js.CSRMatrix.from_scipy(S)
    xj = jnp.asarray(x)
    by_column = S.tocsc()  # A.T's arrays in scipy's (stable) entry order
    product = S.T @ x
    selected = S[:, cols]

    def same_transpose(T):
        return all(
            np.array_equal(np.asarray(got), want)
            for got, want in zip(
                (T.data, T.indices, T.indptr),
                (by_column.data, by_column.indices, by_column.indptr),
                strict=True,
            )
        )

    def same_product(y):
        return np.allclose(np.asarray(y), product, rtol=1e-12, atol=1e-12)

    def same_selection(C):
        return C.shape == selected.shape and (C.to_scipy() != selected).nnz == 0

    transpose_jit = jax.jit(lambda A: A.T)
    product_jit = jax.jit(lambda A, x: A.T @ x)
    return [
        ("A.T", "scipy", lambda: S.T.tocsr(), None),
        ("A.T", "eager", lambda: jax.block_until_ready(A.T), same_transpose),
        ("A.T", "jit", lambda: jax.block_until_ready(transpose_jit(A)), same_transpose),
        ("A.T @ x", "scipy", lambda: S.T @ x, None),
        ("A.T @ x", "eager", lambda: jax.block_until_ready(A.T @ xj), same_product),
        ("A.T @ x", "jit", lambda: jax.block_until_ready(product_jit(A, xj)), same_product),
        (f"A[:, {COLUMNS} cols]", "scipy", lambda: S[:, cols], None),
        (
            f"A[:, {COLUMNS} cols]",
            "eager",
            lambda: jax.block_until_ready(A[:, cols]),
            same_selection,
        ),
    ]


def _dia_cases(S, x, name):
    """`_cases` for the DIA transpose of `S` (a scipy DIA array), ops prefixed by `name`."""
    A = js.DIAMatrix.from_scipy(S)
    xj = jnp.asarray(x)
    transposed, product = S.T.toarray() if S.shape[0] <= 10**4 else None, S.T @ x

    def same_transpose(T):
        return transposed is None or np.array_equal(np.asarray(T.todense()), transposed)

    def same_product(y):
        return np.allclose(np.asarray(y), product, rtol=1e-12, atol=1e-12)

    transpose_jit = jax.jit(lambda A: A.T)
    product_jit = jax.jit(lambda A, x: A.T @ x)
    return [
        (f"{name} A.T", "scipy", lambda: S.T, None),
        (f"{name} A.T", "eager", lambda: jax.block_until_ready(A.T), same_transpose),
        (f"{name} A.T", "jit", lambda: jax.block_until_ready(transpose_jit(A)), same_transpose),
        (f"{name} A.T @ x", "scipy", lambda: S.T @ x, None),
        (f"{name} A.T @ x", "eager", lambda: jax.block_until_ready(A.T @ xj), same_product),
        (f"{name} A.T @ x", "jit", lambda: jax.block_until_ready(product_jit(A, xj)), same_product),
    ]


def _all_cases(rows, rng):
    """`(nnz, cases)` of every matrix of `rows` rows."""
    S = matrices.random_uniform(rows, rng, per_row=PER_ROW).astype(np.float64)
    x = rng.standard_normal(rows)
    cols = np.sort(rng.choice(rows, size=min(COLUMNS, rows), replace=False))
    yield int(S.nnz), _cases(S, x, cols)
    for name, build in (("DIA 5pt", matrices.poisson2d), ("DIA 27pt", matrices.stencil27)):
        S = build(rows, rng).astype(np.float64)
        yield int(S.nnz), _dia_cases(S, rng.standard_normal(S.shape[0]), name)


def measure(sizes, budget) -> list[dict]:
    """Records `{rows, nnz, op, system, ok, first_call_s, median_s}`."""
    rng = np.random.default_rng(0)
    records = []
    for rows, (nnz, cases) in ((r, c) for r in sizes for c in _all_cases(r, rng)):
        for op, system, function, check in cases:
            record = {"rows": rows, "nnz": nnz, "op": op, "system": system}
            start = time.perf_counter()
            result = function()
            first_call_s = time.perf_counter() - start
            record["ok"] = check is None or bool(check(result))
            record.update(timing.time_call(function, first_call_s=first_call_s, **budget))
            records.append(record)
            print(f"{rows} {op} {system}: {record['median_s'] * 1e3:.3f} ms", file=sys.stderr)
    return records


def compared(directory: str, argv: list[str]) -> list[dict]:
    """The records of this script run in a process importing jaxsparse from `directory`."""
    environment = {**os.environ, "PYTHONPATH": str(Path(directory).resolve())}
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), *argv, "--json"],
        capture_output=True,
        text=True,
        check=False,
        env=environment,
        cwd=directory,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the run in {directory} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout)


def table(records, before=None) -> list[str]:
    """One line per size and operation: the medians of scipy and of jaxsparse eager and
    jitted, and the first jitted call [ms]; with `before`, the other checkout's and this
    one's speedup over it."""
    runs = {"": records, "was ": before or []}
    times = {(was, r["rows"], r["op"], r["system"]): r for was, rs in runs.items() for r in rs}
    columns = [("", "scipy"), ("", "eager"), ("", "jit"), ("", "jit 1st")]
    if before:
        columns += [("was ", "eager"), ("was ", "jit"), ("was ", "jit 1st")]
    lines = [
        f"{'rows':>8} {'nnz':>8} {'operation':<18}" + "".join(f"{w + c:>12}" for w, c in columns)
    ]
    lines[0] += f"{'speedup e/j':>13}" * bool(before) + f"{'vs scipy e/j':>14}"

    def ms(was, rows, op, column):
        record = times.get((was, rows, op, column.removesuffix(" 1st")))
        if record is None:
            return None
        return record["first_call_s" if column.endswith("1st") else "median_s"] * 1e3

    def ratio(a, b):
        return f"{a / b:.1f}" if a and b else "-"

    for rows, op in dict.fromkeys((r["rows"], r["op"]) for r in records):
        cells = {(w, c): ms(w, rows, op, c) for w, c in columns}
        line = f"{rows:>8} {times['', rows, op, 'scipy']['nnz']:>8} {op:<18}"
        line += "".join("{:>12}".format("-" if t is None else f"{t:.3f}") for t in cells.values())
        if before:
            speedups = [ratio(cells.get(("was ", c)), cells[("", c)]) for c in ("eager", "jit")]
            line += f"{'/'.join(speedups):>13}"
        versus = [ratio(cells[("", c)], cells[("", "scipy")]) for c in ("eager", "jit")]
        line += f"{'/'.join(versus):>14}"
        checked = [times.get((w, rows, op, c)) for w, c in columns]
        lines.append(line + "  WRONG" * any(r is not None and not r["ok"] for r in checked))
    lines.append(
        "(ms; 'jit 1st': the first jitted call, compilation included; 'was': the other "
        "checkout; speedup: its time over this one's; vs scipy: this one's time over scipy's)"
    )
    return lines


def main(argv=None) -> str:
    args = parse_args(argv)
    sizes = (
        tuple(int(s) for s in args.sizes.split(","))
        if args.sizes
        else (QUICK_SIZES if args.quick else SIZES)
    )
    records = measure(sizes, QUICK_BUDGET if args.quick else BUDGET)
    if args.json:
        print(json.dumps(records))
        return ""
    lines = [
        f"# CSR transpose, float64, {PER_ROW} random entries a row; DIA stencils (rows: the "
        f"CSR matrix's; the stencils' grids round them); {timing.cpu_name()}, "
        f"{os.cpu_count()} cpus; jax {jax.__version__}, scipy {scipy.__version__}; native "
        f"build {_native_library.INSTRUCTION_SET}",
        f"# load before: {timing.uptime()}",
    ]
    before = None
    if args.compare_with:
        passed = ["--quick"] * args.quick + (["--sizes", args.sizes] if args.sizes else [])
        before = compared(args.compare_with, passed)
        lines.append(f"# 'was': jaxsparse from {args.compare_with}")
    lines += table(records, before)
    lines.append(f"# load after: {timing.uptime()}")
    text = "\n".join(lines)
    print(text, flush=True)
    return text


if __name__ == "__main__":
    main()
