"""Where a GPU product's time goes: each kernel of our products and gradient steps, and of
cuSPARSE's (CuPy) products, timed one by one by Nsight Compute.

    ncu --clock-control none --profile-from-start off --csv --print-units base \\
        --log-file ncu.csv --metrics gpu__time_duration.sum,dram__bytes.sum,\\
launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active,\\
lts__t_sector_hit_rate.pct \\
        python benchmarks/gpu_kernel_times.py run calls.txt
    python benchmarks/gpu_kernel_times.py report ncu.csv calls.txt

`run` builds the benchmark's matrices (2^22 rows, float32), compiles every call, then
profiles one call of each: before each it launches a one-thread marker kernel whose grid
size is the call's number, which is how `report` assigns the kernels that follow to it.
Kernel times are the GPU's alone (no launch gaps), so the sum of a call's kernels is below
its time in `benchmarks/gpu.py`.
"""

import argparse
import collections
import csv
import functools
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import gpu  # noqa: E402
import matrices  # noqa: E402

import jaxsparse as js  # noqa: E402

ROWS = 2**22
# The cases whose targets (issue 31) the benchmark found unmet: DIA 27-point at k = 8 under
# "auto" (Mosaic GPU on Hopper), CSR k = 1 on scattered rows, CSR k = 64.
CASES = (
    ("dia", "stencil3d-27pt", matrices.stencil27, (1, 8)),
    ("csr", "poisson2d-5pt", matrices.poisson2d, (1, 64)),
    ("csr", "random-8", functools.partial(matrices.random_uniform, per_row=8), (1, 64)),
    ("csr", "power-law", matrices.power_law, (1,)),
)
MARKER_NAME = "call_marker"


def _calls():
    """`(label, thunk)` for every profiled call, each compiled and run once already."""
    rng = np.random.default_rng(0)
    calls = []
    for fmt, name, build, ks in CASES:
        scipy_matrix = gpu._normalized(build(ROWS, rng))
        csr = scipy.sparse.csr_array(scipy_matrix)
        matrix = (js.DIAMatrix.from_scipy if fmt == "dia" else js.CSRMatrix.from_scipy)(
            scipy_matrix if fmt == "dia" else csr
        )
        for k in ks:
            x = jnp.asarray(rng.standard_normal((csr.shape[1], k), np.float32))
            product = jax.jit(js.matmul)
            step = jax.jit(_gradient_step)
            label = f"{fmt} {name} k={k}"
            calls.append((f"{label} product", functools.partial(product, matrix, x)))
            calls.append((f"{label} gradient step", functools.partial(step, matrix, x, x)))
            if fmt == "csr" and gpu.cupy is not None:
                cupy_matrix = gpu.cupy_sparse.csr_matrix(csr)
                y = gpu.cupy.asarray(np.asarray(x))
                calls.append((f"{label} cuSPARSE", functools.partial(cupy_matrix.__matmul__, y)))
    for _, call in calls:
        _wait(call())
    return calls


def _gradient_step(matrix, x, cotangent):
    def product(data, x):
        return js.matmul(matrix.with_data(data), x)

    y, pullback = jax.vjp(product, matrix.data, x)
    return y, pullback(cotangent)


def _wait(result):
    jax.block_until_ready(result)
    if gpu.cupy is not None:
        gpu.cupy.cuda.get_current_stream().synchronize()


def run(labels: pathlib.Path) -> None:
    """Profiles one call of each case, each after its marker (see the module docstring),
    and writes the calls' labels to `labels`, one a line, in the markers' order."""
    cupy = gpu.cupy
    if cupy is None:
        sys.exit("gpu_kernel_times.py needs CuPy for its marker kernel and cuSPARSE's times")
    marker = cupy.RawKernel(f'extern "C" __global__ void {MARKER_NAME}() {{}}', MARKER_NAME)
    calls = _calls()
    labels.write_text("".join(f"{label}\n" for label, _ in calls))
    cupy.cuda.profiler.start()
    for number, (_, call) in enumerate(calls, start=1):
        marker((number,), (1,), ())
        cupy.cuda.get_current_stream().synchronize()
        _wait(call())
    cupy.cuda.profiler.stop()


_UNITS_US = {
    "ns": 1e-3,
    "nsecond": 1e-3,
    "us": 1.0,
    "usecond": 1.0,
    "ms": 1e3,
    "msecond": 1e3,
    "s": 1e6,
    "second": 1e6,
}


def report(path: pathlib.Path, labels: pathlib.Path) -> None:
    """Per call, each kernel's time and the metrics beside it, from ncu's CSV."""
    names = labels.read_text().splitlines()
    kernels = {}  # ncu's kernel ID -> (name, grid, {metric: value})
    with path.open() as file:
        lines = [line for line in file if line.startswith('"')]
    for row in csv.DictReader(lines):
        entry = kernels.setdefault(row["ID"], (row["Kernel Name"], row["Grid Size"], {}))
        entry[2][row["Metric Name"]] = (row["Metric Value"].replace(",", ""), row["Metric Unit"])
    label, totals = "before the first marker", collections.defaultdict(float)
    for name, grid, metrics in kernels.values():
        if name.startswith(MARKER_NAME):
            label = names[int(grid.strip("()").split(",")[0]) - 1]
            print(f"\n{label}")
            continue
        value, unit = metrics.pop("gpu__time_duration.sum", ("nan", "nsecond"))
        us = float(value) * _UNITS_US.get(unit, float("nan"))
        totals[label] += us
        rest = ", ".join(f"{key.split('__')[1]} {v}" for key, (v, _) in metrics.items())
        print(f"  {us:9.1f} us  {name[:70]:<70} grid {grid}  {rest}")
    print("\n== kernel time per call (us)")
    for label, total in totals.items():
        print(f"{label:<45} {total:9.1f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=("run", "report"))
    parser.add_argument(
        "paths", nargs="+", type=pathlib.Path, help="run: LABELS; report: CSV LABELS"
    )
    args = parser.parse_args()
    if args.mode == "run":
        run(args.paths[0])
    else:
        report(*args.paths)


if __name__ == "__main__":
    main()
