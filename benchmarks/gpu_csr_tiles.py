"""Tile sweep for the Triton CSR product on this GPU: time per product (median of a jitted
loop of dependent products) over the block sizes around the defaults, to pick them.

    python benchmarks/gpu_csr_tiles.py [--rows 4194304]
"""

import argparse
import dataclasses
import functools
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse
from jax import lax

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import gpu  # noqa: E402
import matrices  # noqa: E402

from jaxsparse.kernels.triton_csr import BlockSizes, csr_matmul_triton  # noqa: E402

MATRICES = (
    ("poisson2d-5pt", matrices.poisson2d),
    ("random-8", functools.partial(matrices.random_uniform, per_row=8)),
    ("power-law", matrices.power_law),
)


def variants(default: BlockSizes, k: int) -> dict[str, BlockSizes]:
    """The defaults and their neighbours: each changes one knob (two for equal tiles)."""
    change = functools.partial(dataclasses.replace, default)
    found = {
        "default": default,
        "rows x2": change(block_rows=default.block_rows * 2),
        "rows /2": change(block_rows=max(default.block_rows // 2, 1)),
        "8 warps": change(num_warps=8),
    }
    if k == 1:
        # Smaller row blocks need fewer registers a thread, so more warps fit on an SM
        # (counts: benchmarks/results/gpu-csr-registers-2026-11-26.txt).
        found |= {
            "rows /4": change(block_rows=max(default.block_rows // 4, 1)),
            "rows /8": change(block_rows=max(default.block_rows // 8, 1)),
            "lanes /2, rows x2": change(
                lanes=max(default.lanes // 2, 1), block_rows=default.block_rows * 2
            ),
            # One or two entries of each row a step, as in a gather per row and step;
            # the row cap stays at 64 entries.
            "1 lane x 128 rows": change(lanes=1, block_rows=128, row_steps=64),
            "1 lane x 256 rows": change(lanes=1, block_rows=256, row_steps=64),
            "2 lanes x 256 rows": change(lanes=2, block_rows=256, row_steps=32),
            "row steps /2": change(row_steps=max(default.row_steps // 2, 1)),
            "long lanes /4": change(long_lanes=max(default.long_lanes // 4, 16)),
            "long programs /4": change(long_programs=max(default.long_programs // 4, 1)),
        }
    return found


def sweep(rows: int, ks=(1, 8)) -> list[str]:
    lines = []
    for name, build in MATRICES:
        csr = scipy.sparse.csr_array(gpu._normalized(build(rows, np.random.default_rng(0))))
        m, n = csr.shape
        data, indices, indptr = (jnp.asarray(a) for a in (csr.data, csr.indices, csr.indptr))
        data = data.astype(jnp.float32)
        for k in ks:
            x = jnp.asarray(np.random.default_rng(1).standard_normal((n, k)), jnp.float32)
            default = BlockSizes().filled(platform="cuda", num_cols=k, mean_row_length=csr.nnz / m)
            times = {}
            for label, blocks in variants(default, k).items():
                product = functools.partial(csr_matmul_triton, shape=(m, n), block_sizes=blocks)

                def loop(data, x, indices, indptr, product=product):
                    step = lambda _, y: product(data, y, indices, indptr)  # noqa: E731
                    return lax.fori_loop(0, gpu.LOOP, step, x)

                times[label] = gpu.median_time(jax.jit(loop), data, x, indices, indptr) / gpu.LOOP
            best = min(times, key=times.get)
            cells = "  ".join(f"{label} {t * 1e6:.1f}" for label, t in times.items())
            lines.append(f"{name} k={k}: best '{best}' {times[best] * 1e6:.1f} us | {cells}")
            print(lines[-1], flush=True)
            print(f"    default: {default}", flush=True)
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2**22)
    args = parser.parse_args()
    if jax.default_backend() != "gpu":
        sys.exit("benchmarks/gpu_csr_tiles.py needs a GPU.")
    sweep(args.rows)


if __name__ == "__main__":
    main()
