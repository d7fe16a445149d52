"""CG on `Dx.T @ diags(k) @ Dx + I` before and after `DIAMatrix.eliminate_zeros()`.

`Dx = kron(eye(N), D1)` with the `(N - 1, N)` forward difference `D1` is the x-derivative of
an `N x N` grid; the DIA product keeps every pairwise offset (`2N + 1` diagonals), of which
three hold nonzeros. Prints the stored diagonals and the time of a fixed number of CG
iterations (jitted, compilation apart; median of repeats) for the unpruned and pruned
operator, with scipy's CG on the same matrix in the same run.

Run: `flock /tmp/jaxsparse-bench.lock python benchmarks/pruning.py [--n 32] [--iterations 200]`
"""

import argparse
import os
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse.linalg

sys.path.insert(0, str(Path(__file__).parent))
from timing import blocking, cpu_name, streaming_bandwidth, time_call, uptime  # noqa: E402

import jaxsparse as js  # noqa: E402


def grid_operator(n: int) -> js.DIAMatrix:
    """`Dx.T @ diags(k) @ Dx + I` on an `n x n` grid, `k` positive weights."""
    d1 = js.diags([-jnp.ones(n - 1), jnp.ones(n - 1)], [0, 1], shape=(n - 1, n))
    dx = js.kron(js.eye(n), d1)
    weights = 1.0 + jnp.linspace(0.0, 1.0, dx.shape[0], dtype=jnp.float32)
    return dx.T @ js.diags(weights) @ dx + js.eye(dx.shape[1])


def cg_seconds(operator, rhs, iterations: int) -> dict:
    solve = jax.jit(
        lambda matrix, b: jax.scipy.sparse.linalg.cg(
            lambda x: matrix @ x, b, tol=0.0, maxiter=iterations
        )[0]
    )
    timing = time_call(blocking(solve, operator, rhs), budget_s=2.0, min_repeats=5, max_repeats=50)
    return {**timing, "solution": np.asarray(solve(operator, rhs))}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=32)
    parser.add_argument("--iterations", type=int, default=200)
    args = parser.parse_args(argv)
    print(f"uptime before: {uptime()}")
    bandwidth = streaming_bandwidth()
    print(
        f"machine: {cpu_name()}, {os.cpu_count()} cpus; jax {jax.__version__}; numpy add "
        f"{bandwidth['numpy_add_gbs']:.1f} GB/s"
    )
    full = grid_operator(args.n)
    pruned = full.eliminate_zeros()
    rhs = jnp.ones((full.shape[1],), jnp.float32)
    twin = pruned.to_scipy().tocsr()
    scipy_timing = time_call(
        lambda: scipy.sparse.linalg.cg(twin, np.asarray(rhs), rtol=0.0, maxiter=args.iterations),
        budget_s=2.0,
        min_repeats=5,
        max_repeats=50,
    )
    print(f"N = {args.n} ({full.shape[0]} rows), {args.iterations} CG iterations, float32")
    print("| operator | stored diagonals | first call (s) | median (ms) | per iteration (us) |")
    print("|---|---|---|---|---|")
    results = {}
    for name, operator in (("DIA unpruned", full), ("DIA after eliminate_zeros()", pruned)):
        timing = cg_seconds(operator, rhs, args.iterations)
        results[name] = timing["solution"]
        print(
            f"| {name} | {len(operator.offsets)} | {timing['first_call_s']:.2f} | "
            f"{timing['median_s'] * 1e3:.2f} | {timing['median_s'] / args.iterations * 1e6:.1f} |"
        )
    print(
        f"| scipy CSR cg (pruned matrix) | - | {scipy_timing['first_call_s']:.2f} | "
        f"{scipy_timing['median_s'] * 1e3:.2f} | "
        f"{scipy_timing['median_s'] / args.iterations * 1e6:.1f} |"
    )
    solutions = list(results.values())
    difference = float(np.max(np.abs(solutions[0] - solutions[1])))
    print(f"max |x_unpruned - x_pruned| = {difference:.2e}")
    print(f"uptime after: {uptime()}")


if __name__ == "__main__":
    main()
