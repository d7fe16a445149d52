"""Benchmark section: `jax.vmap` over the values of 64 matrices with one structure (issue 14).

DIA 5-point stencil and CSR with 8 uniform random entries per row, at 2^16 rows, float32,
a shared operand of k = 1 and 8 columns. Systems: jaxsparse under `jax.vmap` (one batched
product); `lax.map` of the single product (what `vmap` ran before); for DIA, a batched
`jax.numpy` formulation written by hand (one shifted product per diagonal). Each result is
checked against the `lax.map` one before it is timed. Each system is timed as a single
call and per batched product inside a jitted loop of `systems.LOOP_PRODUCTS` (whose
buffers XLA reuses: a single call at k = 8 also faults in a fresh 134 MB output).
"""

import time

import jax
import jax.numpy as jnp
import matrices
import numpy as np
import timing
from jax import lax
from systems import LOOP_PRODUCTS, next_operand

import jaxsparse as js

BATCH, ROWS, KS = 64, 2**16, (1, 8)
QUICK_BATCH, QUICK_ROWS = 4, 2**10
TOLERANCE = 1e-4


def _dia_case(rows, batch, rng):
    dia = matrices.poisson2d(rows, rng)
    offsets, shape = tuple(int(o) for o in dia.offsets), dia.shape
    values = rng.standard_normal((batch, len(offsets), shape[1])).astype(np.float32)

    def product(data, x):
        return js.DIAMatrix(data, offsets, shape) @ x

    def by_hand(values, x):
        """`sum_d pad(values[:, d, shifted] * x[shifted])`, batched over the values."""
        m, n = shape
        total = jnp.zeros((values.shape[0], m, x.shape[1]), x.dtype)
        for d, off in enumerate(offsets):
            lo, hi = max(0, -off), min(m, n - off)
            term = values[:, d, lo + off : hi + off, None] * x[None, lo + off : hi + off]
            total = total + jnp.pad(term, ((0, 0), (lo, m - hi), (0, 0)))
        return total

    moved = 4 * (values.size + shape[1])  # + the operand's and output's columns, per k
    return shape, values, (), product, by_hand, moved, batch * shape[0] + shape[1]


def _csr_case(rows, batch, rng):
    csr = matrices.random_uniform(rows, rng, per_row=8)
    shape = csr.shape
    structure = (jnp.asarray(csr.indices, jnp.int32), jnp.asarray(csr.indptr, jnp.int32))
    values = rng.standard_normal((batch, csr.nnz)).astype(np.float32)

    def product(data, x, indices, indptr):
        return js.CSRMatrix(data, indices, indptr, shape) @ x

    moved = 4 * (values.size + csr.nnz + shape[0] + 1)
    return shape, values, structure, product, None, moved, batch * shape[0] + shape[1]


def _in_loop(batched_product):
    """A jitted loop of `LOOP_PRODUCTS` batched products; each reads one entry of the
    previous result, so none is hoisted out of the loop."""

    def loop(values, x, *structure):
        first = x[0, 0]

        def body(_, carry):
            x, total = carry
            y = batched_product(values, x, *structure)
            return next_operand(x, first, y[0, 0, 0]), total + y[-1, -1, -1]

        return lax.fori_loop(0, LOOP_PRODUCTS, body, (x, jnp.zeros((), x.dtype)))[1]

    return jax.jit(loop)


def run(quick: bool, budget: dict) -> list[dict]:
    """Records `{format, k, system, ok, first_call_s, median_s, repeats, loop_s, bytes}`
    (`loop_s`: per batched product in the loop)."""
    rows, batch = (QUICK_ROWS, QUICK_BATCH) if quick else (ROWS, BATCH)
    rng = np.random.default_rng(64)
    records = []
    for fmt, make in (("dia", _dia_case), ("csr", _csr_case)):
        shape, values, structure, product, by_hand, moved, columns_moved = make(rows, batch, rng)
        values = jax.device_put(values)
        for k in (1,) if quick else KS:
            x = jax.device_put(rng.standard_normal((shape[1], k)).astype(np.float32))
            shared = (None,) * (1 + len(structure))
            systems = {
                "jaxsparse-vmap": jax.vmap(product, in_axes=(0, *shared)),
                "lax.map": lambda v, x, *s: lax.map(lambda one: product(one, x, *s), v),  # noqa: B023
            }
            if by_hand is not None:
                systems["hand-jnp"] = by_hand
            reference = None
            for system in ("lax.map", *(s for s in systems if s != "lax.map")):
                fn = jax.jit(systems[system])
                call = timing.blocking(fn, values, x, *structure)
                start = time.perf_counter()
                result = np.asarray(call(), np.float64)
                first_call_s = time.perf_counter() - start
                reference = result if reference is None else reference
                error = float(np.max(np.abs(result - reference)))
                record = {"format": fmt, "k": k, "system": system, "rows": shape[0]}
                record["ok"] = error <= TOLERANCE * max(1.0, float(np.max(np.abs(reference))))
                record["bytes"] = moved + 4 * k * columns_moved
                record.update(timing.time_call(call, first_call_s=first_call_s, **budget))
                looped = timing.blocking(_in_loop(systems[system]), values, x, *structure)
                loop_budget = {**budget, "max_repeats": max(3, budget["max_repeats"] // 5)}
                loop_s = timing.time_call(looped, **loop_budget)["median_s"]
                record["loop_s"] = loop_s / LOOP_PRODUCTS
                records.append(record)
    return records


def table(records, bandwidth) -> str:
    numpy_gbs = bandwidth["numpy_add_gbs"]
    lines = [
        f"\n== batches: vmap over {records[0]['rows']}-row matrices' values (float32), "
        "median [ms] single call / per product in a loop, and GB/s of the byte model ==",
        f"{'format':<6} {'k':>2} {'system':<15} {'single':>8} {'loop':>8} {'first call':>11} "
        f"{'GB/s':>6}",
    ]
    for r in records:
        lines.append(
            f"{r['format']:<6} {r['k']:>2} {r['system']:<15} {r['median_s'] * 1e3:>8.2f} "
            f"{r['loop_s'] * 1e3:>8.2f} {r['first_call_s'] * 1e3:>11.1f} "
            f"{r['bytes'] / r['loop_s'] / 1e9:>6.1f}" + ("" if r["ok"] else "  WRONG")
        )
    times = {(r["format"], r["k"], r["system"]): r for r in records}
    lines.append("targets (single / loop):")
    for (fmt, k, system), r in times.items():
        if system != "jaxsparse-vmap":
            continue

        def ratio(other, r=r, fmt=fmt, k=k):
            peer = times[(fmt, k, other)]
            return f"{peer['median_s'] / r['median_s']:.2f} / {peer['loop_s'] / r['loop_s']:.2f}"

        line = f"  {fmt} k={k}: lax.map / vmap {ratio('lax.map')}"
        line += " (CSR target >= 1.5)" if fmt == "csr" else ""
        if (fmt, k, "hand-jnp") in times:
            line += f", hand-jnp / vmap {ratio('hand-jnp')} (target >= 1)"
        if fmt == "dia" and k == 1:
            fractions = [r["bytes"] / r[key] / 1e9 / numpy_gbs for key in ("median_s", "loop_s")]
            line += (
                f", {100 * fractions[0]:.0f} / {100 * fractions[1]:.0f}% of streaming "
                "bandwidth (target 70%)"
            )
        lines.append(line)
    return "\n".join(lines)
