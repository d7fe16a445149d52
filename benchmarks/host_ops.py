"""Operations other than products on random CSR matrices: jaxsparse (eager and inside
`jax.jit`) against scipy.sparse, and against another checkout of jaxsparse (`--baseline`).

float64, `n x n` with 5 random entries a row (columns sorted within rows, no repeats).
Eager: the second and later calls; jit: the compiled function's steady state (the compile
is outside the timed region). Each figure is the median of repeated calls, each call
blocked until its result is ready. With `--baseline DIR` the same cases run first in a
process importing jaxsparse from `DIR` (e.g. `git worktree add DIR <commit>`), and the
table puts both side by side.

Run: `flock /tmp/jaxsparse-heavy.lock python benchmarks/host_ops.py --sizes 10000 100000
--baseline /tmp/before [--ops max,multiply]`
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from timing import blocking, cpu_name, time_call, uptime  # noqa: E402


def random_csr(n: int, per_row: int, seed: int):
    import numpy as np
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    matrix = sp.random_array((n, n), density=per_row / n, format="csr", rng=rng)
    matrix.sort_indices()
    return sp.csr_array(matrix)


def cases(n: int):
    """`{name: (scipy call, eager call, jitted function or None, its arguments)}`."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import scipy.sparse as sp

    import jaxsparse as js

    S, T = random_csr(n, 5, 0), random_csr(n, 5, 7)
    A, B = js.CSRMatrix.from_scipy(S), js.CSRMatrix.from_scipy(T)
    coo = S.tocoo()
    rows, cols, data = coo.row, coo.col, jnp.asarray(coo.data)
    # The same list in a random order, as an assembly loop might produce it.
    shuffle = np.random.default_rng(5).permutation(S.nnz)
    shuffled = (coo.data[shuffle], rows[shuffle], cols[shuffle])
    picked = np.random.default_rng(3).integers(0, n, 100)
    i = n // 2  # and `j` a stored column of row `i`
    j = int(S.indices[S.indptr[i]]) if S.indptr[i + 1] > S.indptr[i] else 0
    nnz_sum = (S + T).nnz
    return {
        "A + B": (
            lambda: S + T,
            lambda: A + B,
            jax.jit(lambda a, b: js.add(a, b, nnz=nnz_sum)),
            (A, B),
        ),
        "A @ B": (lambda: S @ T, lambda: A @ B, None, ()),
        "from_coo": (
            lambda: sp.coo_array((coo.data, (rows, cols)), shape=S.shape).tocsr(),
            lambda: js.CSRMatrix.from_coo(data, rows, cols, S.shape),
            jax.jit(lambda d, r, c: js.CSRMatrix.from_coo(d, r, c, S.shape, nnz=S.nnz)),
            (data, jnp.asarray(rows), jnp.asarray(cols)),
        ),
        "from_coo shuffled": (
            lambda: sp.coo_array((shuffled[0], shuffled[1:]), shape=S.shape).tocsr(),
            lambda: js.CSRMatrix.from_coo(jnp.asarray(shuffled[0]), *shuffled[1:], S.shape),
            jax.jit(lambda d, r, c: js.CSRMatrix.from_coo(d, r, c, S.shape, nnz=S.nnz)),
            tuple(map(jnp.asarray, shuffled)),
        ),
        "A.multiply(B)": (
            lambda: S.multiply(T),
            lambda: A.multiply(B),
            jax.jit(lambda a, b: a.multiply(b)),
            (A, B),
        ),
        "A.max()": (lambda: S.max(), lambda: A.max(), jax.jit(lambda a: a.max()), (A,)),
        "A.max(axis=1)": (
            lambda: S.max(axis=1),
            lambda: A.max(axis=1),
            jax.jit(lambda a: a.max(axis=1)),
            (A,),
        ),
        "A.min(axis=0)": (
            lambda: S.min(axis=0),
            lambda: A.min(axis=0),
            jax.jit(lambda a: a.min(axis=0)),
            (A,),
        ),
        "A[i, j]": (lambda: S[i, j], lambda: A[i, j], jax.jit(lambda a, i, j: a[i, j]), (A, i, j)),
        "A[i]": (lambda: S[i], lambda: A[i], jax.jit(lambda a, i: a[i]), (A, i)),
        "A.diagonal()": (
            lambda: S.diagonal(),
            lambda: A.diagonal(),
            jax.jit(lambda a: a.diagonal()),
            (A,),
        ),
        "A[:, cols] (100)": (lambda: S[:, picked], lambda: A[:, picked], None, ()),
        **{
            name: (lambda f=f: f(S), lambda f=f: f(A), jax.jit(f), (A,))
            for name, f in reductions().items()
        },
    }


def reductions():
    """Calls spelled alike on a scipy and a jaxsparse matrix: `{name: function}`."""
    import jax.numpy as jnp
    import scipy.sparse.linalg

    import jaxsparse as js

    def norm(matrix, ord=None):
        module = js.linalg if isinstance(matrix, js.CSRMatrix) else scipy.sparse.linalg
        return module.norm(matrix, ord)

    return {
        "A.sum()": lambda a: a.sum(),
        "A.sum(axis=0)": lambda a: a.sum(axis=0),
        "A.sum(axis=1)": lambda a: a.sum(axis=1),
        "A.mean(axis=1)": lambda a: a.mean(axis=1),
        "A.count_nonzero()": lambda a: a.count_nonzero(),
        "norm(A)": norm,
        "norm(A, 1)": lambda a: norm(a, 1),
        "norm(A, inf)": lambda a: norm(a, jnp.inf),
        "abs(A)": abs,
        "A * 2": lambda a: a * 2,
        "A.power(3)": lambda a: a.power(3),
    }


def measure(sizes: list[int], wanted: list[str] | None) -> dict:
    import jax

    jax.config.update("jax_enable_x64", True)
    results = {}
    for n in sizes:
        for name, (reference, eager, jitted, args) in cases(n).items():
            if wanted and not any(w in name for w in wanted):
                continue
            timing = dict(budget_s=1.0, min_repeats=9, max_repeats=200)
            row = {"eager": time_call(blocking(eager), **timing)["median_s"]}
            if jitted is not None:
                compiled = jax.jit(jitted).lower(*args).compile()
                row["jit"] = time_call(blocking(compiled, *args), **timing)["median_s"]
            row["scipy"] = time_call(reference, **timing)["median_s"]
            results[f"{n} {name}"] = row
    return results


def show(seconds) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--ops", help="comma-separated parts of case names to run")
    parser.add_argument("--baseline", help="a checkout of jaxsparse to compare against")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    wanted = options.ops.split(",") if options.ops else None
    if options.json:
        print(json.dumps(measure(options.sizes, wanted)))
        return
    import jax
    import numpy as np
    import scipy

    before = {}
    if options.baseline:
        command = [sys.executable, __file__, "--json", "--sizes", *map(str, options.sizes)]
        command += ["--ops", options.ops] if options.ops else []
        environment = dict(os.environ, PYTHONPATH=str(Path(options.baseline).resolve()))
        output = subprocess.run(command, env=environment, capture_output=True, text=True)
        if output.returncode:
            sys.exit(output.stderr)
        before = json.loads(output.stdout.splitlines()[-1])
    print(f"# {cpu_name()}, {os.cpu_count()} cpus; {uptime()}")
    print(f"# jax {jax.__version__}, numpy {np.__version__}, scipy {scipy.__version__}")
    print(f"# baseline: {options.baseline or 'none'}")
    after = measure(options.sizes, wanted)
    header = f"{'n':>7s} {'operation':18s} {'mode':5s} {'before':>10s} {'after':>10s}"
    print(f"{header} {'scipy':>10s} {'before/sp':>9s} {'after/sp':>9s} {'gain':>6s}")
    for key, row in after.items():
        n, name = key.split(" ", 1)
        for mode in ("eager", "jit"):
            if mode not in row:
                continue
            old = before.get(key, {}).get(mode)
            new, reference = row[mode], row["scipy"]
            ratios = [f"{t / reference:9.1f}" if t else f"{'-':>9s}" for t in (old, new)]
            gain = f"{old / new:6.1f}" if old else f"{'-':>6s}"
            print(
                f"{n:>7s} {name:18s} {mode:5s} {show(old):>10s} {show(new):>10s} "
                f"{show(reference):>10s} {ratios[0]} {ratios[1]} {gain}"
            )
    print(f"# {uptime()}")


if __name__ == "__main__":
    main()
