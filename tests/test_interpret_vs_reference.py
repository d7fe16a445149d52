"""End to end through `jaxsparse.matmul`: the Pallas kernels (interpret mode) against the
XLA reference and scipy, for products and for `jax.vjp` with random cotangents."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close, random_dia, random_values, tolerance
from test_products import CSR_CASES, make_csr

import jaxsparse as js

DIA_CASES = [
    ((1, 1), (0,)),
    ((37, 37), (-1, 0, 1)),
    ((45, 19), (-30, -2, 0, 5, 40)),
    ((19, 45), (0,)),
    ((70, 70), tuple(range(-13, 14))),
]
# Vector and matrix operands in float32, matrix operands in bfloat16.
OPERANDS = [(jnp.float32, None), (jnp.float32, 5), (jnp.bfloat16, 5)]
OPERAND_IDS = ["float32-vector", "float32-k5", "bfloat16-k5"]


def compare_with_reference(matrix, twin, operand, cotangent, dtype):
    """Product and both vjp outputs of the interpret backend against XLA and scipy."""

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


MATRICES = [("dia", case) for case in DIA_CASES] + [("csr", case) for case in CSR_CASES]


def make_matrix(rng, fmt, case, dtype):
    """A matrix and its scipy twin: DIA cases are (shape, offsets), CSR cases (kind, shape)."""
    if fmt == "dia":
        shape, offsets = case
        return random_dia(rng, shape, offsets, dtype)
    kind, shape = case
    return make_csr(rng, kind, shape, dtype)


@pytest.mark.parametrize(("dtype", "k"), OPERANDS, ids=OPERAND_IDS)
@pytest.mark.parametrize(("fmt", "case"), MATRICES, ids=str)
def test_interpret_matches_reference(fmt, case, k, dtype):
    rng = np.random.default_rng(0)
    matrix, twin = make_matrix(rng, fmt, case, dtype)
    m, n = matrix.shape
    operand = jnp.asarray(random_values(rng, (n,) if k is None else (n, k), dtype))
    cotangent = jnp.asarray(random_values(rng, (m,) if k is None else (m, k), dtype))
    compare_with_reference(matrix, twin, operand, cotangent, dtype)
