"""Bytes a row-sharded product sends between devices, against an all-gather of `x`.

For DIA stencils (1-D 3-point, 2-D 5-point, 3-D 7-point), the same stencil in CSR, a
banded random CSR and a random and a power-law CSR, over meshes of 2, 4 and 8 simulated
CPU devices: the bytes one `S @ X` (float32, `k` columns) sends, read from the compiled
program's collectives, the plan's own count, the halo minimum (rows outside each device's
block that its rows touch, counted from the structure), and what an all-gather of `X`
would send. No timings: this measures traffic, which does not depend on the machine.

Run it with `python benchmarks/sharding.py [--plot sharding.png]`; it sets
`XLA_FLAGS=--xla_force_host_platform_device_count=8` before importing JAX.
"""

import argparse
import os

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()

import jax  # noqa: E402
import matplotlib  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse  # noqa: E402

import jaxsparse as js  # noqa: E402
from jaxsparse._collectives import collective_bytes  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DTYPE = np.float32
DEVICES = (2, 4, 8)
COLUMNS = (1, 8)


def stencil(grid: tuple[int, ...]) -> scipy.sparse.csr_array:
    """The (2 d + 1)-point Laplacian on a grid of shape `grid`, row-major."""
    total = scipy.sparse.csr_array((int(np.prod(grid)),) * 2)
    for axis, size in enumerate(grid):
        factors = [scipy.sparse.eye_array(s) for s in grid]
        factors[axis] = scipy.sparse.diags_array(
            [-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(size,) * 2
        )
        term = factors[0]
        for factor in factors[1:]:
            term = scipy.sparse.kron(term, factor)
        total = total + term
    return scipy.sparse.csr_array(total, dtype=DTYPE)


def banded_random(n: int, band: int, rng) -> scipy.sparse.csr_array:
    offsets = rng.integers(-band, band + 1, size=(n, 4))
    rows = np.repeat(np.arange(n), 4)
    cols = np.clip(rows + offsets.ravel(), 0, n - 1)
    return scipy.sparse.csr_array((np.ones(len(rows), DTYPE), (rows, cols)), shape=(n, n))


def power_law(n: int, rng) -> scipy.sparse.csr_array:
    """Zipf row lengths, columns drawn with power-law popularity (a scale-free graph)."""
    lengths = np.minimum(rng.zipf(2.0, size=n), n // 4)
    popularity = 1.0 / np.arange(1, n + 1) ** 1.1
    cols = np.concatenate(
        [rng.choice(n, size=k, replace=False, p=popularity / popularity.sum()) for k in lengths]
    )
    rows = np.repeat(np.arange(n), lengths)
    permutation = rng.permutation(n)
    return scipy.sparse.csr_array(
        (np.ones(len(rows), DTYPE), (rows, permutation[cols])), shape=(n, n)
    )


def matrices(rng) -> list[tuple[str, object]]:
    return [
        ("DIA 1-D 3-point, n=4096", js.DIAMatrix.from_scipy(stencil((4096,)))),
        ("DIA 2-D 5-point 64^2", js.DIAMatrix.from_scipy(stencil((64, 64)))),
        ("DIA 3-D 7-point 16^3", js.DIAMatrix.from_scipy(stencil((16, 16, 16)))),
        ("CSR 2-D 5-point 64^2", js.CSRMatrix.from_scipy(stencil((64, 64)))),
        ("CSR banded random", js.CSRMatrix.from_scipy(banded_random(4096, 40, rng))),
        (
            "CSR random 0.1%",
            js.CSRMatrix.from_scipy(
                scipy.sparse.random_array((4096, 4096), density=1e-3, random_state=rng, dtype=DTYPE)
            ),
        ),
        ("CSR power-law", js.CSRMatrix.from_scipy(power_law(4096, rng))),
    ]


def halo_minimum(A, devices: int) -> int:
    """Operand rows outside each device's block that its rows touch, summed over devices."""
    csr = A.to_scipy().tocsr()
    m, n = csr.shape
    row_block, column_block = -(-m // devices), -(-n // devices)
    total = 0
    for p in range(devices):
        block = csr[p * row_block : (p + 1) * row_block]
        touched = np.unique(block.indices)
        total += np.count_nonzero(touched // column_block != p)
    return total


def measured(S, columns: int) -> int:
    operand = jax.ShapeDtypeStruct((S.padded_shape[1], columns), DTYPE, sharding=S.sharding)
    text = jax.jit(lambda S, X: S @ X).lower(S, operand).compile().as_text()
    return sum(collective_bytes(text).values())


def run() -> list[dict]:
    rng = np.random.default_rng(17)
    records = []
    for name, A in matrices(rng):
        for devices in DEVICES:
            mesh = jax.sharding.Mesh(np.array(jax.devices()[:devices]), ("x",))
            S = js.shard(A, mesh, axis="x")
            for columns in COLUMNS:
                row_bytes = columns * np.dtype(DTYPE).itemsize
                records.append(
                    {
                        "matrix": name,
                        "devices": devices,
                        "k": columns,
                        "measured": measured(S, columns),
                        "plan": S.exchanged_bytes(columns),
                        "minimum": halo_minimum(A, devices) * row_bytes,
                        "all_gather": (devices - 1) * S.padded_shape[1] * row_bytes,
                        "exchange": S.plan.summary(),
                    }
                )
    return records


def print_table(records: list[dict]) -> None:
    header = (
        f"{'matrix':26} {'dev':>3} {'k':>2} {'measured B':>11} {'plan B':>10} "
        f"{'minimum B':>10} {'all-gather B':>13} {'vs all-gather':>13}  exchange"
    )
    print(header)
    print("-" * len(header))
    for r in records:
        print(
            f"{r['matrix']:26} {r['devices']:>3} {r['k']:>2} {r['measured']:>11} {r['plan']:>10} "
            f"{r['minimum']:>10} {r['all_gather']:>13} {r['measured'] / r['all_gather']:>13.4f}  "
            f"{r['exchange'][:60]}"
        )


def plot(records: list[dict], path: str) -> None:
    """Bytes per product (k = 1) against devices, one line per matrix, all-gather dashed."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ones = [r for r in records if r["k"] == 1]
    for name in dict.fromkeys(r["matrix"] for r in ones):
        mine = [r for r in ones if r["matrix"] == name]
        ax.plot([r["devices"] for r in mine], [r["measured"] for r in mine], "o-", label=name)
    gathered = [r for r in ones if r["matrix"] == ones[0]["matrix"]]
    ax.plot(
        [r["devices"] for r in gathered],
        [r["all_gather"] for r in gathered],
        "k--",
        label="all-gather of x (n=4096)",
    )
    ax.set(xlabel="devices", ylabel="bytes sent per product (k = 1, float32)", yscale="log")
    ax.set_xticks(DEVICES)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plot", help="write a plot of the bytes to this path")
    args = parser.parse_args(argv)
    records = run()
    print_table(records)
    if args.plot:
        plot(records, args.plot)
    return records


if __name__ == "__main__":
    main()
