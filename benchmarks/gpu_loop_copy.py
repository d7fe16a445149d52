"""What a jitted loop adds to each product on a GPU: XLA's while loop keeps its carried
operand in one buffer, and a product cannot write over the operand it reads, so every
iteration may end with a copy of the product into the carry's buffer.

Per matrix and `k` (float32, 2^22 rows, `"auto"`), time per product of `gpu.LOOP`
dependent products three ways: a `lax.fori_loop`, the same with `unroll=2` (two products
an iteration: the second can write over the first's operand), and all of them unrolled in
one program; beside each, the copies in the compiled program (`copy` instructions of the
optimized HLO) and what copying the carried operand once costs at the measured copy
bandwidth.

    python benchmarks/gpu_loop_copy.py [--rows 4194304] [--ks 1,8]
"""

import argparse
import concurrent.futures
import functools
import os
import pathlib
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import gpu  # noqa: E402
import matrices  # noqa: E402

import jaxsparse as js  # noqa: E402

CASES = (
    ("DIA poisson2d-5pt", matrices.poisson2d, js.DIAMatrix.from_scipy),
    ("CSR poisson2d-5pt", matrices.poisson2d, js.CSRMatrix.from_scipy),
)


def _programs(matrix, x) -> dict[str, gpu._Program]:
    def loop(matrix, x, unroll=1):
        return lax.fori_loop(0, gpu.LOOP, lambda _, y: matrix @ y, x, unroll=unroll)

    def unrolled(matrix, x):
        return functools.reduce(lambda y, _: matrix @ y, range(gpu.LOOP), x)

    return {
        "loop": gpu._lowered(loop, matrix, x, products=gpu.LOOP),
        "loop, unroll 2": gpu._lowered(
            functools.partial(loop, unroll=2), matrix, x, products=gpu.LOOP
        ),
        "unrolled": gpu._lowered(unrolled, matrix, x, products=gpu.LOOP),
    }


def _copies(compiled) -> int:
    """`copy` instructions (and asynchronous copy starts) in the optimized HLO."""
    return len(re.findall(r"= \S+ copy(?:-start)?\(", compiled.as_text()))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2**22)
    parser.add_argument("--ks", default="1,8")
    args = parser.parse_args(argv)
    copy_gbs = gpu.copy_bandwidth()
    print(f"{jax.devices()[0].device_kind}, JAX {jax.__version__}; copy {copy_gbs:.0f} GB/s")
    threads = concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1)
    rng = np.random.default_rng(0)
    for name, build, convert in CASES:
        matrix = convert(gpu._normalized(build(args.rows, rng)))
        for k in (int(k) for k in args.ks.split(",")):
            x = jnp.asarray(rng.standard_normal((matrix.shape[1], k), np.float32))
            programs = _programs(matrix, x)
            compiled = gpu._compiled({name: programs}, threads)[name]
            times = gpu._times(programs, compiled)
            carry_us = 2 * x.nbytes / copy_gbs / 1e3
            figures = "  ".join(
                f"{figure} {times[figure] * 1e6:.1f} us ({_copies(compiled[figure])} copies)"
                for figure in programs
            )
            print(f"{name} k={k}: {figures}; one copy of the operand {carry_us:.1f} us")


if __name__ == "__main__":
    main()
