"""Solve a 2-D Poisson problem by conjugate gradients on a mesh of devices, and differentiate
the solve.

The 5-point stencil `A` on an `N x N` grid (as in `poisson_cg.py`) is split by rows over
the 8 devices of a mesh with `js.shard(A, mesh, axis="x")`; the right-hand side lives on
the same devices (`S.shard_vector(b)`, rows sharded over `"x"`), and
`jax.scipy.sparse.linalg.cg(lambda v: S @ v, b)` runs under `jax.jit` with every product
exchanging only a halo of `N` grid rows between neighbouring devices. JAX's sharding
propagation does the rest (CG's dot products become all-reduces). The solutions (DIA and
CSR) are checked against `scipy.sparse.linalg.spsolve`, `jax.grad` of a loss through the
sharded solve against the adjoint formula, and the bytes each product sends, read from
the compiled program, against the halo and against an all-gather of `x`.

On a machine without several accelerators, the devices are simulated CPU devices: this
script sets `XLA_FLAGS=--xla_force_host_platform_device_count=8` before importing JAX
(unless `XLA_FLAGS` already asks for a device count). On several hosts the same code runs
after `jax.distributed.initialize()`, with a mesh over all hosts' devices.

Run it with `python examples/sharded_poisson.py`.
"""

import os

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse  # noqa: E402
import scipy.sparse.linalg  # noqa: E402
from jax.scipy.sparse.linalg import cg  # noqa: E402

import jaxsparse as js  # noqa: E402
from jaxsparse._collectives import collective_bytes  # noqa: E402

DTYPE = np.float32


def poisson_2d(N: int) -> scipy.sparse.csr_array:
    """The 5-point Laplacian (positive definite) on an `N x N` grid, row-major order."""
    T = scipy.sparse.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(N, N))
    identity = scipy.sparse.eye_array(N)
    return scipy.sparse.csr_array(scipy.sparse.kron(identity, T) + scipy.sparse.kron(T, identity))


def solve(S, b, tol: float):
    """`S^-1 b` by conjugate gradients, `S` a sharded matrix and `b` sharded like its rows."""
    return cg(lambda v: S @ v, b, tol=tol, maxiter=10 * b.shape[0])[0]


def relative_error(actual, expected) -> float:
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    return float(np.linalg.norm(actual - expected) / np.linalg.norm(expected))


def bytes_per_product(S, b) -> int:
    """Bytes one `S @ b` sends between devices, read from its compiled program."""
    text = jax.jit(lambda S, b: S @ b).lower(S, b).compile().as_text()
    return sum(collective_bytes(text).values())


def main(N: int = 32, conductivity: float = 1.5, tol: float = 1e-6, verbose: bool = False):
    """Solve on a mesh with DIA and CSR, differentiate through the DIA solve, check all.

    **Arguments:**

    - `N`: grid points per side (the matrix is `N^2 x N^2`, split over all devices).
    - `conductivity`: the constant `c` multiplying the stencil.
    - `tol`: CG's relative tolerance (float32: keep it above ~1e-7).
    - `verbose`: print the results.

    **Returns:** a dict: relative errors `dia_solution`, `csr_solution` (vs spsolve),
    `grad_b`, `grad_c` (vs the adjoint formula); `devices`; `bytes_dia`, `bytes_csr`
    (measured per product), `bytes_halo` (`2 N` rows per neighbouring pair),
    `bytes_all_gather` (of `x`); and `solution_sharded`, `grad_b_sharded` (whether the
    solution and the gradient in `b` come back sharded over all devices).
    """
    say = print if verbose else (lambda *args: None)
    mesh = jax.make_mesh((len(jax.devices()),), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    devices = mesh.shape["x"]
    h = 1.0 / (N + 1)
    grid = np.linspace(h, 1.0 - h, N)
    X, Y = np.meshgrid(grid, grid, indexing="ij")
    source = np.exp(-50 * ((X - 0.3) ** 2 + (Y - 0.6) ** 2)) - np.exp(
        -50 * ((X - 0.7) ** 2 + (Y - 0.3) ** 2)
    )
    rhs = (h**2 * source.ravel()).astype(DTYPE)
    n = N * N

    A = poisson_2d(N).astype(DTYPE)
    S = js.shard(js.DIAMatrix.from_scipy(A), mesh, axis="x")
    S_csr = js.shard(js.CSRMatrix.from_scipy(A), mesh, axis="x")
    b = S.shard_vector(rhs)
    say(f"2-D Poisson, {N} x {N} grid, {n} unknowns over {devices} devices ({mesh}):")
    say(f"  DIA: {S.plan.summary()}")
    say(f"  CSR: {S_csr.plan.summary()}")

    expected = scipy.sparse.linalg.spsolve((conductivity * A).astype(np.float64).tocsc(), rhs)
    c = jnp.asarray(conductivity, DTYPE)
    solve_jit = jax.jit(solve, static_argnums=2)
    solution = solve_jit(c * S, b, tol)
    results = {
        "devices": devices,
        "dia_solution": relative_error(solution[:n], expected),
        "csr_solution": relative_error(solve_jit(c * S_csr, b, tol)[:n], expected),
        "solution_sharded": len(solution.sharding.device_set) == devices,
    }
    say(f"cg(lambda v: S @ v, b), relative error vs scipy spsolve (tol={tol:.0e}):")
    say(f"  sharded DIA: {results['dia_solution']:.1e}")
    say(f"  sharded CSR: {results['csr_solution']:.1e}")

    target = 0.5 * expected[::-1]
    target_sharded = S.shard_vector(target.astype(DTYPE))

    def loss(b, c):
        u = solve(c * S, b, tol)
        return 0.5 * jnp.sum((u - target_sharded) ** 2)

    grad_b, grad_c = jax.jit(jax.grad(loss, argnums=(0, 1)))(b, c)
    A64 = conductivity * A.astype(np.float64)
    adjoint = scipy.sparse.linalg.spsolve(A64.T.tocsc(), expected - target)
    grad_c_adjoint = -adjoint @ (A.astype(np.float64) @ expected)
    results["grad_b"] = relative_error(grad_b[:n], adjoint)
    results["grad_c"] = relative_error(grad_c, grad_c_adjoint)
    results["grad_b_sharded"] = len(grad_b.sharding.device_set) == devices
    say("jax.grad of L = 0.5 * ||u - u_target||^2 through the sharded cg:")
    say(f"  dL/db: relative error vs the adjoint: {results['grad_b']:.1e} ({grad_b.sharding})")
    say(f"  dL/dc = {float(grad_c):.6e}, adjoint {grad_c_adjoint:.6e}")

    itemsize = np.dtype(DTYPE).itemsize
    results["bytes_dia"] = bytes_per_product(S, b)
    results["bytes_csr"] = bytes_per_product(S_csr, b)
    results["bytes_halo"] = (devices - 1) * 2 * N * itemsize
    results["bytes_all_gather"] = (devices - 1) * S.padded_shape[1] * itemsize
    say("bytes sent between devices per product (from the compiled program):")
    say(f"  sharded DIA {results['bytes_dia']}, sharded CSR {results['bytes_csr']}")
    say(f"  halo of N rows each way: {results['bytes_halo']}")
    say(f"  an all-gather of x:      {results['bytes_all_gather']}")
    return results


if __name__ == "__main__":
    main(verbose=True)
