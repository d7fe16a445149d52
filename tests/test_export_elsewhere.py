"""Exported sparse programs run outside this process: by a fresh Python that never imports
jaxsparse, by the other JAX version CI has (exported here and called there, and exported
there and called here), and the export example of `docs/export.md` as written.

CI builds `.venv` (Python 3.11, JAX 0.10) and then `.venv-newest` (Python 3.12, JAX 0.12)
at the repository root and runs the suite in each; the tests that need the other one skip
in `.venv`'s run, where `.venv-newest` does not exist yet, and run both directions in
`.venv-newest`'s.
"""

import json
import os
import pathlib
import re
import subprocess
import sys

import jax
import numpy as np
import pytest
import scipy.sparse
from exporting import (
    SIDES,
    load_leaves,
    product_and_gradients,
    random_operands,
    save_case,
    scipy_answer,
)
from helpers import MATRICES, assert_close
from jax import export

# Exports from this (CPU) machine: on a GPU machine too, the default device is the CPU.
pytestmark = pytest.mark.on_cpu

REPO = pathlib.Path(__file__).resolve().parents[1]
CALLER = pathlib.Path(__file__).with_name("foreign_caller.py")
F64 = np.float64
# One matrix per format, with DIA slots outside the matrix and repeated CSR columns.
CASES = [
    case for case in MATRICES if case.name in ("dia-tall-beyond-matrix", "csr-repeated-columns")
]


def other_jax_python() -> pathlib.Path | None:
    """The Python of the repository's other virtual environment (`.venv` or
    `.venv-newest`), if it exists: the one this interpreter does not run in."""
    for venv in (".venv", ".venv-newest"):
        python = REPO / venv / "bin" / "python"
        if python.exists() and (REPO / venv).resolve() != pathlib.Path(sys.prefix).resolve():
            return python
    return None


OTHER_PYTHON = other_jax_python()
NEEDS_OTHER_JAX = pytest.mark.skipif(
    OTHER_PYTHON is None,
    reason="no other virtual environment (.venv or .venv-newest) at the repository root: "
    "CI's .venv-newest run has .venv beside it and checks both directions",
)
PYTHONS = [
    pytest.param(sys.executable, id="this-jax"),
    pytest.param(OTHER_PYTHON, id="other-jax", marks=NEEDS_OTHER_JAX),
]


def run_python(python, *args, cwd=None) -> str:
    """Run `python` on `args` in a fresh process on the CPU; its standard output. The
    other JAX gets no `XLA_FLAGS`: a flag this one was given may not exist in its XLA,
    which stops at a flag it does not know."""
    environment = {**os.environ, "JAX_PLATFORMS": "cpu"}
    if str(python) != sys.executable:
        environment.pop("XLA_FLAGS", None)
    result = subprocess.run(
        [str(python), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=environment,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


def write_flat_artifacts(directory: pathlib.Path) -> dict:
    """For each case and side, `product_and_gradients` exported as a function of the
    flattened leaves of `(matrix, dense, cotangent)` (no jaxsparse type in its signature):
    `NAME.jax` (serialized), `NAME.mlirbc` (its module), `NAME.npz` (the leaves).

    **Returns:** name -> scipy's answer.
    """
    rng = np.random.default_rng(0)
    answers = {}
    for case in CASES:
        for side in SIDES:
            name = f"{case.name}-{side.replace('@', '_at_')}"
            matrix, twin = case.make(rng, F64)
            dense, cotangent = random_operands(rng, side, case.shape, F64)
            leaves, treedef = jax.tree.flatten((matrix, dense, cotangent))

            def flat(*leaves, _side=side, _treedef=treedef):
                return product_and_gradients(_side)(*jax.tree.unflatten(_treedef, leaves))

            exported = export.export(jax.jit(flat, keep_unused=True))(*leaves)
            (directory / f"{name}.jax").write_bytes(exported.serialize())
            (directory / f"{name}.mlirbc").write_bytes(exported.mlir_module_serialized)
            np.savez(directory / f"{name}.npz", *[np.asarray(leaf) for leaf in leaves])
            answers[name] = scipy_answer(side, twin, dense, cotangent)
    return answers


@pytest.mark.parametrize("python", PYTHONS)
def test_flattened_artifacts_run_where_jaxsparse_is_never_imported(python, tmp_path):
    """Through `Exported.call` and as a bare StableHLO module fed the leaves by position,
    with this JAX and with the other one."""
    answers = write_flat_artifacts(tmp_path)
    report = json.loads(run_python(python, CALLER, "call", tmp_path).splitlines()[-1])
    assert report["imported_jaxsparse"] is False
    some_artifact = next(tmp_path.glob("*.jax")).read_bytes()
    version = export.deserialize(bytearray(some_artifact)).calling_convention_version
    lowest, highest = report["calling_conventions"]
    assert lowest <= version <= highest
    for name, answer in answers.items():
        for route in ("called", "raw"):
            for got, want in zip(
                load_leaves(tmp_path / f"{name}.{route}.npz"), answer, strict=True
            ):
                assert_close(got, want, F64)


@NEEDS_OTHER_JAX
def test_artifacts_exported_by_the_other_jax_run_here(tmp_path):
    rng = np.random.default_rng(1)
    cases = {}
    for case in CASES:
        for side in SIDES:
            name = f"{case.name}-{side.replace('@', '_at_')}"
            matrix, twin = case.make(rng, F64)
            dense, cotangent = random_operands(rng, side, case.shape, F64)
            save_case(tmp_path, name, side, matrix, dense, cotangent)
            cases[name] = (matrix, twin, side, dense, cotangent)
    report = json.loads(run_python(OTHER_PYTHON, CALLER, "export", tmp_path).splitlines()[-1])
    assert report["jax"] != jax.__version__
    for name, (matrix, twin, side, dense, cotangent) in cases.items():
        restored = export.deserialize(bytearray((tmp_path / f"{name}.jax").read_bytes()))
        got = restored.call(matrix, dense, cotangent)
        for actual, want in zip(got, scipy_answer(side, twin, dense, cotangent), strict=True):
            assert_close(actual, want, F64)


def docs_export_blocks() -> list[str]:
    text = (REPO / "docs" / "export.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


@pytest.mark.parametrize("python", PYTHONS)
def test_docs_export_example_runs_as_written(python, tmp_path):
    """The exporter block runs here in a fresh process; each caller block runs in another
    fresh process (with this JAX, and with the other one) and its results match scipy."""
    exporter, *callers = docs_export_blocks()
    assert callers and "jaxsparse" in exporter
    run_python(sys.executable, "-c", exporter, cwd=tmp_path)
    data, indices, indptr, x, target = load_leaves(tmp_path / "inputs.npz")
    matrix = scipy.sparse.csr_array((data, indices, indptr), shape=(len(indptr) - 1, len(x)))
    residual = matrix @ x.astype(F64) - target
    rows = np.repeat(np.arange(matrix.shape[0]), np.diff(indptr))
    for caller in callers:
        assert "jaxsparse" not in caller
        keep = '\nimport sys\nassert "jaxsparse" not in sys.modules\n'
        run_python(python, "-c", caller + keep + 'np.savez("out.npz", loss, grad)', cwd=tmp_path)
        loss, grad = load_leaves(tmp_path / "out.npz")
        np.testing.assert_allclose(loss, np.sum(residual**2), rtol=1e-4)
        np.testing.assert_allclose(grad, 2 * residual[rows] * x[indices], rtol=1e-4, atol=1e-4)
