"""Eager products on small and medium matrices: what a scipy.sparse user calling `A @ x`
from Python waits for per call, where dispatch, not memory, sets the time.

Each result is checked against scipy's first. Then per call, the median of repeats after
warm-up calls (compilation out of the timed region): jaxsparse eager and inside `jax.jit`,
scipy.sparse, and `jax.experimental.sparse.BCSR` eager, for `A @ x`, `x @ A` and `A @ X`
(8 columns), float64, on a random CSR matrix with 5 entries a row and a tridiagonal DIA
matrix.

Run: `flock /tmp/jaxsparse-bench.lock python benchmarks/eager.py`
"""

import functools
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse
from jax.experimental import sparse as jsparse

sys.path.insert(0, str(Path(__file__).parent))
from timing import blocking, cpu_name, time_call, uptime  # noqa: E402

jax.config.update("jax_enable_x64", True)
import jaxsparse as js  # noqa: E402

SIZES = (100, 1_000, 10_000, 100_000)
PRODUCTS = {
    "A @ x": lambda a, x, xs: a @ x,
    "x @ A": lambda a, x, xs: x @ a,
    "A @ X": lambda a, x, xs: a @ xs,
}


def matrices(n: int, rng) -> dict:
    csr = scipy.sparse.random_array((n, n), density=5 / n, format="csr", rng=rng)
    bands = [rng.standard_normal(n - 1), rng.standard_normal(n), rng.standard_normal(n - 1)]
    dia = scipy.sparse.diags_array(bands, offsets=[-1, 0, 1]).todia()
    return {
        "CSR 5 a row": (csr, js.CSRMatrix.from_scipy(csr)),
        "DIA tridiagonal": (dia, js.DIAMatrix.from_scipy(dia)),
    }


def per_call_us(fn) -> float:
    return 1e6 * time_call(fn, budget_s=0.3, min_repeats=50, max_repeats=2000)["median_s"]


def main() -> None:
    print(f"# {cpu_name()}; jax {jax.__version__}; {uptime()}")
    print("# microseconds per call; ratio = jaxsparse eager / scipy")
    header = ("matrix", "rows", "product", "eager", "jit", "scipy", "BCSR eager", "ratio")
    print("{:>16} {:>7} {:>6} {:>8} {:>8} {:>8} {:>10} {:>6}".format(*header))
    rng = np.random.default_rng(0)
    for n in SIZES:
        x_host, xs_host = rng.standard_normal(n), rng.standard_normal((n, 8))
        x, xs = jnp.asarray(x_host), jnp.asarray(xs_host)
        for name, (host, ours) in matrices(n, rng).items():
            bcsr = jsparse.BCSR.from_scipy_sparse(host.tocsr())
            for label, product in PRODUCTS.items():
                jitted = jax.jit(product)
                expected = product(host, x_host, xs_host)
                np.testing.assert_allclose(jitted(ours, x, xs), expected, rtol=1e-10)
                times = (
                    per_call_us(blocking(product, ours, x, xs)),
                    per_call_us(blocking(jitted, ours, x, xs)),
                    per_call_us(functools.partial(product, host, x_host, xs_host)),
                    per_call_us(blocking(product, bcsr, x, xs)) if label != "x @ A" else np.nan,
                )
                row = (name, n, label, *times, times[0] / times[2])
                print("{:>16} {:>7} {:>6} {:8.1f} {:8.1f} {:8.1f} {:10.1f} {:6.2f}".format(*row))
    print(f"# {uptime()}")


if __name__ == "__main__":
    main()
