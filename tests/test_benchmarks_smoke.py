"""Smoke test of the benchmark script: a tiny run, checked for shape and numerics.

Timings are never asserted (shared, noisy machines); only that every system ran, and that
jaxsparse's results matched scipy's (the benchmark checks each result before timing it).
"""

import importlib.util
import json
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(script: str):
    spec = importlib.util.spec_from_file_location(
        f"benchmarks_{script}", BENCHMARKS / f"{script}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The longest test of the suite, and benchmark code rather than the library's: `slow`.
@pytest.mark.slow
def test_quick_benchmark_writes_checked_results(tmp_path):
    run = _load("run")
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
    # The direct-solve section ran (its own process) and printed each of its tables.
    for table in ("banded DIA", "CSR 2-D 5-point", "factorize once", "gradient step"):
        assert table in results["solve"]
    for record in many + batched:
        assert record["ok"], record
        assert record["median_s"] > 0 and record["first_call_s"] > 0


def test_wide_operand_script_checks_and_times_every_system():
    """`wide.py` (k = 64) at a small size: a line per matrix with every system's times,
    after each result was checked against scipy's."""
    lines = _load("wide").main(["--rows", "3000", "--kinds", "poisson2d-5pt,random-8"])
    assert [line.split()[0] for line in lines] == [
        "dia:poisson2d-5pt",
        "csr:poisson2d-5pt",
        "csr:random-8",
    ]
    for line in lines:
        for system in ("jaxsparse", "jaxsparse loop", "scipy-csr", "jax-bcsr", "jax-bcsr loop"):
            assert f" {system} " in line
    # A stencil (in either format) is also timed with scipy's DIA product; random rows not.
    assert all(" scipy-dia " in line for line in lines[:2])
    assert " scipy-dia " not in lines[2]
