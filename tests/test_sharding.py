"""The sharded products and the sharded Poisson example, each in a fresh process with 8
simulated CPU devices, so that the rest of the suite keeps its single device.

`sharding_checks.py` holds the checks (products, transposed products and gradients against
scipy over meshes of 1, 2, 4 and 8 devices; bytes read from the compiled collectives
against the halo minimum and the plans; gradients that stay sharded); this module runs it
and the example, and asserts on what they report.
"""

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]


def run_python(*args: str) -> str:
    """Run this interpreter on `args` from the repository root, on the CPU, with `XLA_FLAGS`
    unset (each script asks for its 8 devices itself); its standard output."""
    env = {key: value for key, value in os.environ.items() if key != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-4000:]
    return result.stdout


@pytest.mark.slow  # the sweep; the examples below are the fast suite's sharded runs
def test_sharded_products_on_eight_devices():
    out = run_python("tests/sharding_checks.py", "cases")
    assert out.rstrip().endswith("ALL SHARDING CHECKS PASSED")
    for devices in (1, 2, 4, 8):
        assert f"{devices} devices" in out


# The collectives' bytes, sharded gradients and construction checks repeat the products
# above on more paths: `slow`.
@pytest.mark.slow
def test_sharded_bytes_gradients_and_construction_on_eight_devices():
    out = run_python("tests/sharding_checks.py", "bytes-and-gradients")
    assert out.rstrip().endswith("ALL SHARDING CHECKS PASSED")
    checks = ("= halo minimum", "stay sharded", "jvp and vmap", "builds what", "bad input")
    for check in (*checks, "different devices"):
        assert check in out, (check, out)


# The methods of a sharded CSR matrix on an `Explicit` axis in the fast suite; DIA and
# `Auto` axes (which the two-process tests use) repeat them: `slow`.
@pytest.mark.parametrize(
    "axis_type, format",
    [
        pytest.param("explicit", "csr", marks=pytest.mark.slow),
        pytest.param("explicit", "dia", marks=pytest.mark.slow),
        pytest.param("auto", "dia", marks=pytest.mark.slow),
        pytest.param("auto", "csr", marks=pytest.mark.slow),
    ],
)
def test_sharded_matrix_methods(axis_type, format):
    out = run_python("tests/sharding_checks.py", f"surface-{axis_type}-{format}")
    assert out.rstrip().endswith("ALL SHARDING CHECKS PASSED")
    assert f"repr of {format} on an {axis_type.capitalize()} axis" in out, out


@pytest.mark.slow
def test_sharded_products_on_more_meshes():
    out = run_python("tests/sharding_checks.py", "more-meshes")
    assert out.rstrip().endswith("ALL SHARDING CHECKS PASSED")
    for devices in (1, 2, 8):
        assert f"{devices} devices" in out


def test_sharded_poisson_example():
    script = (
        "import json, sys; sys.path.insert(0, 'examples'); import sharded_poisson; "
        "print(json.dumps(sharded_poisson.main(N=10)))"
    )
    results = json.loads(run_python("-c", script).strip().splitlines()[-1])
    assert results["devices"] == 8
    assert results["dia_solution"] < 1e-4
    assert results["csr_solution"] < 1e-4
    assert results["grad_b"] < 1e-4
    assert results["grad_c"] < 1e-3
    assert results["solution_sharded"] and results["grad_b_sharded"]
    # N = 10: 100 rows over 8 devices, blocks of 13 >= N: a halo of N rows each way.
    assert results["bytes_dia"] == results["bytes_csr"] == results["bytes_halo"]
    assert results["bytes_halo"] < results["bytes_all_gather"] / 4


def test_readme_sharding_example_runs_on_eight_devices():
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.DOTALL)
    (block,) = [block for block in blocks if "js.shard(" in block]
    script = (
        "import os; os.environ['XLA_FLAGS'] = '--xla_force_host_platform_device_count=8'\n"
        + block
        + "import numpy as np; print(len(u.sharding.device_set), float(np.abs(T @ u - 1).max()))"
    )
    devices, residual = run_python("-c", script).split()
    assert devices == "8" and float(residual) < 1e-3
