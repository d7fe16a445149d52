"""Products on the XLA path, both formats, both sides, against scipy.sparse."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
from helpers import (
    MATRICES,
    VALUE_DTYPES,
    as_float64,
    assert_close,
    random_csr,
    random_dia,
    random_values,
)

import jaxsparse as js


def dense_operand(rng, side, shape, dtype, k=3):
    m, n = shape
    operand_shape = {"A@x": (n,), "A@X": (n, k), "x@A": (m,), "X@A": (k, m)}[side]
    return random_values(rng, operand_shape, dtype)


def product(side, matrix, operand, backend=None):
    if side.startswith("A@"):
        return js.matmul(matrix, operand, backend=backend)
    return js.matmul(operand, matrix, backend=backend)


def expected_product(side, twin, operand):
    operand = as_float64(operand)
    dense = twin.toarray()
    return dense @ operand if side.startswith("A@") else operand @ dense


SIDES = ("A@x", "A@X", "x@A", "X@A")


# Every dtype under jit; eagerly (each primitive compiled on its own) in float32.
DTYPE_AND_MODE = [(dtype, True) for dtype in VALUE_DTYPES] + [(jnp.float32, False)]
# Each code path of the cross product once in the fast suite: every matrix in float32
# under jit, and every dtype and mode on an unrolled DIA, a looping DIA and a CSR matrix.
# The rest of the cross product is marked `slow`.
REPRESENTATIVE_CASES = ("dia-unsorted-offsets", "dia-many-diagonals", "csr-power-law")


def product_params():
    params = []
    for case in MATRICES:
        for side in SIDES:
            for dtype, jit in DTYPE_AND_MODE:
                fast = (dtype is jnp.float32 and jit) or case.name in REPRESENTATIVE_CASES
                mode = "jit" if jit else "eager"
                params.append(
                    pytest.param(
                        case,
                        side,
                        dtype,
                        jit,
                        id=f"{case.name}-{side}-{np.dtype(dtype).name}-{mode}",
                        marks=() if fast else pytest.mark.slow,
                    )
                )
    return params


@pytest.mark.parametrize(("case", "side", "dtype", "jit"), product_params())
def test_product_matches_scipy(case, side, dtype, jit):
    rng = np.random.default_rng(0)
    run = jax.jit(product, static_argnums=0) if jit else product
    matrix, twin = case.make(rng, dtype)
    operand = dense_operand(rng, side, case.shape, dtype)
    out = run(side, matrix, operand)
    assert out.dtype == jnp.dtype(dtype)
    assert_close(out, expected_product(side, twin, operand), dtype)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_csr_int64_indices(index_dtype):
    rng = np.random.default_rng(2)
    matrix, twin = random_csr(rng, (20, 15), dtype=jnp.float64, index_dtype=index_dtype)
    assert matrix.indices.dtype == index_dtype
    x = random_values(rng, (15, 4), jnp.float64)
    assert_close(matrix @ x, twin @ x, jnp.float64)


def test_repeated_csr_columns_add_up_like_scipy():
    twin = scipy.sparse.csr_array(
        (np.array([1.0, 2.0, 3.0]), np.array([1, 1, 0]), np.array([0, 3, 3])), shape=(2, 3)
    )
    matrix = js.CSRMatrix.from_scipy(twin)
    x = np.arange(3.0)
    np.testing.assert_allclose(matrix @ x, twin @ x)
    np.testing.assert_allclose(matrix.todense(), twin.toarray())


@pytest.mark.parametrize("shape", [(0, 0), (0, 4), (4, 0)], ids=str)
@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_empty_matrices(fmt, shape):
    dense = np.zeros(shape)
    matrix = (
        js.DIAMatrix.fromdense(dense, offsets=(0, 1))
        if fmt == "dia"
        else js.CSRMatrix.fromdense(dense)
    )
    assert matrix.nnz == 0
    m, n = shape
    assert (matrix @ np.ones(n)).shape == (m,)
    assert (matrix @ np.ones((n, 2))).shape == (m, 2)
    assert (np.ones((3, m)) @ matrix).shape == (3, n)
    np.testing.assert_array_equal(matrix @ np.ones((n, 2)), np.zeros((m, 2)))


@pytest.mark.parametrize("side", ["A@X", "X@A"])
@pytest.mark.parametrize("backend", ["xla", "auto", "interpret"])
@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_zero_column_operands_give_zero_gradients(fmt, backend, side):
    """`A @ X` with `X` of shape `(n, 0)`, or `X @ A` with `X` of shape `(0, m)`: an empty
    product, and a gradient in the values that is all zeros."""
    rng = np.random.default_rng(6)
    matrix = (
        random_dia(rng, (6, 5), (-1, 0, 2), jnp.float32)[0]
        if fmt == "dia"
        else random_csr(rng, (6, 5), density=0.5)[0]
    )
    m, n = matrix.shape
    operand = jnp.ones((n, 0) if side == "A@X" else (0, m), jnp.float32)

    def loss(data):
        a = matrix.with_data(data)
        pair = (a, operand) if side == "A@X" else (operand, a)
        return jnp.sum(js.matmul(*pair, backend=backend))

    gradient = jax.grad(loss)(matrix.data)
    assert gradient.shape == matrix.data.shape
    np.testing.assert_array_equal(gradient, np.zeros(matrix.data.shape))


def test_dia_with_no_diagonals():
    matrix = js.DIAMatrix(np.zeros((0, 4)), (), (3, 4))
    np.testing.assert_array_equal(matrix @ np.ones(4), np.zeros(3))
    np.testing.assert_array_equal(np.ones(3) @ matrix, np.zeros(4))


@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_result_dtype_follows_jnp_matmul_promotion(fmt):
    rng = np.random.default_rng(3)
    if fmt == "dia":
        matrix, _ = random_dia(rng, (5, 5), (0, 1), jnp.float32)
    else:
        matrix, _ = random_csr(rng, (5, 5), dtype=jnp.float32)
    with jax.numpy_dtype_promotion("standard"):
        for operand_dtype in (jnp.float32, jnp.bfloat16, jnp.float64, jnp.int32, jnp.complex64):
            x = jnp.ones((5,), operand_dtype)
            expected = jnp.matmul(matrix.todense(), x).dtype
            assert (matrix @ x).dtype == expected
            assert (x @ matrix).dtype == expected
        # A weakly typed operand (from a Python scalar) takes the matrix's dtype.
        for matrix_dtype in (jnp.bfloat16, jnp.float16):
            low = matrix.astype(matrix_dtype)
            weak = jnp.full((5,), 2.0)
            assert (low @ weak).dtype == (weak @ low).dtype == matrix_dtype
            assert jax.jit(lambda A, v: A @ (v * 1.0))(low, weak).dtype == matrix_dtype
    # Under strict promotion a float32/float64 mix is an error, as it is for jnp.matmul.
    with pytest.raises(jax.dtypes.TypePromotionError):
        jnp.matmul(matrix.todense(), jnp.ones(5, jnp.float64))
    with pytest.raises(jax.dtypes.TypePromotionError):
        matrix @ jnp.ones(5, jnp.float64)


def test_complex_operand_with_real_matrix_promotes():
    rng = np.random.default_rng(4)
    matrix, twin = random_dia(rng, (6, 6), (-1, 0, 1), jnp.complex128)
    real_matrix = js.DIAMatrix(matrix.data.real, matrix.offsets, matrix.shape)
    x = random_values(rng, (6,), jnp.complex128)
    with jax.numpy_dtype_promotion("standard"):
        out = real_matrix @ x
    assert out.dtype == jnp.complex128
    np.testing.assert_allclose(out, twin.toarray().real @ x, atol=1e-12)


@pytest.mark.parametrize("backend", [None, "auto", "xla"])
def test_backend_choices_agree_on_cpu(backend):
    rng = np.random.default_rng(5)
    matrix, twin = random_dia(rng, (10, 8), (-2, 0, 3), jnp.float64)
    x = random_values(rng, (8, 2), jnp.float64)
    assert_close(js.matmul(matrix, x, backend=backend), twin @ x, jnp.float64)
