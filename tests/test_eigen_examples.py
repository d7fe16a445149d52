"""The examples of `eigsh`, `expm_multiply` and ILU(0) run with small settings, and their
checks hold (against scipy and finite differences)."""

import pathlib
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))

import diffusion_ilu  # noqa: E402
import spin_chain  # noqa: E402


# Its pieces (eigsh and expm_multiply of complex DIA, their derivatives) are in the fast
# suite's own tests; the whole example in `make test-slow`.
@pytest.mark.slow
def test_spin_chain_matches_scipy_and_finite_differences():
    errors = spin_chain.main(spins=5, h=0.9, t=0.8)
    assert errors["energy_error"] < 1e-10
    assert errors["state_error"] < 1e-10
    assert errors["energy_gradient_error"] < 1e-6
    assert errors["magnetization_gradient_error"] < 1e-6


def test_ilu0_cuts_cg_iterations_on_3d_diffusion():
    result = diffusion_ilu.main(side=10)
    iterations = result["iterations"]
    assert max(result["errors"].values()) < 1e-6
    assert iterations["ILU(0)"] * 3 <= iterations["none"]
    assert iterations["ILU(0)"] < iterations["Jacobi"] < iterations["none"]
