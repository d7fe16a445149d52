"""scipy's elementwise methods (`sin`, `sqrt`, ... `maximum`, `minimum`, `argmax`, `argmin`,
`nanmax`, `nanmin`) against scipy.sparse and dense numpy, in and out of `jit`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
from helpers import (
    MATRICES,
    assert_close,
    cases,
    dtype_id,
    ignored_slots,
    random_csr,
    random_dia,
    random_values,
)

from jaxsparse._elementwise import ZERO_PRESERVING_UFUNCS

UFUNC_CASES = [
    case for case in MATRICES if case.name in ("dia-tall-beyond-matrix", "csr-repeated-columns")
]


def ufuncs(matrix):
    """Every zero-preserving ufunc method the dtype takes, as a dict of matrices."""
    complex_values = jnp.issubdtype(matrix.dtype, jnp.complexfloating)
    return {
        name: getattr(matrix, name)()
        for name, takes_complex in ZERO_PRESERVING_UFUNCS.items()
        if takes_complex or not complex_values
    }


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64, jnp.complex128], ids=dtype_id)
@pytest.mark.parametrize("case", cases(UFUNC_CASES))
def test_zero_preserving_ufuncs_match_scipy(case, dtype):
    rng = np.random.default_rng(3)
    matrix, twin = case.make(rng, dtype)
    assert set(ZERO_PRESERVING_UFUNCS) <= set(dir(scipy.sparse.csr_array))
    for results in (ufuncs(matrix), jax.jit(ufuncs)(matrix)):
        for name, result in results.items():
            with np.errstate(all="ignore"):
                expected = getattr(scipy.sparse.csr_array(twin, copy=True), name)()
            assert result.format == matrix.format and result.dtype == matrix.dtype, name
            assert_close(result.todense(), expected.toarray(), dtype)
            if matrix.format == "dia":
                # The junk in the slots outside the matrix does not reach the result.
                assert not np.any(
                    np.asarray(result.data)[ignored_slots(matrix.offsets, case.shape)]
                )
    if jnp.issubdtype(dtype, jnp.complexfloating):
        for name in ("floor", "ceil", "trunc", "deg2rad", "rad2deg"):
            with pytest.raises(TypeError, match=f"`{name}` is not defined for complex"):
                getattr(matrix, name)()


@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_ufunc_gradients_match_dense(fmt):
    """Gradients in the stored values equal those of `jnp.f` of the dense matrix, and the
    DIA slots outside the matrix (negative junk, whose `sqrt` has no derivative) get 0."""
    rng = np.random.default_rng(4)
    if fmt == "dia":
        matrix, _ = random_dia(rng, (7, 5), (-2, 0, 1, 6), jnp.float64)
        outside = ignored_slots(matrix.offsets, matrix.shape)
        data = jnp.where(outside, -1.0, jnp.abs(matrix.data) + 0.1)
    else:
        matrix, _ = random_csr(rng, (7, 5), density=0.4, dtype=jnp.float64, repeat_columns=True)
        data = jnp.abs(matrix.data) + 0.1
    weights = jnp.asarray(random_values(rng, matrix.shape, jnp.float64))
    names = ("sin", "tanh", "expm1", "sqrt", "arcsinh")

    def sparse_loss(values):
        new = matrix.with_data(values)
        return sum(jnp.sum(weights * getattr(new, name)().todense()) for name in names)

    def dense_loss(values):
        dense = matrix.with_data(values).todense()
        return sum(jnp.sum(weights * getattr(jnp, name)(dense)) for name in names)

    expected = jax.grad(dense_loss)(data)
    for grad in (jax.grad(sparse_loss)(data), jax.jit(jax.grad(sparse_loss))(data)):
        np.testing.assert_allclose(grad, expected, rtol=1e-12, atol=1e-12)
    if fmt == "dia":
        assert not np.any(np.asarray(expected)[outside])


def test_ufuncs_map_over_a_batch():
    rng = np.random.default_rng(5)
    matrix, twin = random_dia(rng, (6, 6), (-1, 0, 2), jnp.float64)
    batch = matrix.with_data(jnp.stack([matrix.data, 2 * matrix.data]))
    result = batch.sin()
    assert result.batch_shape == (2,)
    assert_close(result.batch_member(1).todense(), np.sin(2 * twin.toarray()), jnp.float64)
