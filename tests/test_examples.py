"""The examples run, with small settings, and their checks hold.

Each example's `main` returns the numbers it checks; these tests assert on them. One test
runs `quickstart.py` as a script (what `make demo` does) and reads its output.
"""

import inspect
import pathlib
import subprocess
import sys

import numpy as np
import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))

import graph_gnn  # noqa: E402
import heat_inverse  # noqa: E402
import poisson_3d  # noqa: E402
import poisson_cg  # noqa: E402
import quickstart  # noqa: E402


def test_quickstart_matches_scipy():
    errors = quickstart.main(n=32, k=2)
    assert set(errors) == {"product", "grad_data", "grad_B", "csr_product", "csr_grad_data"}
    for name, error in errors.items():
        assert error < 1e-5, name


def test_quickstart_runs_as_a_script():
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "quickstart.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    out = result.stdout
    assert "DIAMatrix(shape=(64, 64)" in out
    assert "A @ B under jax.jit" in out
    assert "max relative error vs scipy" in out
    assert "dL/dA.data" in out and "dL/dB" in out
    assert "CSRMatrix" in out
    assert "All checks passed" in out


def test_heat_inverse_recovers_the_coefficient(tmp_path):
    figure = tmp_path / "heat.png"
    result = heat_inverse.main(n=31, adam_steps=150, figure_path=figure)
    assert result["final_loss"] < 0.05 * result["initial_loss"]
    assert result["relative_error"] < 0.05
    assert np.all(np.isfinite(result["kappa_recovered"]))
    assert figure.stat().st_size > 1000


def test_heat_inverse_writes_a_figure_only_where_asked():
    parser = heat_inverse.command_line()
    assert parser.parse_args([]).figure is None
    assert parser.parse_args(["--figure", "out.png"]).figure == "out.png"
    assert inspect.signature(heat_inverse.main).parameters["figure_path"].default is None


def test_graph_gnn_trains_and_matches_dense():
    result = graph_gnn.main(sizes=(40, 40, 40), steps=60, labelled_fraction=0.2)
    assert result["grad_edges"] < 1e-5
    assert result["grad_features"] < 1e-5
    assert result["final_loss"] < 0.5 * result["initial_loss"]
    assert result["train_accuracy"] > 0.9
    assert result["test_accuracy"] > 0.5  # three classes: chance is 1/3
    assert result["pagerank_error"] < 1e-5


def test_poisson_cg_matches_scipy_and_adjoint():
    errors = poisson_cg.main(N=12)
    assert errors["dia_solution"] < 1e-4
    assert errors["csr_solution"] < 1e-4
    assert errors["grad_b"] < 1e-4
    assert errors["grad_c"] < 1e-3
    assert errors["grad_c_finite_difference"] < 1e-3


def test_poisson_3d_operator_solve_and_gradient_match_scipy():
    N = 6
    errors = poisson_3d.main(N=N)
    assert errors["offsets"] == (-(N**2), -N, -1, 0, 1, N, N**2)
    assert errors["operator"] < 1e-6
    assert errors["solution"] < 1e-4
    assert errors["grad_c"] < 1e-3


@pytest.mark.parametrize("module", [quickstart, heat_inverse, graph_gnn, poisson_cg, poisson_3d])
def test_examples_have_a_docstring_and_main(module):
    assert module.__doc__ and "Run it with" in module.__doc__
    assert callable(module.main)
