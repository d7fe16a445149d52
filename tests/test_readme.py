"""The README's quickstart runs as written and computes what it says."""

import pathlib
import re

import numpy as np

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_readme_quickstart_runs_and_matches_scipy():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert blocks, "README.md has no python block"
    namespace: dict = {}
    exec(compile(blocks[0], "README.md quickstart", "exec"), namespace)
    S, x, y = namespace["S"], namespace["x"], namespace["y"]
    np.testing.assert_allclose(y, S @ np.asarray(x, np.float64), rtol=1e-5, atol=1e-6)
    grad_A = namespace["grad_A"]
    assert grad_A.data.shape == (3, 1000)
    residual = S @ np.asarray(x, np.float64)
    # d/dx sum((A x)^2) = 2 A^T A x
    np.testing.assert_allclose(namespace["grad_x"], 2 * (S.T @ residual), rtol=1e-4, atol=1e-4)


def test_api_reference_renders_every_public_name():
    """`docs/api.md` has an entry for each name `jaxsparse` and `jaxsparse.linalg` export."""
    import jaxsparse
    import jaxsparse.linalg

    api = (README.parent / "docs" / "api.md").read_text()
    rendered = set(re.findall(r"^::: (\S+)$", api, flags=re.MULTILINE))
    public = {f"jaxsparse.{name}" for name in jaxsparse.__all__ if name != "linalg"}
    public |= {
        f"jaxsparse.linalg.{name}" for name in dir(jaxsparse.linalg) if not name.startswith("_")
    }
    assert public - rendered == set()
    assert rendered - public == set()
