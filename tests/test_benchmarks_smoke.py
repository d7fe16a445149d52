"""Smoke test of the benchmark script: a tiny run, checked for shape and numerics.

Timings are never asserted (shared, noisy machines); only that every system ran, and that
jaxsparse's results matched scipy's (the benchmark checks each result before timing it).
"""

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from lowering import KERNEL_CALLS, NEEDS_CROSS_LOWERING, lower

from jaxsparse.kernels.triton_csr import csr_matmul_t_triton

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
    for table in (
        "banded DIA",
        "CSR 2-D 5-point",
        "factorize once",
        "one DIA band",
        "gradient step",
    ):
        assert table in results["solve"]
    # The transpose section (its own process): every case checked against scipy and timed.
    transpose = results["transpose"]
    assert "A.T @ x" in transpose and "A[:, 100 cols]" in transpose and "WRONG" not in transpose
    assert "DIA 5pt A.T @ x" in transpose and "DIA 27pt A.T @ x" in transpose
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


# Benchmark code rather than the library's (12 s): `slow`, which CI runs.
@pytest.mark.slow
def test_gpu_benchmark_checks_every_case_on_the_cpu(monkeypatch):
    """`gpu.py`'s run at a small size on the CPU with the `xla` family alone (Pallas has no
    CPU compiler), so a GPU lease does not find the script's errors: every case timed,
    each product checked against scipy on the checked columns (first, middle, last), and a
    summary line per case."""
    gpu = _load("gpu")
    monkeypatch.setattr(gpu, "_gpu_families", lambda: ())
    monkeypatch.setattr(gpu, "copy_bandwidth", lambda: 1.0)  # 1 GiB copies: GPU-sized
    monkeypatch.setattr(gpu, "LOOP", 2)  # the loop's length changes nothing checked here
    results = gpu.run(300, ks=(1, 5), with_xla=True)
    assert gpu._checked_columns(1) == [0] and gpu._checked_columns(64) == [0, 32, 63]
    assert [(case["matrix"], case["k"]) for case in results["cases"]] == [
        (name, k) for name, _, _ in gpu.KINDS for k in (1, 5)
    ]
    for case in results["cases"]:
        assert case["dtype"] == "float32", case  # CuPy's matrix too, not scipy's float64
        assert case["seconds"] > 0  # what each case takes of a lease
        systems = {system["system"]: system for system in case["systems"]}
        xla = systems["jaxsparse xla"]
        assert xla["relative_error"] < 1e-5, case
        assert xla["loop_s"] > 0 and xla["gradient_s"] > 0
        assert systems["BCSR (cuSPARSE)"]["loop_s"] > 0
    assert len(gpu.summary(results)) == 2 + len(results["cases"])


@pytest.mark.slow
def test_gpu_benchmark_keeps_the_cases_done_when_interrupted(monkeypatch):
    """An interrupt (what `make gpu-check`'s time limit sends) after the second case ends
    the run with those two cases and a summary of them."""
    gpu = _load("gpu")
    monkeypatch.setattr(gpu, "_gpu_families", lambda: ())
    monkeypatch.setattr(gpu, "copy_bandwidth", lambda: 1.0)
    monkeypatch.setattr(gpu, "LOOP", 2)
    printed = []

    def print_then_interrupt(case, copy_gbs):
        printed.append(case)
        if len(printed) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(gpu, "_print_case", print_then_interrupt)
    results = gpu.run(300, ks=(1, 2), with_xla=True, formats=("csr",), compile_threads=1)
    assert results["interrupted"]
    assert [(case["matrix"], case["k"]) for case in results["cases"]] == [
        ("poisson2d-5pt", 1),
        ("poisson2d-5pt", 2),
    ]
    assert len(gpu.summary(results)) == 2 + 2


@pytest.mark.slow
def test_gpu_transposed_benchmark_checks_every_route_on_the_cpu(monkeypatch):
    """`gpu_transposed.py` in interpret mode at a small size: every route of `A.T @ g` on
    the power-law matrix (rows of every length; each matrix's shapes compile every route
    again, so one) agrees with scipy, and each timed figure is there. (Interpret mode has
    no atomics, so its "atomic scatter" route sorts: this checks the script, not the GPU.)"""
    transposed = _load("gpu_transposed")
    monkeypatch.setattr(transposed.gpu, "LOOP", 2)
    power_law = [case for case in transposed.MATRICES if case[0] == "power-law"]
    monkeypatch.setattr(transposed, "MATRICES", power_law)
    found = transposed.run(300, (2,), options={"interpret": True, "platform": "cpu"})
    assert [case["matrix"] for case in found] == ["power-law"]
    routes = ("atomic scatter", "carried transpose", "sort per call")
    for case in found:
        assert set(case["errors"]) == set(routes), case
        assert max(case["errors"].values()) < 1e-5, case
        for route in routes:
            assert case["us"][f"{route}, loop"] > 0 and case["us"][f"{route}, single"] > 0
        assert case["us"]["atomic scatter, gradient"] > 0
        assert case["us"]["carried transpose, gradient"] > 0
        assert case["us"]["one pass, gradient"] > 0
        assert case["us"]["product, loop"] > 0


# Benchmark code rather than the library's: `slow`, which CI runs (on JAX 0.12).
@pytest.mark.slow
@NEEDS_CROSS_LOWERING
def test_relaxed_atomics_change_the_scatter_kernel_inside_the_block_only():
    """`gpu_transposed.relaxed_atomics`: the atomic scatter lowered for a GPU inside the
    block differs from the one lowered before it (its atomics' memory order; the kernel
    is MLIR bytecode in the custom call), and the one lowered after is the first again."""
    transposed = _load("gpu_transposed")
    rows = 64
    indptr = jnp.arange(0, 4 * rows + 1, 4, dtype=jnp.int32)
    indices = jnp.asarray(np.random.default_rng(0).integers(0, rows, 4 * rows), jnp.int32)
    data, g = jnp.ones(4 * rows, jnp.float32), jnp.ones((rows, 1), jnp.float32)

    def scatter(data, g):
        return csr_matmul_t_triton(data, g, indices, indptr, shape=(rows, rows))

    # From cleared caches, as the block's two lowerings are: after another test lowered
    # this kernel, its first lowering here differed from its last.
    jax.clear_caches()
    before = lower(scatter, (data, g), "cuda")
    with transposed.relaxed_atomics():
        relaxed = lower(scatter, (data, g), "cuda")
    assert KERNEL_CALLS["cuda"] in relaxed and relaxed != before
    assert lower(scatter, (data, g), "cuda") == before


# Benchmark code rather than the library's: `slow`, which CI runs.
@pytest.mark.slow
def test_loop_copy_benchmark_counts_the_copy_that_unrolling_by_two_removes(capsys):
    """`gpu_loop_copy.py` at a small size on the CPU (`"auto"`: the native kernels): the
    loop with one product an iteration compiles a copy more than the loop with two, the
    unrolled products none, and every figure is a time."""
    copies = _load("gpu_loop_copy")
    copies.main(["--rows", "300", "--ks", "1"])
    lines = capsys.readouterr().out.splitlines()[1:]
    assert [line.split(":")[0] for line in lines] == [f"{name} k=1" for name, *_ in copies.CASES]
    for line in lines:
        counts = [int(c) for c in re.findall(r"\((\d+) copies\)", line)]
        assert len(counts) == 3 and counts[0] == counts[1] + 1 and counts[2] == 0, line
        assert all(float(t) > 0 for t in re.findall(r" ([0-9.]+) us", line)), line


def test_csr_tile_sweep_variants_are_valid_block_sizes():
    """`gpu_csr_tiles.variants` (whose `BlockSizes` refuse invalid tiles as they are made):
    the defaults first, column tiles narrower than the defaults' only past k = 16, and
    vector loads where the column tiles divide k (not at k = 1 or 12), the cache hints
    (each apart) up to k = 8, loops of 2 and 4 steps an iteration, and rows summed by
    chunks of 8 and 64 long-row steps."""
    tiles = _load("gpu_csr_tiles")
    from jaxsparse.kernels.triton_csr import BlockSizes

    for k, columns in ((1, set()), (8, set()), (12, set()), (64, {16, 32})):
        default = BlockSizes().filled(platform="cuda", num_cols=k, mean_row_length=5.0)
        grid = tiles.variants(default, k)
        assert next(iter(grid.items())) == ("default", default)
        assert {b.block_k for b in grid.values()} - {default.block_k} == columns, k
        assert any(b.vector_loads for b in grid.values()) == (k in (8, 64)), k
        for hint in ("keep_operand", "stream_entries"):
            kept = [b for b in grid.values() if getattr(b, hint)]
            assert bool(kept) == (k <= 8), (k, hint)
        assert any(b.keep_operand and not b.stream_entries for b in grid.values()) == (k <= 8)
        assert {b.unroll for b in grid.values()} == {1, 2, 4}, k
        assert {b.chunk_steps for b in grid.values()} == {0, 8, 64}, k
    # At k = 64 (the last grid), picking variants by parts of their labels:
    chosen = tiles.selected(grid, ("unroll", "2 warps"))
    assert list(chosen) == ["default", "unroll 2", "unroll 4", "2 warps"]
    assert tiles.selected(grid, ()) == grid


# Benchmark code rather than the library's: `slow`, which CI runs.
@pytest.mark.slow
@pytest.mark.parametrize("gradient", [False, True])
def test_csr_tile_sweep_times_products_or_gradient_steps_on_the_cpu(gradient, monkeypatch, capsys):
    """`gpu_csr_tiles.sweep` in interpret mode at a small size, for the chunk variants:
    a time for each selected variant of each matrix, of the product (in a loop) or of the
    gradient step, and a line each naming the best."""
    tiles = _load("gpu_csr_tiles")
    monkeypatch.setattr(tiles.gpu, "LOOP", 2)
    found = []
    options = {"interpret": True, "platform": "cpu"}
    tiles.sweep(300, (2,), found, ("power-law", "hub-rows"), ("chunks",), gradient, options)
    assert [(case["matrix"], case["k"]) for case in found] == [("power-law", 2), ("hub-rows", 2)]
    labels = {"default", "chunks of 8 steps", "chunks of 64 steps"}
    for case in found:
        assert case["timed"] == ("gradient step" if gradient else "product")
        assert set(case["us"]) == set(case["blocks"]) == labels, case
        assert all(t > 0 for t in case["us"].values()), case
    lines = [line for line in capsys.readouterr().out.splitlines() if "best '" in line]
    suffix = ", gradient step" if gradient else ""
    assert [line.split(":")[0] for line in lines] == [
        f"{name} k=2{suffix}" for name in ("power-law", "hub-rows")
    ]


def test_hub_rows_matrix_has_its_hubs_among_rows_of_eight():
    """The tile sweep's `hub-rows` matrix (`matrices.hub_rows`): 16 rows of a quarter of
    the columns each, the rest at most 8 entries (columns drawn with repeats, summed)."""
    matrices = _load("matrices")
    matrix = matrices.hub_rows(4096, np.random.default_rng(0))
    lengths = np.diff(matrix.indptr)
    assert matrix.shape == (4096, 4096)
    assert np.sum(lengths > 8) == 16 and np.all(lengths <= 1024)
    assert np.sort(lengths)[-16:].min() > 1024 * 0.8  # few repeats among 1024 of 4096


def test_kernel_times_report_assigns_kernels_to_calls_by_marker(tmp_path, capsys):
    """`gpu_kernel_times.py report` on a CSV as Nsight Compute writes it: each kernel goes
    to the call whose marker's grid came before it, times in ncu's units become
    microseconds (an unknown unit is NaN, not a wrong number), and the totals add up."""
    times = _load("gpu_kernel_times")
    marker = times.MARKER_NAME
    columns = ("ID", "Kernel Name", "Grid Size", "Metric Name", "Metric Unit", "Metric Value")
    rows = [
        (0, marker, "(1, 1, 1)", "gpu__time_duration.sum", "nsecond", "1,000"),
        (1, "rows_kernel", "(64, 1, 1)", "gpu__time_duration.sum", "nsecond", "2,500"),
        (1, "rows_kernel", "(64, 1, 1)", "dram__bytes.sum", "byte", "4,096"),
        (2, "poison_kernel", "(8, 1, 1)", "gpu__time_duration.sum", "usecond", "1.5"),
        (3, marker, "(2, 1, 1)", "gpu__time_duration.sum", "nsecond", "900"),
        (4, "csrmv_v3", "(128, 1, 1)", "gpu__time_duration.sum", "msecond", "0.25"),
        (5, "partition", "(1, 1, 1)", "gpu__time_duration.sum", "cycle", "700"),
    ]
    lines = ["==PROF== a line ncu writes that is not CSV", ",".join(f'"{c}"' for c in columns)]
    lines += [",".join(f'"{cell}"' for cell in row) for row in rows]
    csv_path, labels = tmp_path / "ncu.csv", tmp_path / "calls.txt"
    csv_path.write_text("\n".join(lines) + "\n")
    labels.write_text("ours k=1\ncuSPARSE k=1\n")
    times.report(csv_path, labels)
    out = capsys.readouterr().out
    ours, cusparse = out.split("\ncuSPARSE k=1\n")
    assert "2.5 us  rows_kernel" in ours and "1.5 us  poison_kernel" in ours
    assert "bytes.sum 4096" in ours
    assert "250.0 us  csrmv_v3" in cusparse and "nan us  partition" in cusparse
    totals = out.split("== kernel time per call (us)")[1]
    assert "ours k=1" in totals and " 4.0" in totals.split("cuSPARSE")[0]


@pytest.mark.slow
def test_solve_benchmark_sections_off_by_default_run_and_check():
    """`solve.py`'s `host` and `routes` sections (run by `make gpu-check` and by hand), in a
    process of their own as `run.py` runs the solve section (it enables float64)."""
    command = [sys.executable, str(BENCHMARKS / "solve.py"), "--quick", "--sections", "host,routes"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "tridiagonal spsolve, n = 2000" in done.stdout
    for row in ("dominant", "not dominant", "kept", "values"):
        assert f" {row} " in done.stdout
