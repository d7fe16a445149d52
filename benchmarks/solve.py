"""Direct solves (float64): `js.linalg.spsolve` and `factorized` against scipy and
`jax.experimental.sparse.linalg.spsolve`, with the targets of issue 32 printed beside.

Sections, each result checked against scipy before it is timed, medians in ms:

- banded: DIA tridiagonal and pentadiagonal systems of `--rows` unknowns against
  `scipy.linalg.solve_banded` (target: scipy / jaxsparse >= 1.2), diagonally dominant
  (split over two threads) and not (one pass);
- csr: the 2-D 5-point Laplacian on a `--grid`^2 grid as CSR against scipy's `spsolve`
  (SuperLU) and `jax.experimental.sparse.linalg.spsolve` (target: jaxsparse / scipy
  <= 1.2);
- reuse: one factorization and 100 solves against 100 calls of `spsolve`, both formats
  (target >= 5x);
- wide: `factorized` of a 2-D grid's matrix as one DIA band (`--band-grid` and twice it),
  the factorization and solves of one and two columns, against scipy's `splu` (no target);
- gradient: a jitted gradient step (solve and adjoint solve, with respect to the values
  and `b`) against the jitted solve (target <= 2.2x), in single calls and per step inside a
  jitted loop (where XLA's buffers are reused: a single call's fresh buffers of more than
  glibc's 32 MB mmap threshold fault their pages in on every call);
- memory: resident memory over 3000 jitted calls that factor inside `jit` (enough to
  tell glibc's heap settling, which moves the figure by tens of MB, from growth);
- routes (not run by default): the banded gradient's two routes, kept factors and a second
  factorization from the values, at 2-10 x 10^5 rows, with the page faults of a call;
- host (not run by default; `make gpu-check` runs it): tridiagonal `spsolve` on JAX's
  default device (on a GPU cuSPARSE's `gtsv2`, `kernels/device_tridiagonal.py`) against the
  same solve on the host (LAPACK through a callback, a copy each way) and scipy, with the
  gradient step on the device, and a solve with `factorized`'s factors both ways.

Single calls are jitted functions called from Python (compilation outside the timed
region); "loop" is per solve inside one jitted `fori_loop` of 10 solves, each right-hand
side depending on the previous solution. Run from the repository, one benchmark at a
time: `flock /tmp/jaxsparse-bench.lock python benchmarks/solve.py [--quick]`.
"""

import argparse
import os
import resource
import sys
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.linalg  # noqa: E402
import scipy.sparse  # noqa: E402
import scipy.sparse.linalg  # noqa: E402
from jax.experimental import sparse as jsparse  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run  # noqa: E402
import timing  # noqa: E402

import jaxsparse as js  # noqa: E402

LOOP_SOLVES = 10


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="banded system size")
    parser.add_argument("--grid", type=int, default=400, help="side of the 2-D CSR grid")
    parser.add_argument(
        "--band-grid", type=int, default=100, help="side of the 2-D grid solved as a DIA band"
    )
    parser.add_argument(
        "--reuse-grid", type=int, default=150, help="side of the 2-D CSR grid of 100 solves"
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    # Memory first: resident memory is read while the process holds nothing else.
    parser.add_argument("--sections", default="memory,banded,csr,reuse,wide,gradient")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.grid, args.band_grid, args.reuse_grid = 2000, 20, 10, 10
    return args


def _ms(fn, quick: bool) -> float:
    budget = 0.2 if quick else 3.0
    return 1e3 * timing.time_call(fn, budget_s=budget, min_repeats=3, max_repeats=31)["median_s"]


def _rel_error(x, expected) -> float:
    return float(np.max(np.abs(np.asarray(x) - expected)) / np.max(np.abs(expected)))


def _checked(x, expected, what: str) -> float:
    error = _rel_error(x, expected)
    if not error < 1e-8:
        raise AssertionError(f"{what}: relative error {error:.2e} against scipy")
    return error


def _loop_solve(solve):
    """`LOOP_SOLVES` chained solves in one jitted loop: b <- b + 1e-3 x."""

    def loop(A, b):
        def body(_, carry):
            return b + 1e-3 * solve(A, carry)

        return jax.lax.fori_loop(0, LOOP_SOLVES, body, b)

    return jax.jit(loop)


def banded_dia(n: int, offsets, rng, dominant: bool = True) -> js.DIAMatrix:
    """A random DIA matrix with `offsets` (0 among them): diagonally dominant by rows (the
    main diagonal's magnitude exceeds the rest of its row's by 0.5), or with 2 * ndiag added
    to a random main diagonal (dominant at most rows, not all: solved in one pass)."""
    data = rng.standard_normal((len(offsets), n))
    main = offsets.index(0)
    if dominant:
        rows = np.zeros(n)
        for values, offset in zip(data, offsets, strict=True):
            if offset != 0:  # data[d, j] = A[j - offset, j]
                rows[max(0, -offset) : n - max(0, offset)] += np.abs(
                    values[max(0, offset) : n + min(0, offset)]
                )
        data[main] = np.where(data[main] < 0, -1, 1) * (rows + 0.5)
    else:
        data[main] += 2 * len(offsets)
    return js.DIAMatrix(jnp.asarray(data), offsets, (n, n))


def scipy_band(A: js.DIAMatrix, kl: int, ku: int) -> np.ndarray:
    """`A`'s diagonals as `scipy.linalg.solve_banded` takes them, the highest first."""
    return np.asarray([np.asarray(A.data)[A.offsets.index(o)] for o in range(ku, -kl - 1, -1)])


def laplacian_2d(side: int) -> scipy.sparse.csr_array:
    """The 5-point Laplacian on a side x side grid plus a small nonsymmetric drift."""
    line = scipy.sparse.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(side, side))
    drift = scipy.sparse.diags_array([-0.1, 0.1], offsets=[-1, 1], shape=(side, side))
    eye = scipy.sparse.eye_array(side)
    return scipy.sparse.csr_array(
        scipy.sparse.kron(line + drift, eye) + scipy.sparse.kron(eye, line)
    )


def banded_section(args, rng) -> list[str]:
    lines = [f"banded DIA, n = {args.rows}: scipy.linalg.solve_banded / jaxsparse >= 1.2"]
    lines.append(f"{'matrix':>16} {'scipy':>9} {'ours':>9} {'ours loop':>10} {'ratio':>7} error")
    solve = jax.jit(js.linalg.spsolve)
    loop = _loop_solve(js.linalg.spsolve)
    cases = (
        ("tridiagonal", (-1, 0, 1), True),
        ("pentadiagonal", (-2, -1, 0, 1, 2), True),
        ("tri, not dom.", (-1, 0, 1), False),
        ("penta, not dom.", (-2, -1, 0, 1, 2), False),
    )
    for name, offsets, dominant in cases:
        A = banded_dia(args.rows, offsets, rng, dominant)
        b = jnp.asarray(rng.standard_normal(args.rows))
        kl = ku = max(offsets)
        ab = scipy_band(A, kl, ku)
        b_host = np.asarray(b)
        expected = scipy.linalg.solve_banded((kl, ku), ab, b_host)
        error = _checked(solve(A, b), expected, name)
        loop(A, b).block_until_ready()
        scipy_ms = _ms(
            lambda kl=kl, ku=ku, ab=ab, b_host=b_host: scipy.linalg.solve_banded(
                (kl, ku), ab, b_host
            ),
            args.quick,
        )
        ours_ms = _ms(timing.blocking(solve, A, b), args.quick)
        loop_ms = _ms(timing.blocking(loop, A, b), args.quick) / LOOP_SOLVES
        lines.append(
            f"{name:>16} {scipy_ms:9.2f} {ours_ms:9.2f} {loop_ms:10.2f} "
            f"{scipy_ms / ours_ms:7.2f} {error:.1e}"
        )
    return lines


def csr_section(args, rng) -> list[str]:
    S = laplacian_2d(args.grid)
    n = S.shape[0]
    lines = [f"CSR 2-D 5-point, n = {n}: jaxsparse / scipy spsolve <= 1.2"]
    A = js.CSRMatrix.from_scipy(S)
    b = jnp.asarray(rng.standard_normal(n))
    b_host = np.asarray(b)
    S_csc = S.tocsc()
    expected = scipy.sparse.linalg.spsolve(S_csc, b_host)
    solve = jax.jit(js.linalg.spsolve)
    error = _checked(solve(A, b), expected, "jaxsparse csr")
    scipy_ms = _ms(lambda: scipy.sparse.linalg.spsolve(S_csc, b_host), args.quick)
    scipy_csr_ms = _ms(lambda: scipy.sparse.linalg.spsolve(S, b_host), args.quick)
    ours_ms = _ms(timing.blocking(solve, A, b), args.quick)
    loop = _loop_solve(js.linalg.spsolve)
    loop(A, b).block_until_ready()
    loop_ms = _ms(timing.blocking(loop, A, b), args.quick) / LOOP_SOLVES
    lines.append(f"{'system':>28} {'ms':>9} {'/ scipy':>8} error")
    lines.append(f"{'scipy spsolve (CSC)':>28} {scipy_ms:9.2f} {1:8.2f}")
    lines.append(
        f"{'scipy spsolve (CSR input)':>28} {scipy_csr_ms:9.2f} {scipy_csr_ms / scipy_ms:8.2f}"
    )
    lines.append(f"{'jaxsparse':>28} {ours_ms:9.2f} {ours_ms / scipy_ms:8.2f} {error:.1e}")
    lines.append(f"{'jaxsparse (loop, per solve)':>28} {loop_ms:9.2f} {loop_ms / scipy_ms:8.2f}")
    bcsr = jsparse.BCSR.from_scipy_sparse(S)
    jax_solve = jax.jit(lambda data, b: jsparse.linalg.spsolve(data, bcsr.indices, bcsr.indptr, b))
    try:
        jax_error = _checked(jax_solve(bcsr.data, b), expected, "jax.experimental spsolve")
    except Exception as failure:  # noqa: BLE001 (report what jax's solver does, and go on)
        lines.append(f"{'jax.experimental spsolve':>28} failed: {type(failure).__name__}")
    else:
        jax_ms = _ms(timing.blocking(jax_solve, bcsr.data, b), args.quick)
        lines.append(
            f"{'jax.experimental spsolve':>28} {jax_ms:9.2f} {jax_ms / scipy_ms:8.2f} "
            f"{jax_error:.1e}"
        )
    return lines


def reuse_section(args, rng) -> list[str]:
    lines = ["factorize once + 100 solves vs 100 spsolve calls: >= 5x"]
    lines.append(f"{'matrix':>14} {'100 spsolve':>12} {'factor+100':>11} {'speedup':>8}")
    systems = {
        "dia-5-point": laplacian_2d(args.band_grid),
        "csr-5-point": laplacian_2d(args.reuse_grid),
    }
    solve = jax.jit(js.linalg.spsolve)
    factor = jax.jit(js.linalg.factorized)
    solve_with = jax.jit(lambda f, b: f.solve(b))
    for name, S in systems.items():
        A = (js.DIAMatrix if name.startswith("dia") else js.CSRMatrix).from_scipy(S)
        bs = jnp.asarray(rng.standard_normal((100, S.shape[0])))
        expected = scipy.sparse.linalg.spsolve(S.tocsc(), np.asarray(bs[0]))
        _checked(solve_with(factor(A), bs[0]), expected, name)
        _checked(solve(A, bs[0]), expected, name)

        def repeated(A=A, bs=bs):
            return [solve(A, b) for b in bs]

        def reused(A=A, bs=bs):
            factors = factor(A)
            return [solve_with(factors, b) for b in bs]

        many_ms = _ms(lambda: jax.block_until_ready(repeated()), True)
        reuse_ms = _ms(lambda: jax.block_until_ready(reused()), True)
        lines.append(f"{name:>14} {many_ms:12.1f} {reuse_ms:11.1f} {many_ms / reuse_ms:8.1f}")
    return lines


def wide_section(args, rng) -> list[str]:
    """`factorized` of a DIA matrix whose band is as wide as a 2-D grid's side (the banded
    LU at run-time bandwidths) against scipy's `splu` (SuperLU, fill-reducing ordering)."""
    lines = ["factorized, 2-D Laplacian as one DIA band, against scipy splu (ms)"]
    lines.append(
        f"{'side':>6} {'factor':>8} {'splu':>8} {'solve 1':>8} {'splu 1':>8} {'solve 2':>8} "
        f"{'splu 2':>8}"
    )
    for side in (args.band_grid, 2 * args.band_grid):
        times = _wide_band_times(laplacian_2d(side), rng, args.quick)
        lines.append(f"{side:>6} " + " ".join(f"{t:8.2f}" for t in times))
    return lines


def _wide_band_times(S, rng, quick: bool) -> list[float]:
    """Factorization, then solves of one and two columns: ours, then scipy's, each."""
    factor = jax.jit(js.linalg.factorized)
    solve_with = jax.jit(lambda f, b: f.solve(b))
    A = js.DIAMatrix.from_scipy(S.todia())
    factors = factor(A)
    lu = scipy.sparse.linalg.splu(S.tocsc())
    times = [
        _ms(lambda: jax.block_until_ready(factor(A)), quick),
        _ms(lambda: scipy.sparse.linalg.splu(S.tocsc()), quick),
    ]
    for k in (1, 2):
        b = rng.standard_normal((S.shape[0], k)).squeeze()
        device_b = jnp.asarray(b)
        _checked(solve_with(factors, device_b), lu.solve(b), f"{S.shape[0]} rows, {k} columns")
        times.append(_ms(lambda b=device_b: solve_with(factors, b).block_until_ready(), quick))
        times.append(_ms(lambda b=b: lu.solve(b), quick))
    return times


def _loop_gradient(gradient):
    """`LOOP_SOLVES` chained gradient steps in one jitted loop: b <- b + 1e-3 db, with a slot
    of the values' gradient added so that it is computed."""

    def loop(data, b):
        def body(_, carry):
            ddata, db = gradient(data, carry)
            return carry + 1e-3 * db + 1e-9 * ddata.ravel()[0]

        return jax.lax.fori_loop(0, LOOP_SOLVES, body, b)

    return jax.jit(loop)


def gradient_section(args, rng) -> list[str]:
    lines = [
        "gradient step (solve + adjoint) / solve <= 2.2; single calls, then per step inside "
        f"a jitted loop of {LOOP_SOLVES}"
    ]
    header = f"{'matrix':>14} {'solve':>9} {'gradient':>9} {'ratio':>7}"
    lines.append(f"{header} {'loop solve':>11} {'loop grad':>10} {'ratio':>7}")
    systems = {
        "dia-tridiagonal": banded_dia(args.rows, (-1, 0, 1), rng),
        "dia-5-point": js.DIAMatrix.from_scipy(laplacian_2d(args.band_grid)),
        "csr-5-point": js.CSRMatrix.from_scipy(laplacian_2d(args.grid)),
    }
    for name, A in systems.items():
        b = jnp.asarray(rng.standard_normal(A.shape[0]))
        solve = jax.jit(lambda data, b, A=A: js.linalg.spsolve(A.with_data(data), b))

        def loss(data, b, A=A):
            return jnp.sum(js.linalg.spsolve(A.with_data(data), b) ** 2)

        step = jax.grad(loss, argnums=(0, 1))
        gradient = jax.jit(step)
        loops = (
            _loop_solve(lambda data, b, A=A: js.linalg.spsolve(A.with_data(data), b)),
            _loop_gradient(step),
        )
        jax.block_until_ready((solve(A.data, b), gradient(A.data, b)))
        jax.block_until_ready([loop(A.data, b) for loop in loops])
        solve_ms = _ms(timing.blocking(solve, A.data, b), args.quick)
        gradient_ms = _ms(timing.blocking(gradient, A.data, b), args.quick)
        loop_solve, loop_gradient = (
            _ms(timing.blocking(loop, A.data, b), args.quick) / LOOP_SOLVES for loop in loops
        )
        lines.append(
            f"{name:>14} {solve_ms:9.2f} {gradient_ms:9.2f} {gradient_ms / solve_ms:7.2f} "
            f"{loop_solve:11.2f} {loop_gradient:10.2f} {loop_gradient / loop_solve:7.2f}"
        )
    lines += _jax_gradient_line(laplacian_2d(args.grid), args, rng)
    return lines


def _jax_gradient_line(S, args, rng) -> list[str]:
    """The same for `jax.experimental.sparse.linalg.spsolve` (CSR), where it runs."""
    bcsr = jsparse.BCSR.from_scipy_sparse(S)
    b = jnp.asarray(rng.standard_normal(S.shape[0]))

    def solve(data, b):
        return jsparse.linalg.spsolve(data, bcsr.indices, bcsr.indptr, b)

    def loss(data, b):
        return jnp.sum(solve(data, b) ** 2)

    step = jax.grad(loss, argnums=(0, 1))
    loops = (_loop_solve(solve), _loop_gradient(step))
    solve, gradient = jax.jit(solve), jax.jit(step)
    try:
        jax.block_until_ready((solve(bcsr.data, b), gradient(bcsr.data, b)))
        jax.block_until_ready([loop(bcsr.data, b) for loop in loops])
    except Exception as failure:  # noqa: BLE001 (report what jax's solver does, and go on)
        return [f"{'jax.exp. csr':>14} failed: {type(failure).__name__}"]
    solve_ms = _ms(timing.blocking(solve, bcsr.data, b), args.quick)
    gradient_ms = _ms(timing.blocking(gradient, bcsr.data, b), args.quick)
    loop_solve, loop_gradient = (
        _ms(timing.blocking(loop, bcsr.data, b), args.quick) / LOOP_SOLVES for loop in loops
    )
    return [
        f"{'jax.exp. csr':>14} {solve_ms:9.2f} {gradient_ms:9.2f} {gradient_ms / solve_ms:7.2f} "
        f"{loop_solve:11.2f} {loop_gradient:10.2f} {loop_gradient / loop_solve:7.2f}"
    ]


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def memory_section(args, rng) -> list[str]:
    calls = 90 if args.quick else 3000
    side = 20 if args.quick else 100
    S = laplacian_2d(side)
    checkpoints = (1, calls // 30, calls // 6, calls // 3, 2 * calls // 3, calls)
    lines = [
        f"resident memory [MB] over {calls} jitted calls that factor inside jit, n = {S.shape[0]}"
    ]
    lines.append(f"{'matrix':>14} " + " ".join(f"{c:>8}" for c in checkpoints))
    b = jnp.asarray(rng.standard_normal(S.shape[0]))
    for name, A in (
        ("dia-5-point", js.DIAMatrix.from_scipy(S)),
        ("csr-5-point", js.CSRMatrix.from_scipy(S)),
    ):
        step = jax.jit(lambda data, b, A=A: js.linalg.factorized(A.with_data(data)).solve(b))
        data = A.data
        marks = {}
        for call in range(1, calls + 1):
            data = data * (1 + 1e-9)
            step(data, b).block_until_ready()
            if call in checkpoints:
                marks[call] = _rss_mb()
        lines.append(f"{name:>14} " + " ".join(f"{marks[c]:8.1f}" for c in sorted(marks)))
    return lines


def routes_section(args, rng) -> list[str]:
    """Both routes of a banded gradient at several sizes: the kept factors and factoring
    A^T again from the values (`_banded_one_pass.keeps_factors` picks one by size)."""
    from jaxsparse.linalg import _banded_one_pass

    lines = [
        "gradient / solve by route; single calls (minor page faults a gradient call), then "
        f"per step inside a jitted loop of {LOOP_SOLVES}"
    ]
    lines.append(
        f"{'rows':>9} {'band':>5} {'route':>7} {'solve':>7} {'grad':>7} {'ratio':>6} "
        f"{'faults':>7} {'loop solve':>10} {'loop grad':>10} {'ratio':>6}"
    )
    sizes = (2000, 4000) if args.quick else (200_000, 400_000, 700_000, 1_000_000)
    default = _banded_one_pass.KEPT_BYTES
    for n in sizes:
        for offsets in ((-1, 0, 1), (-2, -1, 0, 1, 2)):
            A = banded_dia(n, offsets, rng)
            b = jnp.asarray(rng.standard_normal(n))
            for route, limit in (("kept", 1 << 62), ("values", 0)):
                _banded_one_pass.KEPT_BYTES = limit
                try:
                    lines.append(_route_line(A, b, n, len(offsets), route, args))
                finally:
                    _banded_one_pass.KEPT_BYTES = default
    return lines


def host_section(args, rng) -> list[str]:
    from jaxsparse.kernels import native_banded_lu

    device = jax.devices()[0].device_kind
    lines = [
        f"tridiagonal spsolve, n = {args.rows}, on {device}: the host route (LAPACK through a "
        "callback) / ours; gradient step / solve; a solve with `factorized`'s factors, "
        "made once, and the same solve on the host"
    ]
    lines.append(
        f"{'matrix':>14} {'scipy':>9} {'ours':>9} {'host':>9} {'host/ours':>10} "
        f"{'gradient':>9} {'ratio':>6} {'factored':>9} {'host':>9} error"
    )
    offsets = (-1, 0, 1)
    solve = jax.jit(js.linalg.spsolve)
    on_host = jax.jit(
        lambda A, b: native_banded_lu.banded_solve(A.data, b[:, None], offsets=offsets, host=True)
    )
    gradient = jax.jit(jax.grad(lambda A, b: jnp.sum(js.linalg.spsolve(A, b) ** 2), argnums=(0, 1)))
    factored = jax.jit(lambda F, b: F.solve(b))
    factored_on_host = jax.jit(
        lambda F, b: native_banded_lu.banded_lu_solve(
            F.band, F.pivots, F.matrix.data, b[:, None], offsets=offsets, kl=1, ku=1, host=True
        )
    )
    for name, dominant in (("dominant", True), ("not dominant", False)):
        A = banded_dia(args.rows, offsets, rng, dominant)
        b = jnp.asarray(rng.standard_normal(args.rows))
        ab = scipy_band(A, 1, 1)
        b_host = np.asarray(b)
        expected = scipy.linalg.solve_banded((1, 1), ab, b_host)
        error = _checked(solve(A, b), expected, name)
        _checked(on_host(A, b)[:, 0], expected, f"{name} on the host")
        jax.block_until_ready(gradient(A, b))
        F = js.linalg.factorized(A)
        _checked(factored(F, b), expected, f"{name}, factored")
        _checked(factored_on_host(F, b)[:, 0], expected, f"{name}, factored on the host")
        scipy_ms = _ms(
            lambda ab=ab, b_host=b_host: scipy.linalg.solve_banded((1, 1), ab, b_host), args.quick
        )
        ours_ms = _ms(timing.blocking(solve, A, b), args.quick)
        host_ms = _ms(timing.blocking(on_host, A, b), args.quick)
        gradient_ms = _ms(timing.blocking(gradient, A, b), args.quick)
        factored_ms = _ms(timing.blocking(factored, F, b), args.quick)
        factored_host_ms = _ms(timing.blocking(factored_on_host, F, b), args.quick)
        lines.append(
            f"{name:>14} {scipy_ms:9.2f} {ours_ms:9.2f} {host_ms:9.2f} {host_ms / ours_ms:10.2f} "
            f"{gradient_ms:9.2f} {gradient_ms / ours_ms:6.2f} {factored_ms:9.2f} "
            f"{factored_host_ms:9.2f} {error:.1e}"
        )
    return lines


def _route_line(A, b, n, band, route, args) -> str:
    def solve(data, b):
        return js.linalg.spsolve(A.with_data(data), b)

    step = jax.grad(lambda data, b: jnp.sum(solve(data, b) ** 2), argnums=(0, 1))
    single, gradient = jax.jit(solve), jax.jit(step)
    loops = (_loop_solve(solve), _loop_gradient(step))
    jax.block_until_ready((single(A.data, b), gradient(A.data, b)))
    jax.block_until_ready([loop(A.data, b) for loop in loops])
    solve_ms = _ms(timing.blocking(single, A.data, b), args.quick)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        jax.block_until_ready(gradient(A.data, b))
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10
    gradient_ms = _ms(timing.blocking(gradient, A.data, b), args.quick)
    loop_solve, loop_gradient = (
        _ms(timing.blocking(loop, A.data, b), args.quick) / LOOP_SOLVES for loop in loops
    )
    return (
        f"{n:>9} {band:>5} {route:>7} {solve_ms:7.2f} {gradient_ms:7.2f} "
        f"{gradient_ms / solve_ms:6.2f} {faults:7.0f} {loop_solve:10.2f} {loop_gradient:10.2f} "
        f"{loop_gradient / loop_solve:6.2f}"
    )


SECTIONS = {
    "banded": banded_section,
    "csr": csr_section,
    "reuse": reuse_section,
    "wide": wide_section,
    "gradient": gradient_section,
    "memory": memory_section,
    "routes": routes_section,
    "host": host_section,
}


def main(argv=None) -> str:
    args = parse_args(argv)
    env = run.environment()
    bandwidth = timing.streaming_bandwidth(
        bytes_per_array=10_000_000 if args.quick else 100_000_000
    )
    lines = [
        f"# {env['date']} {env['machine']}; jax {env['jax']}, scipy {env['scipy']}",
        f"# numpy streaming bandwidth {bandwidth['numpy_add_gbs']:.1f} GB/s; float64",
        f"# load before: {os.getloadavg()}",
    ]
    print("\n".join(lines), flush=True)
    rng = np.random.default_rng(0)
    for section in args.sections.split(","):
        section_lines = ["", *SECTIONS[section](args, rng)]
        print("\n".join(section_lines), flush=True)
        lines += section_lines
    lines.append(f"# load after: {os.getloadavg()}")
    print(lines[-1], flush=True)
    return "\n".join(lines)


if __name__ == "__main__":
    main()
