"""Eigenvalues, exponentials and preconditioned solves against scipy, float64, one run.

The issues' targets, each printed as a ratio against scipy measured in the same run:

1. `eigsh`, 6 largest (LA) and 6 smallest (SA) eigenvalues of a 2-D 5-point Laplacian,
   against ARPACK (`scipy.sparse.linalg.eigsh`; target: within 1.5x of its time).
2. `expm_multiply` of a complex 5-diagonal Hamiltonian, `exp(-i t H) psi`, against
   `scipy.sparse.linalg.expm_multiply` on CSR (target: 1.5x faster).
3. CG on a 3-D variable-coefficient 7-point problem to a relative residual of 1e-8, with
   and without ILU(0) (target: 3x fewer iterations and faster in wall time); scipy's
   unpreconditioned CG for reference, and `js.linalg.cg` and JAX's CG on
   `jax.experimental.sparse` products beside it. On an accelerator (`make gpu-check` runs this
   section) ILU(0) runs its level-scheduled sweeps, and one more line times the host
   fallback: the native sweeps on the CPU with the copies both ways.

Medians of single calls with compilation outside the timed region (each call is a whole
solve). Run: `flock /tmp/jaxsparse-bench.lock python benchmarks/eigen.py [--small]
[--only eigsh|svd|expm|cg|solvers|eigs]`.

4. `svds` and `norm(A, 2)` of a random tall CSR matrix against scipy's (no target).
5. `lsqr` and `lsmr` of a random tall CSR matrix, and `minres` of an indefinite shifted
   2-D Laplacian, against scipy's (no target): the same number of steps, so the ratio is
   the cost of a step.
6. `eigs`, the 6 largest in magnitude of a random non-normal CSR matrix, and by
   shift-invert the 6 nearest 0 of a 2-D convection-diffusion operator (CSR: SuperLU, as
   scipy; DIA: the banded LU), against ARPACK's (no target).
"""

import argparse
import os
import pathlib
import platform
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.linalg as sla  # noqa: E402
from timing import blocking, streaming_bandwidth  # noqa: E402

import jaxsparse as js  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "examples"))
from diffusion_ilu import diffusion_3d, pcg  # noqa: E402


def laplacian_2d(rows: int, cols: int):
    """The 5-point Laplacian on a `rows x cols` grid (equal sides: double eigenvalues
    `l_i + l_j`, `i != j`, every copy of which `eigsh` must return)."""

    def second(side):
        return sp.diags_array(
            [-np.ones(side - 1), 2 * np.ones(side), -np.ones(side - 1)], offsets=[-1, 0, 1]
        )

    return (
        sp.kron(second(rows), sp.eye_array(cols)) + sp.kron(sp.eye_array(rows), second(cols))
    ).todia()


def hamiltonian_5(n: int, rng):
    """A Hermitian 5-diagonal `H`: random on-site energies, complex hoppings to 1 and 2."""
    near = np.exp(1j * rng.uniform(0, 2 * np.pi, n - 1))
    far = 0.3 * np.exp(1j * rng.uniform(0, 2 * np.pi, n - 2))
    onsite = rng.uniform(-1, 1, n).astype(complex)
    return sp.diags_array(
        [far.conj(), near.conj(), onsite, near, far], offsets=[-2, -1, 0, 1, 2]
    ).todia()


def machine() -> str:
    model = platform.processor()
    if os.path.exists("/proc/cpuinfo"):
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    bandwidth = streaming_bandwidth()["numpy_add_gbs"]
    return (
        f"{model}, {os.cpu_count()} cores, numpy streaming {bandwidth:.1f} GB/s, "
        f"JAX {jax.__version__}"
    )


def measure(fn, repeats: int) -> dict:
    """The median of `repeats` calls of `fn`, which every caller has already run once (to
    compile it and check its result), so no call here compiles."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return {"median_s": float(np.median(times))}


def row(name, ours, theirs, note=""):
    ratio = theirs / ours
    print(f"| {name} | {ours * 1e3:.1f} | {theirs * 1e3:.1f} | {ratio:.2f}x | {note} |")


def eigsh_rows(rows: int, cols: int):
    S = laplacian_2d(rows, cols)
    A = js.DIAMatrix.from_scipy(S)
    v0 = np.random.default_rng(0).standard_normal(S.shape[0])
    for which in ("LA", "SA"):
        # One timed call each (a whole solve takes seconds to minutes); ours is compiled
        # ahead, and ARPACK's result is the reference.
        ours = (
            jax.jit(lambda A, v0, which=which: js.linalg.eigsh(A, 6, which=which, v0=v0, tol=1e-10))
            .lower(A, v0)
            .compile()
        )
        start = time.perf_counter()
        w = jax.block_until_ready(ours(A, v0))[0]
        ours_s = time.perf_counter() - start
        start = time.perf_counter()
        reference = sla.eigsh(S, 6, which=which, v0=v0, tol=1e-10)[0]
        scipy_s = time.perf_counter() - start
        error = np.max(np.abs(np.sort(np.asarray(w)) - np.sort(reference)) / np.abs(reference))
        row(
            f"eigsh {which}, 6 of {S.shape[0]} (5-point, {rows} x {cols})",
            ours_s,
            scipy_s,
            f"max rel. eigenvalue difference {error:.1e}; one call each",
        )


def convection_diffusion_2d(side: int, wind: float = 20.0):
    """`-Laplacian + wind * d/dx` on a `side x side` grid, upwind differences: a real
    matrix with complex eigenvalues."""
    h = 1.0 / (side + 1)
    second = (
        sp.diags_array(
            [-np.ones(side - 1), 2 * np.ones(side), -np.ones(side - 1)], offsets=[-1, 0, 1]
        )
        / h**2
    )
    upwind = sp.diags_array([-np.ones(side - 1), np.ones(side)], offsets=[-1, 0]) * (wind / h)
    eye = sp.eye_array(side)
    return (sp.kron(eye, second + upwind) + sp.kron(second, eye)).todia()


def random_general(n: int, rng):
    """A random sparse matrix (8 entries a row) on a diagonal spread over [1, 2]: not
    normal, with its largest eigenvalues separated."""
    random = sp.random_array((n, n), density=8 / n, rng=rng, format="csr")
    return (random + sp.diags_array(np.linspace(1.0, 2.0, n))).tocsr()


def eigs_rows(side: int, n: int):
    rng = np.random.default_rng(0)
    flow = convection_diffusion_2d(side)
    cases = (
        ("largest magnitude", random_general(n, rng), "csr", None),
        ("nearest 0 (shift-invert)", flow.tocsr(), "csr", 0.0),
        ("nearest 0 (shift-invert)", flow, "dia", 0.0),
    )
    for mode, S, fmt, sigma in cases:
        A = js.CSRMatrix.from_scipy(S) if fmt == "csr" else js.DIAMatrix.from_scipy(S)
        v0 = rng.standard_normal(S.shape[0])
        # One timed call each, as for `eigsh`; ours compiled ahead.
        ours = (
            jax.jit(lambda A, v0, sigma=sigma: js.linalg.eigs(A, 6, sigma=sigma, v0=v0, tol=1e-10))
            .lower(A, v0)
            .compile()
        )
        start = time.perf_counter()
        w = np.asarray(jax.block_until_ready(ours(A, v0))[0])
        ours_s = time.perf_counter() - start
        start = time.perf_counter()
        reference = sla.eigs(S, 6, sigma=sigma, v0=v0, tol=1e-10)[0]
        scipy_s = time.perf_counter() - start
        error = max(np.min(np.abs(w - value)) / np.abs(value) for value in reference)
        row(
            f"eigs {mode}, 6 of {S.shape[0]} ({fmt.upper()})",
            ours_s,
            scipy_s,
            f"max rel. eigenvalue difference {error:.1e}; one call each",
        )


def svd_rows(m: int, n: int, repeats: int):
    """`svds` (6 largest) and `norm(A, 2)` of a random tall CSR matrix with 10 entries a row,
    against ARPACK's `svds` and scipy's `norm(A, 2)` (`svds` with LOBPCG)."""
    S = sp.random_array((m, n), density=10 / n, format="csr", rng=np.random.default_rng(2))
    A = js.CSRMatrix.from_scipy(S)

    @jax.jit
    def singular_values(data):
        return js.linalg.svds(A.with_data(data), 6, return_singular_vectors=False)

    spectral = jax.jit(lambda A: js.linalg.norm(A, 2))
    ours = jax.block_until_ready(singular_values(A.data))
    reference = sla.svds(S, 6, return_singular_vectors=False)
    error = np.max(np.abs(np.asarray(ours) - np.sort(reference)) / np.max(reference))
    row(
        f"svds, 6 largest of {m} x {n} (10 a row)",
        measure(lambda: jax.block_until_ready(singular_values(A.data)), repeats)["median_s"],
        measure(lambda: sla.svds(S, 6, return_singular_vectors=False), repeats)["median_s"],
        f"max rel. difference {error:.1e}",
    )
    top = float(jax.block_until_ready(spectral(A)))
    reference = sla.norm(S, 2)
    row(
        "norm(A, 2), same matrix",
        measure(lambda: jax.block_until_ready(spectral(A)), repeats)["median_s"],
        measure(lambda: sla.norm(S, 2), repeats)["median_s"],
        f"rel. difference {abs(top - reference) / reference:.1e}; scipy: svds with LOBPCG",
    )


def expm_rows(n: int, repeats: int):
    rng = np.random.default_rng(1)
    H = hamiltonian_5(n, rng)
    psi = rng.standard_normal(n) + 1j * rng.standard_normal(n)
    psi /= np.linalg.norm(psi)
    A = js.DIAMatrix.from_scipy((-1j * H).todia())
    t = 2.0

    # Eager: the norm is computed on the host each call (as scipy does), the Taylor steps
    # run as one compiled program.
    def ours(A, psi):
        return js.linalg.expm_multiply(A, psi, t)

    # Jitted: the norm bound is given (the exact shifted 1-norm, as the eager call finds).
    bound = t * float(js.linalg._expm_multiply.shifted_one_norm(A))
    jitted = jax.jit(lambda A, psi: js.linalg.expm_multiply(A, psi, t, norm_bound=bound))
    psi_device = jnp.asarray(psi)
    jax.block_until_ready(jitted(A, psi_device))
    out = ours(A, psi)
    csr = (-1j * t * H).tocsr()
    reference = sla.expm_multiply(csr, psi)
    error = np.linalg.norm(np.asarray(out) - reference) / np.linalg.norm(reference)
    ours_s = measure(blocking(ours, A, psi), repeats)["median_s"]
    jitted_s = measure(blocking(jitted, A, psi_device), repeats)["median_s"]
    scipy_s = measure(lambda: sla.expm_multiply(csr, psi), repeats)["median_s"]
    row(
        f"expm_multiply, complex 5-diagonal, {n} rows, t = {t}",
        ours_s,
        scipy_s,
        f"rel. difference {error:.1e}; eager (norm computed per call, numpy psi)",
    )
    row(
        f"expm_multiply, complex 5-diagonal, {n} rows, t = {t}, jitted",
        jitted_s,
        scipy_s,
        "norm_bound given, psi on the device",
    )


def solver_rows(m: int, n: int, side: int, repeats: int):
    """`lsqr` and `lsmr` of a random tall CSR matrix with 10 entries a row (tolerances
    1e-8), and 2000 steps of `minres` on a 2-D 5-point Laplacian shifted into its spectrum
    (indefinite), jitted, against scipy's; iterations from both."""
    rng = np.random.default_rng(3)
    S = sp.random_array((m, n), density=10 / n, format="csr", rng=rng)
    A = js.CSRMatrix.from_scipy(S)
    b = rng.standard_normal(m)
    b_device = jnp.asarray(b)
    tolerances = {"atol": 1e-8, "btol": 1e-8}
    for name, limit in (("lsqr", "iter_lim"), ("lsmr", "maxiter")):
        ours = getattr(js.linalg, name)
        theirs = getattr(sla, name)
        solve = jax.jit(
            lambda A, b, ours=ours, limit=limit: ours(A, b, **tolerances, **{limit: 4 * n})
        )
        x, istop, itn = jax.block_until_ready(solve(A, b_device))[:3]
        reference = theirs(S, b, **tolerances, **{limit: 4 * n})
        error = np.linalg.norm(np.asarray(x) - reference[0]) / np.linalg.norm(reference[0])
        row(
            f"{name}, {m} x {n} (10 a row), atol = btol = 1e-8",
            measure(blocking(solve, A, b_device), repeats)["median_s"],
            measure(
                lambda theirs=theirs, limit=limit: theirs(S, b, **tolerances, **{limit: 4 * n}),
                repeats,
            )["median_s"],
            f"{int(itn)} iterations (scipy {reference[2]}), istop {int(istop)} (scipy "
            f"{reference[1]}); rel. difference {error:.1e}",
        )
    # MINRES stops on other tests than scipy's (which stops on its own estimates), so both
    # take the same number of steps, none converging: the ratio is the cost of a step.
    L = laplacian_2d(side, side)
    shift = 0.5  # inside the spectrum (0, 8), on no eigenvalue: indefinite
    H = js.DIAMatrix.from_scipy(L)
    rhs = rng.standard_normal(L.shape[0])
    rhs_device = jnp.asarray(rhs)
    steps = 2000
    solve = jax.jit(lambda H, r: js.linalg.minres(H, r, rtol=1e-14, shift=shift, maxiter=steps))
    x, info = jax.block_until_ready(solve(H, rhs_device))
    shifted = (L - shift * sp.eye_array(L.shape[0])).tocsr()
    scipy_x = sla.minres(L.tocsr(), rhs, rtol=1e-14, shift=shift, maxiter=steps)[0]
    residuals = [
        np.linalg.norm(rhs - shifted @ np.asarray(solution)) / np.linalg.norm(rhs)
        for solution in (x, scipy_x)
    ]
    row(
        f"minres, 5-point {side} x {side} shifted by {shift:g} (indefinite), {steps} steps",
        measure(blocking(solve, H, rhs_device), repeats)["median_s"],
        measure(
            lambda: sla.minres(L.tocsr(), rhs, rtol=1e-14, shift=shift, maxiter=steps), repeats
        )["median_s"],
        f"info {int(info)}, rel. residual {residuals[0]:.1e} (scipy {residuals[1]:.1e})",
    )


def cg_rows(side: int, repeats: int):
    rng = np.random.default_rng(2)
    S = diffusion_3d(side, rng)
    A = js.DIAMatrix.from_scipy(S)
    b = jnp.asarray(rng.standard_normal(S.shape[0]))
    start = time.perf_counter()
    M = js.linalg.spilu0(A)
    jax.block_until_ready(M)
    setup_s = time.perf_counter() - start
    apply = jax.jit(lambda M, r: M @ r)
    jax.block_until_ready(apply(M, b))
    apply_s = measure(blocking(apply, M, b), 5)["median_s"]
    product = jax.jit(lambda A, r: A @ r)
    jax.block_until_ready(product(A, b))
    product_s = measure(blocking(product, A, b), 5)["median_s"]
    # Under `jit` the values are traced, so on an accelerator the levels' schedule keeps
    # the stencil's stored zeros and chains every row: time the refactorization on the CPU.
    if jax.default_backend() == "cpu":
        factor = jax.jit(js.linalg.spilu0)
        jax.block_until_ready(factor(A))
        refactor_s = measure(blocking(factor, A), 3)["median_s"]
    tol = 1e-8
    _, plain_it = pcg(A, b, None, tol)
    _, ilu_it = pcg(A, b, M, tol)
    _, jacobi_it = pcg(A, b, js.linalg.jacobi(A), tol)
    plain_s = measure(blocking(pcg, A, b, None, tol), repeats)["median_s"]
    ilu_s = measure(blocking(pcg, A, b, M, tol), repeats)["median_s"]
    jacobi_s = measure(blocking(pcg, A, b, js.linalg.jacobi(A), tol), repeats)["median_s"]
    count = [0]
    start = time.perf_counter()
    sla.cg(
        S.tocsr(),
        np.asarray(b),
        rtol=tol,
        maxiter=20000,
        callback=lambda _: count.__setitem__(0, count[0] + 1),
    )
    scipy_s = time.perf_counter() - start
    n = S.shape[0]
    cases = (
        (f"CG, 3-D variable-coefficient 7-point, {n} unknowns", plain_s, plain_it),
        ("CG + Jacobi", jacobi_s, jacobi_it),
        ("CG + ILU(0)", ilu_s, ilu_it),
    )
    for name, seconds, iterations in cases:
        note = (
            f"{int(iterations)} iterations ({int(plain_it) / int(iterations):.2f}x fewer, "
            f"{plain_s / seconds:.2f}x faster than no preconditioner)"
        )
        row(name, seconds, scipy_s, note)
    print(f"| scipy cg without preconditioner: {count[0]} iterations | | | | |")
    library_rows(S, A, b, M, tol, scipy_s, repeats)
    print(f"| ILU(0) setup: symbolic + first factorization {setup_s * 1e3:.0f} ms | | | | |")
    print(
        f"| ILU(0) application {apply_s * 1e3:.1f} ms ({type(M).__name__}); "
        f"product A @ r {product_s * 1e3:.1f} ms | | | | |"
    )
    if jax.default_backend() == "cpu":
        print(f"| ILU(0) jitted refactorization, new values {refactor_s * 1e3:.1f} ms | | | | |")
    else:
        levels = (M.forward_levels.shape[0], M.backward_levels.shape[0])
        print(f"| ILU(0) levels: {levels[0]} forward, {levels[1]} backward | | | | |")
        host_ilu_line(A, b)


def host_ilu_line(A, b):
    """On an accelerator: one ILU(0) application by the native sweeps on the host, with
    the copies of `r` and of the result, the fallback the level-scheduled sweeps must
    beat; nothing without the native kernels."""
    host = jax.devices("cpu")[0]
    with jax.default_device(host):
        try:
            M = js.linalg.spilu0(jax.device_put(A, host), method="native")
        except ValueError as error:
            print(f"| ILU(0) on the host: not measured ({error}) | | | | |")
            return
    apply = jax.jit(lambda M, r: M @ r)
    device = b.devices().pop()

    def round_trip(r):
        return jax.device_put(apply(M, jax.device_put(r, host)), device)

    jax.block_until_ready(round_trip(b))
    seconds = measure(blocking(round_trip, b), 5)["median_s"]
    print(f"| ILU(0) application on the host, copies included {seconds * 1e3:.1f} ms | | | | |")


def library_rows(S, A, b, M, tol: float, scipy_s: float, repeats: int):
    """`js.linalg.cg` (scipy's test, `info`, implicit derivatives) on the same problem, with
    and without ILU(0), and JAX's CG on `jax.experimental.sparse`'s BCSR products; each
    result checked to reach `tol`."""
    from jax.experimental import sparse as jsparse

    bcsr = jsparse.BCSR.from_scipy_sparse(S.tocsr())
    cases = {
        "js.linalg.cg": jax.jit(lambda A, b: js.linalg.cg(A, b, rtol=tol, maxiter=20_000)[0]),
        "js.linalg.cg + ILU(0)": jax.jit(
            lambda A, b: js.linalg.cg(A, b, rtol=tol, maxiter=20_000, M=M)[0]
        ),
        "jax.scipy cg, jax.experimental BCSR": jax.jit(
            lambda _, b: jax.scipy.sparse.linalg.cg(bcsr.__matmul__, b, tol=tol, maxiter=20_000)[0]
        ),
    }
    for name, solve in cases.items():
        x = np.asarray(solve(A, b))
        residual = np.linalg.norm(np.asarray(b) - S @ x) / np.linalg.norm(np.asarray(b))
        assert residual <= 1.01 * tol, f"{name}: relative residual {residual:.1e}"
        row(name, measure(blocking(solve, A, b), repeats)["median_s"], scipy_s)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument(
        "--only",
        choices=("eigsh", "svd", "expm", "cg", "solvers", "eigs"),
        help="run one of the sections",
    )
    parser.add_argument("--cg-side", type=int, help="the CG problem's grid side (default 100)")
    args = parser.parse_args()
    side2, n_expm, side3, repeats = (40, 10_000, 16, 1) if args.small else (317, 1_000_000, 100, 3)
    side3 = args.cg_side or side3
    print(os.popen("uptime").read().strip())
    print(machine())
    print("| case | jaxsparse ms | scipy ms | speedup vs scipy | note |")
    print("|---|---|---|---|---|")
    if args.only in (None, "eigsh"):
        eigsh_rows(side2, side2)
        # A grid with unequal sides has no double eigenvalues, so no missed copies to
        # find: for comparison, at about the same size.
        eigsh_rows(side2 - 1, side2 + 1)
    if args.only in (None, "svd"):
        svd_rows(*((2_000, 500) if args.small else (200_000, 20_000)), repeats)
    if args.only in (None, "expm"):
        expm_rows(n_expm, repeats)
    if args.only in (None, "cg"):
        cg_rows(side3, repeats)
    if args.only in (None, "solvers"):
        sizes = (2_000, 500, 40) if args.small else (200_000, 20_000, 317)
        solver_rows(*sizes, repeats)
    if args.only in (None, "eigs"):
        eigs_rows(*((40, 2_000) if args.small else (200, 20_000)))
    print(os.popen("uptime").read().strip())


if __name__ == "__main__":
    main()
