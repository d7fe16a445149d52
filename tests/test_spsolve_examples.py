"""The direct-solve examples run, with small settings, and their checks hold: each
example's `main` returns its numbers (solve and gradient errors against scipy and finite
differences, the misfit before and after fitting)."""

import pathlib
import sys

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))

import diffusion_inverse_spsolve  # noqa: E402
import graph_laplacian_solve  # noqa: E402


def test_diffusion_inverse_through_banded_solves():
    result = diffusion_inverse_spsolve.main(nx=10, ny=10, n_sources=2, adam_steps=40)
    assert result["solve_error"] < 1e-12
    assert result["gradient_fd_error"] < 1e-5
    assert result["final_loss"] < 0.1 * result["initial_loss"]


def test_graph_laplacian_fit_through_sparse_lu():
    result = graph_laplacian_solve.main(nodes=40, patterns=3, descent_steps=20)
    assert result["solve_error"] < 1e-12
    assert result["gradient_fd_error"] < 1e-5
    assert result["final_loss"] < 0.5 * result["initial_loss"]
