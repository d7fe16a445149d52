"""End to end through `jaxsparse.matmul`: the Pallas kernels (interpret mode) against the
XLA reference and scipy, for products and for `jax.vjp` with random cotangents: every
matrix of the registry with a float32 matrix operand, and one matrix of each format with
a vector operand and in bfloat16. (The kernel tests cover every registry matrix in both
dtypes kernel by kernel; these check the wiring through the primitives, so the fast suite
takes one matrix of each format, and `make test-slow` the rest.)"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import MATRICES, assert_close, random_values, slow_unless, tolerance

import jaxsparse as js

# Every matrix with a float32 matrix operand; a vector operand and bfloat16 for one
# matrix of each format.
_EXTRA = [case for case in MATRICES if case.name in ("dia-tall-beyond-matrix", "csr-power-law")]
CASES = [
    *[
        pytest.param(
            case,
            jnp.float32,
            5,
            id=f"{case.name}-float32-k5",
            marks=slow_unless(case in _EXTRA),
        )
        for case in MATRICES
    ],
    *[
        pytest.param(
            case,
            jnp.float32,
            None,
            id=f"{case.name}-float32-vector",
            marks=slow_unless(case.fmt == "csr"),
        )
        for case in _EXTRA
    ],
    *[
        pytest.param(
            case,
            jnp.bfloat16,
            5,
            id=f"{case.name}-bfloat16-k5",
            marks=slow_unless(case.fmt == "dia"),
        )
        for case in _EXTRA
    ],
]


@pytest.mark.parametrize(("case", "dtype", "k"), CASES)
def test_interpret_matches_reference(case, dtype, k):
    rng = np.random.default_rng(0)
    matrix, twin = case.make(rng, dtype)
    m, n = matrix.shape
    operand = jnp.asarray(random_values(rng, (n,) if k is None else (n, k), dtype))
    cotangent = jnp.asarray(random_values(rng, (m,) if k is None else (m, k), dtype))

    def run(backend):
        def product(data, x):
            return js.matmul(matrix.with_data(data), x, backend=backend)

        out, vjp = jax.vjp(product, matrix.data, operand)
        return (out, *vjp(cotangent))

    interpreted = run("interpret")
    reference = run("xla")
    expected = twin.toarray() @ np.asarray(operand, np.float64)
    assert_close(interpreted[0], expected, dtype)
    for got, want in zip(interpreted, reference, strict=True):
        assert got.dtype == want.dtype
        scale = max(1.0, float(jnp.max(jnp.abs(want.astype(jnp.float32)), initial=0.0)))
        np.testing.assert_allclose(
            got.astype(jnp.float32), want.astype(jnp.float32), atol=10 * tolerance(dtype) * scale
        )
