"""Time and bytes per row-sharded product over 1, 2, 4 and 8 devices in one process and
2 x 4 devices in two processes, strong and weak scaling, beside an all-gather of `x`.

The matrix is the 2-D 5-point stencil (float32, `k = 1`), as a DIA and as a CSR matrix:
with the full sizes, strong scaling keeps a `512 x 512` grid (262144 rows) and spreads it
over more devices, weak scaling gives every device `128 x 512` grid rows (65536 rows).
For each layout:

- bytes one product sends between devices, read from its compiled program, and what an
  all-gather of `x` sends;
- the median time of one jitted product (single call, result fresh), of one eager
  `S @ x` (outside `jit`, as a user at a prompt calls it) and of one product inside a
  jitted loop of `LOOP` products, and the median time of an all-gather of `x`;
  compilation is outside the timed region;
- once per size, scipy's CSR product and `jax.experimental.sparse` BCSR on one device.

The devices are CPU devices: simulated ones in one process
(`--xla_force_host_platform_device_count`), sharing the machine's cores, and in the
two-process rows JAX's CPU collectives (gloo) over 127.0.0.1. So the times measure the
overheads of sharding on one host, not a cluster's scaling.

Run it with `python benchmarks/sharding_scaling.py [--out FILE] [--size quick]` (it starts
the two-process rows itself); it prints the machine, the table, and `uptime` before and
after.
"""

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse  # noqa: E402
from jax import lax  # noqa: E402
from jax.experimental import sparse as jsparse  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import timing  # noqa: E402

import jaxsparse as js  # noqa: E402
from jaxsparse._collectives import collective_bytes  # noqa: E402

DTYPE = np.float32
LOOP = 20
# (strong-scaling grid, weak-scaling grid rows per device, grid columns); `--quick` sizes
# check that the script runs.
SIZES = {"full": ((512, 512), 128, 512), "quick": ((32, 32), 4, 32)}
# Fixed counts (3 untimed calls, 15 timed): the processes of a multi-process run must make
# the same collective calls, so no process may decide its repeats from its own timings.
TIMING = dict(budget_s=0.0, min_repeats=15, max_repeats=15, warmup_s=1e9, max_warmup_calls=3)


def stencil_rows(grid: tuple[int, int], start: int, stop: int) -> scipy.sparse.csr_array:
    """Rows `[start, stop)` of the 5-point Laplacian on `grid` (row-major), made alone."""
    rows_count, columns_count = grid
    rows = np.arange(start, stop)
    i, j = np.divmod(rows, columns_count)
    columns, values = [rows], [np.full(len(rows), 4.0)]
    for di, dj in ((-1, 0), (1, 0), (0, -1), (0, 1)):
        inside = (0 <= i + di) & (i + di < rows_count) & (0 <= j + dj) & (j + dj < columns_count)
        columns.append(np.where(inside, rows + di * columns_count + dj, -1))
        values.append(np.full(len(rows), -1.0))
    columns, values = np.stack(columns, 1), np.stack(values, 1)
    keep = columns >= 0
    local = np.broadcast_to(np.arange(len(rows))[:, None], columns.shape)
    n = rows_count * columns_count
    return scipy.sparse.csr_array(
        (values[keep].astype(DTYPE), (local[keep], columns[keep])), shape=(len(rows), n)
    )


def measure(grid, format: str, devices: int, scaling: str) -> dict:
    """One row of the table on a mesh of the first `devices` of `jax.devices()` (all of
    them, over every process, when `devices` is their number)."""
    mesh = jax.make_mesh(
        (devices,),
        ("x",),
        axis_types=(jax.sharding.AxisType.Auto,),
        devices=jax.devices()[:devices],
    )
    n = grid[0] * grid[1]
    S = js.shard_from_rows(lambda a, b: stencil_rows(grid, a, b), (n, n), mesh, "x", format=format)
    x = S.shard_vector(np.ones(n, DTYPE))
    product = jax.jit(lambda S, x: S @ x).lower(S, x).compile()
    loop = jax.jit(lambda S, x: lax.fori_loop(0, LOOP, lambda _, y: (S @ y) * 0.125, x))
    loop = loop.lower(S, x).compile()
    gather = jax.jit(
        jax.shard_map(
            lambda b: lax.all_gather(b, "x", tiled=True),
            mesh=mesh,
            in_specs=P("x"),
            out_specs=P(),
            check_vma=False,
        )
    )
    gather = gather.lower(x).compile()
    single = timing.time_call(timing.blocking(product, S, x), **TIMING)
    eager = timing.time_call(timing.blocking(lambda S, x: S @ x, S, x), **TIMING)
    looped = timing.time_call(timing.blocking(loop, S, x), **TIMING)
    gathered = timing.time_call(timing.blocking(gather, x), **TIMING)
    return {
        "format": format.upper(),
        "scaling": scaling,
        "layout": f"{jax.process_count()} x {devices // jax.process_count()}",
        "rows": n,
        "bytes": sum(collective_bytes(product.as_text()).values()),
        "all_gather_bytes": sum(collective_bytes(gather.as_text()).values()),
        "single_ms": single["median_s"] * 1e3,
        "eager_ms": eager["median_s"] * 1e3,
        "loop_ms": looped["median_s"] / LOOP * 1e3,
        "all_gather_ms": gathered["median_s"] * 1e3,
    }


def layouts(devices_list, size: str) -> list[tuple[tuple[int, int], str, int, str]]:
    strong, weak_rows, columns = SIZES[size]
    cases = []
    for format in ("dia", "csr"):
        for devices in devices_list:
            cases.append((strong, format, devices, "strong"))
        for devices in devices_list:
            cases.append(((devices * weak_rows, columns), format, devices, "weak"))
    return cases


def baselines(size: str) -> list[dict]:
    """scipy's CSR product and jax.experimental.sparse BCSR (one device) on each size."""
    rows = []
    strong, weak_rows, columns = SIZES[size]
    sizes = {strong} | {(d * weak_rows, columns) for d in (1, 2, 4, 8)}
    for grid in sorted(sizes):
        n = grid[0] * grid[1]
        A = stencil_rows(grid, 0, n)
        x = np.ones(n, DTYPE)
        scipy_s = timing.time_call(lambda A=A, x=x: A @ x, **TIMING)["median_s"]
        bcsr = jsparse.BCSR.from_scipy_sparse(A)
        product = jax.jit(lambda M, v: M @ v)
        xj = jnp.asarray(x)
        product(bcsr, xj).block_until_ready()
        bcsr_s = timing.time_call(timing.blocking(product, bcsr, xj), **TIMING)["median_s"]
        rows.append({"rows": n, "scipy_ms": scipy_s * 1e3, "bcsr_ms": bcsr_s * 1e3})
    return rows


def two_process_rows(size: str) -> list[dict]:
    """The 2 x 4 rows: this script as two processes of 4 devices, joined over 127.0.0.1."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4")
    children = [
        subprocess.Popen(
            [sys.executable, __file__, "--size", size, "--worker", str(i), str(port)],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in (0, 1)
    ]
    outputs = [child.communicate(timeout=600)[0] for child in children]
    if any(child.returncode for child in children):
        raise RuntimeError(f"a two-process worker failed: {[c.returncode for c in children]}")
    return json.loads(outputs[0].strip().splitlines()[-1])


def worker(process_id: int, port: int, size: str) -> None:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        f"127.0.0.1:{port}", num_processes=2, process_id=process_id, heartbeat_timeout_seconds=10
    )
    records = [measure(*case) for case in layouts([8], size)]
    if process_id == 0:
        print(json.dumps(records))


def machine() -> str:
    with open("/proc/cpuinfo") as cpuinfo:
        names = [line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")]
    bandwidth = timing.streaming_bandwidth()
    return (
        f"{names[0] if names else platform.processor()}, {os.cpu_count()} cores, numpy "
        f"streaming {bandwidth['numpy_add_gbs']:.1f} GB/s; jax {jax.__version__}, "
        f"Python {platform.python_version()}"
    )


def table(records: list[dict], references: list[dict]) -> str:
    header = (
        f"{'format':6} {'scaling':7} {'layout':6} {'rows':>7} {'bytes':>7} {'all-gather B':>12} "
        f"{'single ms':>9} {'eager ms':>8} {'loop ms':>8} {'all-gather ms':>13}"
    )
    lines = [header, "-" * len(header)]
    for r in records:
        lines.append(
            f"{r['format']:6} {r['scaling']:7} {r['layout']:6} {r['rows']:>7} {r['bytes']:>7} "
            f"{r['all_gather_bytes']:>12} {r['single_ms']:>9.3f} {r['eager_ms']:>8.3f} "
            f"{r['loop_ms']:>8.3f} {r['all_gather_ms']:>13.3f}"
        )
    lines += ["", f"{'rows':>7} {'scipy CSR ms':>12} {'BCSR 1 device ms':>16}"]
    for r in references:
        lines.append(f"{r['rows']:>7} {r['scipy_ms']:>12.3f} {r['bcsr_ms']:>16.3f}")
    return "\n".join(lines)


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the printed report to this file")
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--worker", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker, args.size)
        return
    lines = [f"machine: {machine()}", f"load before: {uptime()}"]
    records = [measure(*case) for case in layouts([1, 2, 4, 8], args.size)]
    records += two_process_rows(args.size)
    records.sort(key=lambda r: (r["format"], r["scaling"], r["rows"], r["layout"]))
    lines += ["", table(records, baselines(args.size)), "", f"load after: {uptime()}"]
    report = "\n".join(lines)
    print(report)
    if args.out:
        Path(args.out).write_text(report + "\n")


if __name__ == "__main__":
    main()
