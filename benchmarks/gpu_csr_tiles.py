"""Tile sweep for the Triton CSR product on this GPU: time per product (median of a jitted
loop of dependent products) over a grid of block sizes around the defaults, to pick them.

    python benchmarks/gpu_csr_tiles.py [--rows 4194304] [--ks 1,8,64] [--matrices power-law]
        [--only "unroll,8 lanes"] [--gradient] [--out tiles.json]

`--matrices` defaults to all but `hub-rows` (16 rows of 2^20 entries among rows of 8),
which times what chunks of long rows are for. `--gradient` times the gradient step in the
values and the operand instead (`csr_matmul_pullback_triton`, single calls).

Every variant of a matrix and `k` is compiled first, on threads at once (compilation is
most of a sweep's time and runs mostly outside the GIL), then all are timed one after
another on the idle GPU.
"""

import argparse
import concurrent.futures
import dataclasses
import functools
import json
import os
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import gpu  # noqa: E402
import matrices  # noqa: E402

from jaxsparse.kernels.triton_csr import (  # noqa: E402
    BlockSizes,
    csr_matmul_pullback_triton,
    csr_matmul_triton,
)

MATRICES = (
    ("poisson2d-5pt", matrices.poisson2d),
    ("power-law", matrices.power_law),
    ("random-8", functools.partial(matrices.random_uniform, per_row=8)),
    ("hub-rows", matrices.hub_rows),
)


def variants(default: BlockSizes, k: int) -> dict[str, BlockSizes]:
    """The defaults and a grid around them: row blocks by lanes (each with a row cap of at
    least 64 entries), and the defaults with other warp counts and pipelining depths.
    k = 1: 64-256 rows by 1-8 lanes, the long-row knobs and the row cap; k = 8: 16-64 rows
    by 1-4 lanes; k = 64: 4-32 rows by 1-4 lanes. Up to k = 8 the grid also runs keeping
    the operand's lines in cache, and the defaults stream the entries, alone and with the
    operand kept; past k = 16, column tiles of 16 and 32 (the same rows, and rows
    scaled up to keep the tile's values); where the column tiles divide k, vector loads;
    2 and 4 steps a loop iteration (`unroll`: their loads' latencies overlap), and up to
    k = 8 two steps with both hints; rows longer than chunks of 8 and 64 long-row steps
    summed by chunks (`chunk_steps`). Smaller row blocks take fewer registers a thread, so
    more warps fit on an SM (benchmarks/results/gpu-2026-11-27-h200.txt)."""
    change = functools.partial(dataclasses.replace, default)
    grid = {1: ((64, 128, 256), (1, 2, 4, 8)), 8: ((16, 32, 64), (1, 2, 4))}
    rows_options, lanes_options = grid.get(k, ((4, 8, 16, 32), (1, 2, 4)))
    found = {"default": default}
    for rows in rows_options:
        for lanes in lanes_options:
            found[f"{rows} rows x {lanes} lanes"] = change(
                block_rows=rows, lanes=lanes, row_steps=max(8, 64 // lanes)
            )
    if k <= 8:  # the grid again keeping the operand's lines; the entries streamed, apart
        found |= {
            f"{label}, keep operand": dataclasses.replace(blocks, keep_operand=True)
            for label, blocks in found.items()
        }
        found["stream entries"] = change(stream_entries=True)
        found["both hints"] = change(stream_entries=True, keep_operand=True)
    for block_k in (16, 32) if k > 16 else ():
        if block_k < default.block_k:
            rows = min(default.block_rows * default.block_k // block_k, 128)
            found[f"{block_k} columns"] = change(block_k=block_k)
            found[f"{block_k} columns x {rows} rows"] = change(block_k=block_k, block_rows=rows)
    if k % default.block_k == 0 and k > 1:  # whole column tiles: the rows' columns as vectors
        found["vector loads"] = change(vector_loads=True)
    found |= {f"unroll {steps}": change(unroll=steps) for steps in (2, 4)}
    if k <= 8:
        found["unroll 2, both hints"] = change(unroll=2, stream_entries=True, keep_operand=True)
    found |= {
        "2 warps": change(num_warps=2),
        "8 warps": change(num_warps=8),
        "1 stage": change(num_stages=1),
        "3 stages": change(num_stages=3),
    }
    if k == 1:
        found |= {
            "long lanes /4": change(long_lanes=max(default.long_lanes // 4, 16)),
            "long lanes x4": change(long_lanes=default.long_lanes * 4),
            "row cap /2": change(row_steps=max(default.row_steps // 2, 1)),
            "row cap x2": change(row_steps=default.row_steps * 2),
            "row cap x4": change(row_steps=default.row_steps * 4),
        }
    found |= {f"chunks of {steps} steps": change(chunk_steps=steps) for steps in (8, 64)}
    return found


def selected(grid: dict[str, BlockSizes], only) -> dict[str, BlockSizes]:
    """The defaults and the variants of `grid` whose label contains one of `only` (all of
    them if `only` is empty)."""
    return {
        label: blocks
        for label, blocks in grid.items()
        if label == "default" or not only or any(part in label for part in only)
    }


def _compiled(blocks: BlockSizes, shape, args, gradient: bool, options):
    """The jitted loop of products of `args` (`data, x, indices, indptr`), or with
    `gradient` the gradient step of `args` (`g, data, x, indices, indptr`), compiled;
    `options`: the kernels' `interpret` and `platform`."""
    kernel = csr_matmul_pullback_triton if gradient else csr_matmul_triton
    kernel = functools.partial(kernel, shape=shape, block_sizes=blocks, **options)
    if gradient:
        return jax.jit(kernel).lower(*args).compile()

    def loop(data, x, indices, indptr):
        return gpu.products_in_a_loop(lambda y: kernel(data, y, indices, indptr), x)

    return jax.jit(loop).lower(*args).compile()


def sweep(
    rows: int, ks, found: list[dict], names, only=(), gradient: bool = False, options=None
) -> None:
    """Appends each matrix of `names` and each `k`'s times to `found` as they are
    measured (an interrupt keeps those done), for the variants `selected` by `only`: per
    product, or with `gradient` per gradient step. `options`: the kernels' `interpret`
    and `platform` (the smoke test's interpret mode)."""
    options = options or {}
    what = "gradient step" if gradient else "product"
    threads = concurrent.futures.ThreadPoolExecutor(max(os.cpu_count() or 1, 1))
    for name, build in MATRICES:
        if name not in names:
            continue
        csr = scipy.sparse.csr_array(gpu._normalized(build(rows, np.random.default_rng(0))))
        m, n = csr.shape
        data, indices, indptr = (jnp.asarray(a) for a in (csr.data, csr.indices, csr.indptr))
        data = data.astype(jnp.float32)
        for k in ks:
            x = jnp.asarray(np.random.default_rng(1).standard_normal((n, k)), jnp.float32)
            args = (data, x, indices, indptr)
            if gradient:
                g = jnp.asarray(np.random.default_rng(2).standard_normal((m, k)), jnp.float32)
                args = (g, *args)
            default = BlockSizes().filled(platform="cuda", num_cols=k, mean_row_length=csr.nnz / m)
            grid = selected(variants(default, k), only)
            jobs = {
                label: threads.submit(_compiled, blocks, (m, n), args, gradient, options)
                for label, blocks in grid.items()
            }
            # Every compilation ends before any timing: a thread still lowering holds the
            # GIL and would delay the timed calls' launches.
            compiled = {}
            for label, job in jobs.items():
                try:
                    compiled[label] = job.result()
                except Exception as error:  # a variant Triton cannot compile: say so, go on
                    print(f"  {name} k={k} {label}: {type(error).__name__}: {str(error)[:160]}")
            calls = 1 if gradient else gpu.LOOP
            times = {
                label: gpu.median_time(program, *args) / calls
                for label, program in compiled.items()
            }
            best = min(times, key=times.get)
            cells = "  ".join(f"{label} {t * 1e6:.1f}" for label, t in times.items())
            title = f"{name} k={k}" + (", gradient step" if gradient else "")
            print(f"{title}: best '{best}' {times[best] * 1e6:.1f} us | {cells}", flush=True)
            print(f"    default: {default}\n    best: {grid[best]}", flush=True)
            found.append(
                {
                    "matrix": name,
                    "k": k,
                    "timed": what,
                    "mean_row_length": csr.nnz / m,
                    "us": {label: t * 1e6 for label, t in times.items()},
                    "blocks": {label: dataclasses.asdict(grid[label]) for label in times},
                }
            )


def main():
    known = [name for name, _ in MATRICES]
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2**22)
    parser.add_argument("--ks", default="1,8,64", help="columns of the dense operand")
    usual = ",".join(name for name in known if name != "hub-rows")
    parser.add_argument("--matrices", default=usual, help=f"some of {known}")
    parser.add_argument(
        "--only", default="", help="comma-separated parts of the variants' labels to time"
    )
    parser.add_argument(
        "--gradient", action="store_true", help="time the gradient step instead of the product"
    )
    parser.add_argument("--out", type=pathlib.Path, default=None)
    args = parser.parse_args()
    names = args.matrices.split(",")
    if unknown := sorted(set(names) - set(known)):
        sys.exit(f"--matrices: unknown {unknown}; the sweep has {known}")
    if jax.default_backend() != "gpu":
        sys.exit("benchmarks/gpu_csr_tiles.py needs a GPU.")
    found = []
    try:
        only = tuple(part for part in args.only.split(",") if part)
        ks = [int(k) for k in args.ks.split(",")]
        sweep(args.rows, ks, found, names, only, args.gradient)
    finally:
        if args.out:
            args.out.write_text(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
