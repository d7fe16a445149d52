"""The CSR transposed product `A.T @ g` (the operand's gradient) on a GPU, by three routes,
to choose how a gradient step gets at `A^T`:

- `atomic scatter`: `csr_matmul_t_triton` as a GPU runs it for float32 (each entry added
  into its column's row of the result with an atomic addition; bits vary run to run);
- `carried transpose`: the product kernels on `A^T`'s structure computed once on the host
  (`perm`, the transposed indices and index pointer: what a `CSRMatrix` could carry), the
  values gathered `data[perm]` in the call, since they change from step to step;
- `sort per call`: the same kernels on a structure rebuilt by a sort in every call
  (`JAXSPARSE_DETERMINISTIC=1`'s route).

Per matrix and `k`, in microseconds: each route per product in a jitted loop of `gpu.LOOP`
dependent products (`g <- A.T @ g`, the matrix scaled so that neither its rows nor its
columns grow a vector) and as a single call, the product `A @ x` in the same loop, and a
whole gradient step (product, transposed product, sampled product) as a single call with
the atomic and the carried routes, and with the two gradients in one pass ("one pass":
`csr_matmul_pullback_triton`, the sampled product beside the atomic scatter, what
`jax.grad` in the values and `x` runs on a GPU). Every route's single call is checked
against scipy.

An experiment beside them: "relaxed" repeats the atomic scatter and the one pass with
their atomic additions lowered in relaxed memory order (`relaxed_atomics`). Pallas lowers
every atomic with acquire-release order at GPU scope, which on sm_90a puts a GPU-wide
memory fence before each atomic and two block barriers around a step's atomics
(benchmarks/results/gpu-csr-sass-2026-11-28.txt); the additions into a result that only a
later kernel reads need no order. Pallas offers no other order, so the experiment
replaces JAX's private lowering function while its programs are lowered; the library does
not.
float32, the CSR matrices of `benchmarks/gpu.py`; programs compiled on threads first.

    python benchmarks/gpu_transposed.py [--rows 4194304] [--ks 1,8] [--out transposed.json]
"""

import argparse
import concurrent.futures
import contextlib
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

from jaxsparse.kernels._csr_common import matmul_t_by_transposed_structure  # noqa: E402
from jaxsparse.kernels.triton_csr import (  # noqa: E402
    csr_matmul_pullback_triton,
    csr_matmul_t_triton,
    csr_matmul_triton,
    csr_sddmm_triton,
)

MATRICES = (
    ("poisson2d-5pt", matrices.poisson2d),
    ("random-8", functools.partial(matrices.random_uniform, per_row=8)),
    ("power-law", matrices.power_law),
)


def _scaled(csr: scipy.sparse.csr_array) -> scipy.sparse.csr_array:
    """`csr` over the larger of its largest absolute row and column sums, float32."""
    magnitude = abs(csr)
    norm = max(magnitude.sum(axis=0).max(), magnitude.sum(axis=1).max())
    return scipy.sparse.csr_array(csr / norm).astype(np.float32)


def _carried(csr: scipy.sparse.csr_array):
    """`(perm, indices_t, indptr_t)`: `A^T`'s structure, `data[perm]` its values."""
    positions = scipy.sparse.csr_array(
        (np.arange(csr.nnz, dtype=np.float64), csr.indices, csr.indptr), shape=csr.shape
    )
    transposed = scipy.sparse.csr_array(positions.T)
    transposed.sort_indices()
    perm = transposed.data.astype(np.int32)
    return tuple(jnp.asarray(a, jnp.int32) for a in (perm, transposed.indices, transposed.indptr))


@contextlib.contextmanager
def relaxed_atomics():
    """Inside: Pallas Triton lowers atomic operations in relaxed memory order at GPU scope
    (JAX's private `_atomic_rmw`, replaced for the block). JAX's caches are cleared on
    entry and exit, so no program lowered outside is reused inside, nor one inside after."""
    from jax._src.lib.triton import dialect as tt
    from jax._src.pallas.triton import lowering

    original = lowering._atomic_rmw

    def relaxed(op, ptr, val, mask=None, semantic=None, sync_scope=None):
        del semantic, sync_scope
        return original(
            op, ptr, val, mask=mask, semantic=tt.MemSemantic.RELAXED, sync_scope=tt.MemSyncScope.GPU
        )

    jax.clear_caches()
    lowering._atomic_rmw = relaxed
    try:
        yield
    finally:
        lowering._atomic_rmw = original
        jax.clear_caches()


def routes(shape, options) -> dict:
    """`name -> fn(data, g, indices, indptr, perm, indices_t, indptr_t)`: `A.T @ g`."""
    m, n = shape

    def atomic(data, g, indices, indptr, *_):
        return csr_matmul_t_triton(data, g, indices, indptr, shape=(m, n), **options)

    def carried(data, g, indices, indptr, perm, indices_t, indptr_t):
        return csr_matmul_triton(data[perm], g, indices_t, indptr_t, shape=(n, m), **options)

    def sort(data, g, indices, indptr, *_):
        product = functools.partial(csr_matmul_triton, **options)
        return matmul_t_by_transposed_structure(product, data, g, indices, indptr, shape=(m, n))

    return {"atomic scatter": atomic, "carried transpose": carried, "sort per call": sort}


def _gradient_step(transposed, shape, options):
    """`(A @ x, A.T @ g, the sampled product)`: a gradient step in the values and `x`."""

    def step(data, x, g, indices, indptr, *carried):
        y = csr_matmul_triton(data, x, indices, indptr, shape=shape, **options)
        dx = transposed(data, g, indices, indptr, *carried)
        ddata = csr_sddmm_triton(g, x, indices, indptr, shape=shape, **options)
        return y, dx, ddata

    return step


def _route_programs(name, transposed, shape, structure, data, x, options) -> dict:
    """One route's lowered programs: a loop of `gpu.LOOP` transposed products, a single
    call and (but for the sort per call) a gradient step."""
    indices, indptr, *carried = structure
    args = (data, x, indices, indptr, *carried)

    def loop(data, g, *rest):
        return gpu.products_in_a_loop(lambda y: transposed(data, y, *rest), g)

    figures = {
        "loop_s": gpu._lowered(loop, *args, products=gpu.LOOP),
        "single_s": gpu._lowered(transposed, *args),
    }
    if name != "sort per call":
        step = _gradient_step(transposed, shape, options)
        figures["gradient_s"] = gpu._lowered(step, data, x, x, indices, indptr, *carried)
    return figures


def _programs(shape, structure, data, x, options) -> dict:
    """Every timed program of one matrix and `k`, lowered: `{system: {figure: program}}`.
    On a GPU also the atomic scatter and the one pass lowered under `relaxed_atomics`
    (interpret mode emulates the atomics: nothing to relax)."""
    indices, indptr, *_ = structure
    transposed = routes(shape, options)
    programs = {
        name: _route_programs(name, route, shape, structure, data, x, options)
        for name, route in transposed.items()
    }
    product = functools.partial(csr_matmul_triton, shape=shape, **options)

    def product_loop(data, x, indices, indptr):
        return gpu.products_in_a_loop(lambda y: product(data, y, indices, indptr), x)

    programs["product"] = {
        "loop_s": gpu._lowered(product_loop, data, x, indices, indptr, products=gpu.LOOP)
    }

    def one_pass(data, x, g, indices, indptr):
        y = product(data, x, indices, indptr)
        return y, *csr_matmul_pullback_triton(g, data, x, indices, indptr, shape=shape, **options)

    one_pass_args = (data, x, x, indices, indptr)
    programs["one pass"] = {"gradient_s": gpu._lowered(one_pass, *one_pass_args)}
    if not options.get("interpret"):
        atomic = transposed["atomic scatter"]
        with relaxed_atomics():
            programs["atomic scatter, relaxed"] = _route_programs(
                "atomic scatter", atomic, shape, structure, data, x, options
            )
            programs["one pass, relaxed"] = {"gradient_s": gpu._lowered(one_pass, *one_pass_args)}
    return programs


def run(rows: int, ks, options=None, found=None) -> list[dict]:
    """Every matrix and `k`, appended to `found` as measured (an interrupt keeps those
    done). `options`: the kernels' `interpret` and `platform` (interpret mode on a CPU)."""
    options = options or {}
    found = [] if found is None else found
    threads = concurrent.futures.ThreadPoolExecutor(max(os.cpu_count() or 1, 1))
    try:
        for name, build in MATRICES:
            csr = _scaled(scipy.sparse.csr_array(build(rows, np.random.default_rng(0))))
            structure = (jnp.asarray(csr.indices), jnp.asarray(csr.indptr), *_carried(csr))
            data = jnp.asarray(csr.data)
            for k in ks:
                x = jnp.asarray(np.random.default_rng(1).standard_normal((csr.shape[1], k)))
                x = x.astype(jnp.float32)
                programs = _programs(csr.shape, structure, data, x, options)
                compiled = gpu._compiled(programs, threads)
                want = csr.T.astype(np.float64) @ np.asarray(x, np.float64)
                case = {"matrix": name, "k": k, "nnz": csr.nnz, "errors": {}, "us": {}}
                for system, figures in programs.items():
                    times = gpu._times(figures, compiled[system])
                    for figure, seconds in times.items():
                        case["us"][f"{system}, {figure[:-2]}"] = seconds * 1e6
                    if "single_s" in figures:
                        got = compiled[system]["single_s"](data, x, *structure)
                        case["errors"][system] = gpu._relative_error(got, want)
                found.append(case)
                cells = "  ".join(f"{label} {us:.1f}" for label, us in case["us"].items())
                print(f"{name} k={k}: {cells}", flush=True)
    finally:  # an interrupt leaves no compilation queued
        threads.shutdown(wait=False, cancel_futures=True)
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2**22)
    parser.add_argument("--ks", default="1,8")
    parser.add_argument("--out", type=pathlib.Path, default=None)
    args = parser.parse_args()
    if jax.default_backend() != "gpu":
        sys.exit("benchmarks/gpu_transposed.py needs a GPU.")
    found = []
    try:
        run(args.rows, tuple(int(k) for k in args.ks.split(",")), found=found)
    except KeyboardInterrupt:  # `make gpu-check`'s time limit: keep what was measured
        print(f"interrupted after {len(found)} cases", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"device": jax.devices()[0].device_kind, "cases": found}))


if __name__ == "__main__":
    main()
