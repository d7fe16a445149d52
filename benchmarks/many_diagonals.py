"""Benchmark section: DIA matrices with many diagonals (issue 14).

A band of `ndiag` diagonals around the main one, float32, one column: the first call of a
jitted product and of a jitted gradient (`jax.grad` of `sum(sin(A @ x))` in the values and
`x`, a realistic loss), which is mostly compilation, and their warm medians; scipy's DIA
product beside them. Before the products looped over the diagonals, n = 2000 with 1000
diagonals took 18 s (product) and 40 s (gradient) to compile.
"""

import time

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse
import timing

import jaxsparse as js

CASES = ((2000, 100), (2000, 300), (2000, 1000), (20000, 301))
QUICK_CASES = ((500, 100),)
TOLERANCE = 1e-4


def band(count: int) -> tuple[int, ...]:
    return tuple(range(-(count // 2), count - count // 2))


def run(quick: bool, budget: dict) -> list[dict]:
    """Records `{rows, ndiag, op, system, ok, first_call_s, median_s, repeats}`."""
    rng = np.random.default_rng(14)
    records = []
    for n, ndiag in QUICK_CASES if quick else CASES:
        offsets = band(ndiag)
        data = rng.standard_normal((ndiag, n)).astype(np.float32)
        x = rng.standard_normal(n).astype(np.float32)
        twin = scipy.sparse.dia_array((data, np.asarray(offsets)), shape=(n, n))
        expected = twin @ x.astype(np.float64)
        dj, xj = jax.device_put(data), jax.device_put(x)

        def loss(d, x, offsets=offsets, n=n):
            return jnp.sum(jnp.sin(js.DIAMatrix(d, offsets, (n, n)) @ x))

        forward = jax.jit(lambda d, x, offsets=offsets, n=n: js.DIAMatrix(d, offsets, (n, n)) @ x)
        gradient = jax.jit(jax.grad(loss, argnums=(0, 1)))
        case = {"rows": n, "ndiag": ndiag}
        for op, fn in (("forward", forward), ("gradient", gradient)):
            call = timing.blocking(fn, dj, xj)
            start = time.perf_counter()
            result = call()  # the first call: compilation and one run
            first_call_s = time.perf_counter() - start
            if op == "forward":
                error = float(np.max(np.abs(np.asarray(result, np.float64) - expected)))
                ok = error <= TOLERANCE * max(1.0, float(np.max(np.abs(expected))))
            else:
                ok = all(bool(jnp.all(jnp.isfinite(g))) for g in result)
            record = {**case, "op": op, "system": "jaxsparse", "ok": ok}
            record.update(timing.time_call(call, first_call_s=first_call_s, **budget))
            records.append(record)
        records.append(
            {
                **case,
                "op": "forward",
                "system": "scipy-dia",
                "ok": True,
                **timing.time_call(lambda twin=twin, x=x: twin @ x, **budget),
            }
        )
    return records


def table(records) -> str:
    lines = [
        "\n== many diagonals: a band of ndiag diagonals, float32, k = 1 ==",
        f"{'rows':>6} {'ndiag':>6} {'op':<9} {'first call [s]':>15} {'warm [ms]':>10} "
        f"{'scipy DIA [ms]':>15} {'warm / scipy':>13}",
    ]
    scipy_times = {
        (r["rows"], r["ndiag"]): r["median_s"] for r in records if r["system"] == "scipy-dia"
    }
    for r in records:
        if r["system"] != "jaxsparse":
            continue
        scipy_s = scipy_times[(r["rows"], r["ndiag"])]
        ratio = r["median_s"] / scipy_s if r["op"] == "forward" else None
        lines.append(
            f"{r['rows']:>6} {r['ndiag']:>6} {r['op']:<9} {r['first_call_s']:>15.2f} "
            f"{r['median_s'] * 1e3:>10.3f} "
            + (f"{scipy_s * 1e3:>15.3f} {ratio:>13.2f}" if ratio else f"{'':>15} {'':>13}")
            + ("" if r["ok"] else "  WRONG")
        )
    lines.append(
        "targets (n = 2000, 1000 diagonals): first product <= 2 s, first gradient <= 4 s, "
        "warm product <= 1.5x scipy DIA"
    )
    return "\n".join(lines)
