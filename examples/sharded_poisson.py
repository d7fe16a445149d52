"""Solve a 2-D Poisson problem by conjugate gradients on a mesh of devices, and differentiate
the solve; on one process or several.

The 5-point stencil `A` on an `N x N` grid (as in `poisson_cg.py`) is split by rows over
the devices of a mesh. Each process builds only the rows of its own devices
(`js.shard_from_rows(rows, shape, mesh, "x")`, with `rows(start, stop)` making those rows
of the stencil and nothing else); the right-hand side lives on the same devices
(`S.shard_vector(b)`), and `jax.scipy.sparse.linalg.cg(lambda v: S @ v, b)` runs under
`jax.jit` with every product exchanging only a halo of `N` grid rows between neighbouring
devices. JAX's sharding propagation does the rest (CG's dot products become all-reduces).
The solutions (DIA and CSR) are checked against `scipy.sparse.linalg.spsolve`, `jax.grad`
of a loss through the sharded solve against the adjoint formula, and the bytes each
product sends, read from the compiled program, against the halo and an all-gather of `x`
(the checks gather the results and build the whole matrix with scipy: they are checks,
not part of the sharded computation).

Run it as:

- `python examples/sharded_poisson.py`: one process with 8 simulated CPU devices (this
  script sets `XLA_FLAGS=--xla_force_host_platform_device_count=8` before importing JAX,
  unless `XLA_FLAGS` already asks for a device count);
- `python examples/sharded_poisson.py --processes 2`: 2 processes with 4 CPU devices each
  on this machine, joined by `jax.distributed` over 127.0.0.1 with JAX's CPU collectives
  (gloo): the same mesh of 8 devices across processes;
- on several hosts, on each host `i` of `H`: `python examples/sharded_poisson.py
  --coordinator HOST0:PORT --process-count H --process-id i` (HOST0 being host 0's
  address, PORT a free port there). Each process ends with an error within
  `--heartbeat-timeout` seconds (10) if another one dies.
"""

import argparse
import os
import socket
import subprocess
import sys

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
from jaxsparse._shard_gather import host_array  # noqa: E402

DTYPE = np.float32


def poisson_2d(N: int) -> scipy.sparse.csr_array:
    """The 5-point Laplacian (positive definite) on an `N x N` grid, row-major order."""
    T = scipy.sparse.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(N, N))
    identity = scipy.sparse.eye_array(N)
    return scipy.sparse.csr_array(scipy.sparse.kron(identity, T) + scipy.sparse.kron(T, identity))


def poisson_rows(N: int, start: int, stop: int) -> scipy.sparse.csr_array:
    """Rows `[start, stop)` of `poisson_2d(N)`, made without the rest of the matrix."""
    rows = np.arange(start, stop)
    i, j = np.divmod(rows, N)
    entries = [(rows, np.full(len(rows), 4.0))]
    for di, dj in ((-1, 0), (1, 0), (0, -1), (0, 1)):
        inside = (0 <= i + di) & (i + di < N) & (0 <= j + dj) & (j + dj < N)
        entries.append((np.where(inside, rows + di * N + dj, -1), np.full(len(rows), -1.0)))
    columns = np.stack([column for column, _ in entries], axis=1)
    values = np.stack([value for _, value in entries], axis=1)
    keep = columns >= 0
    local_rows = np.broadcast_to(np.arange(len(rows))[:, None], columns.shape)
    return scipy.sparse.csr_array(
        (values[keep], (local_rows[keep], columns[keep])), shape=(len(rows), N * N)
    )


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

    def rows(start, stop):
        return poisson_rows(N, start, stop).astype(DTYPE)

    S = js.shard_from_rows(rows, (n, n), mesh, "x", format="dia")
    S_csr = js.shard_from_rows(rows, (n, n), mesh, "x", format="csr")
    b = S.shard_vector(rhs)
    A = poisson_2d(N).astype(DTYPE)  # for the checks only
    processes = jax.process_count()
    say(f"2-D Poisson, {N} x {N} grid, {n} unknowns over {devices} devices ({mesh})")
    say(f"in {processes} process(es), each building the rows of its own devices:")
    say(f"  DIA: {S.plan.summary()}")
    say(f"  CSR: {S_csr.plan.summary()}")

    expected = scipy.sparse.linalg.spsolve((conductivity * A).astype(np.float64).tocsc(), rhs)
    c = jnp.asarray(conductivity, DTYPE)
    solve_jit = jax.jit(solve, static_argnums=2)
    solution = solve_jit(c * S, b, tol)
    results = {
        "devices": devices,
        "processes": processes,
        "dia_solution": relative_error(host_array(solution)[:n], expected),
        "csr_solution": relative_error(host_array(solve_jit(c * S_csr, b, tol))[:n], expected),
        "solution_sharded": len(solution.sharding.device_set) == devices,
    }
    say(f"cg(lambda v: S @ v, b), relative error vs scipy spsolve (tol={tol:.0e}):")
    say(f"  sharded DIA: {results['dia_solution']:.1e}")
    say(f"  sharded CSR: {results['csr_solution']:.1e}")

    target = 0.5 * expected[::-1]
    target_sharded = S.shard_vector(target.astype(DTYPE))

    # `S` and the target are arguments, not closed over: on several processes their arrays
    # span devices this process cannot address.
    def loss(b, c, S, target):
        u = solve(c * S, b, tol)
        return 0.5 * jnp.sum((u - target) ** 2)

    grad_b, grad_c = jax.jit(jax.grad(loss, argnums=(0, 1)))(b, c, S, target_sharded)
    A64 = conductivity * A.astype(np.float64)
    adjoint = scipy.sparse.linalg.spsolve(A64.T.tocsc(), expected - target)
    grad_c_adjoint = -adjoint @ (A.astype(np.float64) @ expected)
    results["grad_b"] = relative_error(host_array(grad_b)[:n], adjoint)
    results["grad_c"] = relative_error(host_array(grad_c), grad_c_adjoint)
    results["grad_b_sharded"] = len(grad_b.sharding.device_set) == devices
    say("jax.grad of L = 0.5 * ||u - u_target||^2 through the sharded cg:")
    say(f"  dL/db: relative error vs the adjoint: {results['grad_b']:.1e} ({grad_b.sharding})")
    say(f"  dL/dc = {float(host_array(grad_c)):.6e}, adjoint {grad_c_adjoint:.6e}")

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


def launch_here(processes: int, heartbeat_timeout: int, N: int) -> int:
    """Run this script as `processes` processes on this machine, 8 devices in all; the
    first nonzero exit status, or 0."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={8 // processes}")
    env["JAX_PLATFORMS"] = "cpu"
    common = ["--coordinator", f"127.0.0.1:{port}", "--process-count", str(processes)]
    common += ["--heartbeat-timeout", str(heartbeat_timeout), "--N", str(N)]
    children = [
        subprocess.Popen([sys.executable, __file__, *common, "--process-id", str(i)], env=env)
        for i in range(processes)
    ]
    return next((code for code in (child.wait() for child in children) if code), 0)


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--N", type=int, default=32, help="grid points per side")
    parser.add_argument("--processes", type=int, help="run as this many processes here")
    parser.add_argument("--coordinator", help="HOST:PORT of process 0 (several hosts)")
    parser.add_argument("--process-count", type=int, help="number of processes")
    parser.add_argument("--process-id", type=int, help="this process's number")
    parser.add_argument(
        "--heartbeat-timeout",
        type=int,
        default=10,
        help="seconds without heartbeats after which a process is declared dead",
    )
    return parser.parse_args()


if __name__ == "__main__":
    arguments = parse_arguments()
    if arguments.processes:
        sys.exit(launch_here(arguments.processes, arguments.heartbeat_timeout, arguments.N))
    if arguments.coordinator:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            arguments.coordinator,
            num_processes=arguments.process_count,
            process_id=arguments.process_id,
            heartbeat_timeout_seconds=arguments.heartbeat_timeout,
        )
    main(N=arguments.N, verbose=jax.process_index() == 0)
