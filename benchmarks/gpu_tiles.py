"""Tile sweep for the Triton DIA kernels on this GPU: time per product (median of a
jitted loop of dependent products) over block sizes and warps, to pick the defaults.

    python benchmarks/gpu_tiles.py [--ks 1,8,64] [--products-only]
"""

import argparse
import functools
import itertools
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import gpu  # noqa: E402
import matrices  # noqa: E402

from jaxsparse.kernels.triton_dia import BlockSizes, dia_matmul_triton, dia_sddmm_triton  # noqa: E402

LOOP = gpu.LOOP


def _time(fn, *args) -> float:
    """Seconds per product of `fn`, a jitted loop of `LOOP` products."""
    return gpu.median_time(fn, *args) / LOOP


def _looped(step):
    return jax.jit(lambda a, y: lax.fori_loop(0, LOOP, lambda _, y: step(a, y), y))


def sweep(name, build, rows, k, products_only=False):
    S = build(rows, np.random.default_rng(0))
    offsets, shape = tuple(int(o) for o in S.offsets), S.shape
    data = jnp.asarray(S.data / np.abs(S.data).sum(0).max(), jnp.float32)
    x = jnp.asarray(np.random.default_rng(1).standard_normal((shape[1], k)), jnp.float32)
    ideal = (len(offsets) * shape[1] + 2 * shape[0] * k) * 4
    results = []
    for rows_, warps in itertools.product((128, 256, 512, 1024, 2048), (4, 8)):
        cols = min(k, 64)
        if rows_ * cols > 32768:
            continue
        blocks = BlockSizes(block_rows=rows_, block_cols=cols, num_warps=warps)
        product = functools.partial(
            dia_matmul_triton, offsets=offsets, shape=shape, block_sizes=blocks
        )
        t = _time(_looped(product), data, x)
        results.append(("matmul", rows_, cols, warps, t, ideal / t / 1e9))
    for rows_, cols, warps in itertools.product((32, 64, 128, 256, 512), (8, 16, 32, 64), (4, 8)):
        if products_only or cols > max(k, 8) or (k == 1 and cols != 8) or rows_ * cols > 16384:
            continue
        blocks = BlockSizes(block_rows=rows_, block_cols=cols, num_warps=warps)
        sddmm = jax.jit(
            functools.partial(dia_sddmm_triton, offsets=offsets, shape=shape, block_sizes=blocks)
        )
        t = _time(sddmm, x, x) * LOOP
        results.append(("sddmm", rows_, cols, warps, t, ideal / t / 1e9))
    for kind in ("matmul", "sddmm"):
        best = sorted((r for r in results if r[0] == kind), key=lambda r: r[4])[:4]
        for r in best:
            tile = f"rows={r[1]} cols={r[2]} warps={r[3]}"
            print(f"{name} k={k} {kind}: {tile}: {r[4] * 1e6:.1f} us, {r[5]:.0f} GB/s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ks", default="1,8,64", help="columns of the dense operand")
    parser.add_argument("--products-only", action="store_true", help="no data-gradient tiles")
    args = parser.parse_args()
    for k in (int(k) for k in args.ks.split(",")):
        sweep("5pt", matrices.poisson2d, 2**22, k, args.products_only)
        sweep("27pt", matrices.stencil27, 2**22, k, args.products_only)
