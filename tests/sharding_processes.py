"""One process of a two-process sharded run: 2 processes x 4 CPU devices on 127.0.0.1, joined
by `jax.distributed` with JAX's CPU collectives (gloo) into one mesh of 8 devices.
`tests/test_shard_processes.py` starts two of these and asserts on what they print.

`python tests/sharding_processes.py PROCESS_ID PORT checks` builds, in each process from its
own rows only (`js.shard_from_rows`), a DIA 5-point stencil and a symmetric positive
definite power-law CSR matrix, and checks against scipy, on this process's addressable
shards: the plans and the values equal those `js.shard` builds from the whole matrix,
`S @ X`, `X @ S`, the gradients in the values and the operand, a sharded CG solve, and the
bytes each product's compiled program sends equal the plan's. It prints one line per check
and `PROCESS <id> PASSED` at the end.

`... busy` (or `... idle`) initializes, runs one product, prints `READY`, and keeps
multiplying (or sleeping) until the run fails: the test kills the other process and times
how long this one takes to end.

A failing check ends the process at once (`os._exit`), without the exit barrier that would
wait for its peer.
"""

import os
import sys
import time
import traceback

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse  # noqa: E402
import scipy.sparse.linalg  # noqa: E402
from jax.scipy.sparse.linalg import cg  # noqa: E402

import jaxsparse as js  # noqa: E402
from jaxsparse._collectives import collective_bytes  # noqa: E402

PROCESSES = 2
# A peer that stops sending heartbeats for this long is declared dead, and every other
# process ends with an error naming it (JAX's default, 100 s, makes a dead peer a hang).
HEARTBEAT_TIMEOUT_S = 10
COLUMNS = 2
TOLERANCE = 1e-10


def initialize(process_id: int, port: int, x64: bool) -> None:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.config.update("jax_enable_x64", x64)
    jax.config.update("jax_numpy_dtype_promotion", "strict")
    jax.distributed.initialize(
        f"127.0.0.1:{port}",
        num_processes=PROCESSES,
        process_id=process_id,
        initialization_timeout=60,
        heartbeat_timeout_seconds=HEARTBEAT_TIMEOUT_S,
        shutdown_timeout_seconds=10,
    )


def stencil(N: int) -> scipy.sparse.csr_array:
    """The 5-point Laplacian on an `N x N` grid, row-major."""
    line = scipy.sparse.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(N, N))
    identity = scipy.sparse.eye_array(N)
    return scipy.sparse.csr_array(
        scipy.sparse.kron(identity, line) + scipy.sparse.kron(line, identity)
    )


def power_law_spd(n: int, band: int, rng) -> scipy.sparse.csr_array:
    """A symmetric, diagonally dominant (so positive definite) matrix whose rows have
    Zipf-distributed lengths, with columns within `band` of the row (so that the plan
    exchanges a few columns between neighbours, not the whole operand)."""
    lengths = np.minimum(rng.zipf(1.8, size=n), band)
    rows = np.repeat(np.arange(n), lengths)
    cols = np.clip(rows + rng.integers(-band, band + 1, size=len(rows)), 0, n - 1)
    graph = scipy.sparse.csr_array((rng.uniform(-1, 1, len(rows)), (rows, cols)), shape=(n, n))
    graph = graph + graph.T
    degree = np.asarray(abs(graph).sum(axis=1)).ravel()
    return scipy.sparse.csr_array(graph + scipy.sparse.diags_array(degree + 1.0))


def check_shards(array: jax.Array, expected: np.ndarray, what: str) -> None:
    """Each of this process's shards of `array` against the same slice of `expected`."""
    for shard in array.addressable_shards:
        np.testing.assert_allclose(
            np.asarray(shard.data),
            expected[shard.index],
            rtol=TOLERANCE,
            atol=TOLERANCE,
            err_msg=what,
        )


def padded(array: np.ndarray, rows: int) -> np.ndarray:
    return np.pad(array, [(0, rows - array.shape[0])] + [(0, 0)] * (array.ndim - 1))


def check_matrix(name: str, twin: scipy.sparse.csr_array, format: str, mesh, rng) -> None:
    process = jax.process_index()
    requested = []

    def rows(start, stop):
        requested.append((start, stop))
        return twin[start:stop]

    S = js.shard_from_rows(rows, twin.shape, mesh, "x", format=format)
    m, n = twin.shape
    row_block = S.plan.row_block
    mine = (4 * process * row_block, min(4 * (process + 1) * row_block, m))
    assert requested == [
        (start, min(start + row_block, m)) for start in range(mine[0], mine[1], row_block)
    ], requested
    print(f"ok   {name}: process {process} loaded rows {mine[0]}..{mine[1]} of {m} only")

    whole = (js.DIAMatrix if format == "dia" else js.CSRMatrix).from_scipy(twin)
    reference = js.shard(whole, mesh, "x")
    assert S.plan == reference.plan, (S.plan, reference.plan)
    for built, expected in zip(jax.tree.leaves(S), jax.tree.leaves(reference), strict=True):
        for ours, theirs in zip(built.addressable_shards, expected.addressable_shards, strict=True):
            np.testing.assert_array_equal(np.asarray(ours.data), np.asarray(theirs.data))
    print(f"ok   {name}: the plan and the shards equal js.shard's ({S.plan.summary()})")

    padded_m, padded_n = S.padded_shape
    X = rng.standard_normal((n, COLUMNS))
    product = jax.jit(lambda S, X: S @ X).lower(S, S.shard_vector(X)).compile()
    sent = sum(collective_bytes(product.as_text()).values())
    assert sent == S.exchanged_bytes(COLUMNS) == reference.exchanged_bytes(COLUMNS), sent
    print(f"ok   {name}: {sent} bytes sent per product (k = {COLUMNS}) = the one-process plan's")
    check_shards(product(S, S.shard_vector(X)), padded(twin @ X, padded_m), f"{name} S @ X")

    dense = twin.toarray()
    X_left, G = rng.standard_normal((COLUMNS, m)), rng.standard_normal((m, COLUMNS))
    b = rng.standard_normal(m)

    # `S` is an argument, not closed over: its arrays span both processes.
    def run(S, X, X_left, G, b):
        def loss(values, X):
            return jnp.sum(G * (S.with_data(values) @ X))

        grad_values, grad_X = jax.grad(loss, argnums=(0, 1))(S.data, X)
        solution = cg(lambda v: S @ v, b, tol=1e-13, maxiter=10 * m)[0]
        return X_left @ S, S.T @ X_left.T, grad_values, grad_X, solution

    operands = (S.shard_vector(X), S.shard_vector(X_left.T).T, S.shard_vector(G))
    left, transposed, grad_values, grad_X, solution = jax.jit(run)(S, *operands, S.shard_vector(b))
    check_shards(left, padded((X_left @ dense).T, padded_n).T, f"{name} X @ S")
    check_shards(transposed, padded(dense.T @ X_left.T, padded_n), f"{name} S.T @ X")
    check_shards(grad_X, padded(dense.T @ G, padded_n), f"{name} d/dX")
    # The gradient in the values is `G X^T` at every stored slot (a DIA matrix stores its
    # diagonals whole, zeros included).
    row, col = np.indices(dense.shape)
    stored = np.isin(col - row, S.offsets) if format == "dia" else dense != 0
    found = S.with_data(grad_values).to_scipy().toarray()
    np.testing.assert_allclose(found, np.where(stored, G @ X.T, 0.0), atol=TOLERANCE)
    print(f"ok   {name}: X @ S, S.T @ X and the gradients in the operand and the values")
    expected = scipy.sparse.linalg.spsolve(twin.tocsc(), b)
    for shard in solution.addressable_shards:
        rows_here = np.arange(padded_m)[shard.index]
        inside = rows_here < m
        np.testing.assert_allclose(
            np.asarray(shard.data)[inside], expected[rows_here[inside]], rtol=1e-8, atol=1e-8
        )
    print(f"ok   {name}: sharded CG solve equals scipy's spsolve")


def global_mesh() -> jax.sharding.Mesh:
    """All 8 devices of both processes on axis "x", of type `Auto`: the dot products of
    `jax.scipy.sparse.linalg.cg` contract a sharded axis, which `Explicit` axes refuse."""
    return jax.make_mesh((8,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))


def checks() -> None:
    mesh = global_mesh()
    assert len(jax.devices()) == 8 and len(jax.local_devices()) == 4, jax.devices()
    rng = np.random.default_rng(0)
    check_matrix("DIA 5-point 11 x 11", stencil(11), "dia", mesh, rng)
    check_matrix("CSR power-law 150", power_law_spd(150, 12, rng), "csr", mesh, rng)
    print(f"PROCESS {jax.process_index()} PASSED", flush=True)


def ready(busy: bool) -> None:
    """One product (checked), `READY`, then products in a loop (`busy`: a dead peer breaks the
    collective in flight) or a loop of sleeps (only the heartbeats can tell)."""
    mesh = global_mesh()
    S = js.shard_from_rows(lambda a, b: stencil(8)[a:b], (64, 64), mesh, "x", format="dia")
    product = jax.jit(lambda S, x: S @ x)
    start = np.arange(64, dtype=np.float32)
    x = S.shard_vector(start)
    check_shards(product(S, x), stencil(8) @ start, "S @ x in 32 bits")
    print("READY", flush=True)
    started = time.monotonic()
    while time.monotonic() - started < 300:
        if busy:
            x = product(S, x) / 4
            x.block_until_ready()
        else:
            time.sleep(0.1)
    print("still running after 300 s", flush=True)
    os._exit(3)


def main() -> None:
    process_id, port, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    try:
        # The checks run in float64; the other modes with JAX's default 32-bit types, which
        # the build-time exchange of `shard_from_rows` must survive too.
        initialize(process_id, port, x64=mode == "checks")
        if mode == "checks":
            checks()
        else:
            ready(busy=mode == "busy")
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


if __name__ == "__main__":
    main()
