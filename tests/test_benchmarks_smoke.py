"""Smoke test of the benchmark script: a tiny run, checked for shape and numerics.

Timings are never asserted (shared, noisy machines); only that every system ran, and that
jaxsparse's results matched scipy's (the benchmark checks each result before timing it).
"""

import importlib.util
import json
from pathlib import Path

RUN = Path(__file__).resolve().parents[1] / "benchmarks" / "run.py"


def _load_run():
    spec = importlib.util.spec_from_file_location("benchmarks_run", RUN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quick_benchmark_writes_checked_results(tmp_path):
    run = _load_run()
    run.main(["--quick", "--out", str(tmp_path), "--kinds", "tridiagonal,random-16"])
    results = json.loads((tmp_path / "quick.json").read_text())
    assert (tmp_path / "quick.png").stat().st_size > 0
    records = results["records"]
    systems = {r["system"] for r in records}
    assert {"jaxsparse", "scipy-dia", "scipy-csr", "jax-bcsr", "jax-bcoo", "dense-jnp"} <= systems
    ours = [r for r in records if r["system"] == "jaxsparse"]
    assert {(r["format"], r["op"]) for r in ours} == {
        (fmt, op)
        for fmt in ("dia", "csr")
        for op in ("forward", "loop", "gradient", "gradient_loop")
    }
    for record in ours:
        assert record["ok"], record
        assert record["rel_error"] <= 1e-4
        assert record["median_s"] > 0 and record["first_call_s"] > 0
    assert results["bandwidth"]["numpy_add_gbs"] > 0
    # The many-diagonal and batch sections: every system ran and was right.
    many = results["many_diagonals"]
    assert {(r["op"], r["system"]) for r in many} == {
        ("forward", "jaxsparse"),
        ("gradient", "jaxsparse"),
        ("forward", "scipy-dia"),
    }
    batched = results["batches"]
    assert {(r["format"], r["system"]) for r in batched} == {
        ("dia", "lax.map"),
        ("dia", "jaxsparse-vmap"),
        ("dia", "hand-jnp"),
        ("csr", "lax.map"),
        ("csr", "jaxsparse-vmap"),
    }
    for record in many + batched:
        assert record["ok"], record
        assert record["median_s"] > 0 and record["first_call_s"] > 0
