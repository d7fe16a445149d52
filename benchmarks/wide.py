"""Products with k = 64 at 10^6 rows: jaxsparse against scipy and BCSR (float32).

`run.py` times k = 64 only up to 1.5 * 10^5 rows, where its BCOO and gradient columns
would take most of an hour. This script times the forward product alone at 10^6 rows,
where the operand and the result (256 MB each) outgrow the last-level cache: a single call
(which also faults in a fresh result) and per product inside a jitted loop of
`systems.LOOP_PRODUCTS` (whose buffers XLA reuses), for jaxsparse, scipy (its DIA format
for stencils, and CSR) and `jax.experimental.sparse.BCSR`, each result checked against
scipy's CSR product first. Prints one line per matrix: medians in ms, and the ratio of the
faster of scipy (DIA for a DIA matrix, else CSR, as `report.py`'s targets) and BCSR to
jaxsparse (> 1: jaxsparse faster); in the loop, scipy's single call stands for scipy.
Run from the repository: `python benchmarks/wide.py [--kinds ...] [--rows 1000000]`.
"""

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import matrices  # noqa: E402
import report  # noqa: E402
import run  # noqa: E402
import systems  # noqa: E402

ROWS = 1_000_000  # unless --rows says otherwise
K = 64
TIMED = ("jaxsparse", "scipy-dia", "scipy-csr", "jax-bcsr")


def measure(kind, rows: int) -> dict:
    """Medians [ms] of each timed system's single call, and of the jax systems' products
    in a loop, on `kind`'s matrix of about `rows` rows; each checked by `run.measure`
    against scipy's CSR product before it is timed."""
    dia, csr = matrices.build(kind, rows)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((csr.shape[1], K), dtype=np.float32)
    w = rng.standard_normal((csr.shape[0], K), dtype=np.float32)
    reference = csr @ x
    budget = dict(budget_s=3.0, min_repeats=3, max_repeats=11)
    times = {}
    for system in systems.systems_for(dia, csr, x, w, kind.fmt):
        if system.name not in TIMED:
            continue
        ops = [(system.name, system.forward(), 1, budget)]
        if system.loop() is not None:
            loop_budget = {**budget, "max_repeats": 5}
            ops.append((f"{system.name} loop", system.loop(), systems.LOOP_PRODUCTS, loop_budget))
        for label, fn, products, op_budget in ops:
            record = run.measure(fn, reference, op_budget, products)
            if not record["ok"]:
                raise AssertionError(f"{label} on {kind.name}: {record['error']}")
            times[label] = record["median_s"] * 1e3
    return times


def line(kind, times: dict) -> str:
    scipy = times["scipy-dia" if kind.fmt == "dia" else "scipy-csr"]  # as report.py's targets
    peers, loop_peers = (scipy, times["jax-bcsr"]), (scipy, times["jax-bcsr loop"])
    cells = "  ".join(f"{name} {t:.1f}" for name, t in times.items())
    single = min(peers) / times["jaxsparse"]
    loop = min(loop_peers) / times["jaxsparse loop"]
    return (
        f"{kind.fmt}:{kind.name:<15} {cells}  vs faster of scipy, BCSR: "
        f"single {single:.2f}x, loop {loop:.2f}x"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default=None, help="comma-separated matrix names")
    parser.add_argument("--rows", type=int, default=ROWS)
    args = parser.parse_args(argv)
    wanted = args.kinds.split(",") if args.kinds else None
    print(report.header(run.environment()))
    print(f"k = {K}, {args.rows} rows; medians [ms]; loop = per product in a jitted loop")
    lines = []
    for kind in matrices.KINDS:
        if wanted is None or kind.name in wanted:
            lines.append(line(kind, measure(kind, args.rows)))
            print(lines[-1], flush=True)
    return lines


if __name__ == "__main__":
    main()
