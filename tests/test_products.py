"""Products on the XLA path, both formats, both sides, against scipy.sparse."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    VALUE_DTYPES,
    as_float64,
    assert_close,
    power_law_row_lengths,
    random_csr,
    random_dia,
    random_values,
)

import jaxsparse as js

DIA_CASES = [
    ((1, 1), (0,)),
    ((6, 6), (-1, 0, 1)),
    ((9, 4), (2, -3, 0)),
    ((4, 9), (0, 5, -2, 8)),
    ((17, 23), (-20, -16, 0, 22, 30)),
    ((30, 30), tuple(range(-13, 14))),
]

CSR_CASES = [
    ("uniform", (12, 12)),
    ("uniform", (9, 20)),
    ("uniform", (25, 7)),
    ("power_law", (40, 30)),
    ("empty_rows", (15, 10)),
    ("all_empty", (6, 5)),
    ("one_dense_row", (20, 16)),
]


def make_csr(rng, kind, shape, dtype, index_dtype=np.int32):
    m, n = shape
    lengths = {
        "uniform": None,
        "power_law": power_law_row_lengths(rng, m, n),
        "empty_rows": rng.integers(0, 3, size=m) * (rng.random(m) < 0.5),
        "all_empty": np.zeros(m, np.int64),
        "one_dense_row": np.where(np.arange(m) == m // 2, n, rng.integers(0, 2, size=m)),
    }[kind]
    return random_csr(
        rng, shape, dtype=dtype, index_dtype=index_dtype, row_lengths=lengths, shuffle_columns=True
    )


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


# Every dtype under jit; eagerly (each call compiled on its own) for two dtypes.
DTYPE_AND_MODE = [(dtype, True) for dtype in VALUE_DTYPES] + [
    (jnp.float32, False),
    (jnp.complex128, False),
]
DTYPE_AND_MODE_IDS = [f"{np.dtype(d).name}-{'jit' if j else 'eager'}" for d, j in DTYPE_AND_MODE]


@pytest.mark.parametrize(("dtype", "jit"), DTYPE_AND_MODE, ids=DTYPE_AND_MODE_IDS)
@pytest.mark.parametrize("side", SIDES)
def test_dia_product_matches_scipy(dtype, side, jit):
    rng = np.random.default_rng(0)
    run = jax.jit(product, static_argnums=0) if jit else product
    for shape, offsets in DIA_CASES:
        matrix, twin = random_dia(rng, shape, offsets, dtype)
        operand = dense_operand(rng, side, shape, dtype)
        out = run(side, matrix, operand)
        assert out.dtype == jnp.dtype(dtype)
        assert_close(out, expected_product(side, twin, operand), dtype)


@pytest.mark.parametrize(("dtype", "jit"), DTYPE_AND_MODE, ids=DTYPE_AND_MODE_IDS)
@pytest.mark.parametrize("side", SIDES)
def test_csr_product_matches_scipy(dtype, side, jit):
    rng = np.random.default_rng(1)
    run = jax.jit(product, static_argnums=0) if jit else product
    for kind, shape in CSR_CASES:
        matrix, twin = make_csr(rng, kind, shape, dtype)
        operand = dense_operand(rng, side, shape, dtype)
        out = run(side, matrix, operand)
        assert out.dtype == jnp.dtype(dtype)
        assert_close(out, expected_product(side, twin, operand), dtype)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_csr_int64_indices(index_dtype):
    rng = np.random.default_rng(2)
    matrix, twin = make_csr(rng, "uniform", (20, 15), jnp.float64, index_dtype)
    assert matrix.indices.dtype == index_dtype
    x = random_values(rng, (15, 4), jnp.float64)
    assert_close(matrix @ x, twin @ x, jnp.float64)


def test_repeated_csr_columns_add_up_like_scipy():
    import scipy.sparse

    twin = scipy.sparse.csr_array(
        (np.array([1.0, 2.0, 3.0]), np.array([1, 1, 0]), np.array([0, 3, 3])), shape=(2, 3)
    )
    matrix = js.CSRMatrix.from_scipy(twin)
    x = np.arange(3.0)
    np.testing.assert_allclose(matrix @ x, twin @ x)
    np.testing.assert_allclose(matrix.todense(), twin.toarray())


@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_empty_matrices(fmt):
    for shape in [(0, 0), (0, 4), (4, 0)]:
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
        matrix, _ = make_csr(rng, "uniform", (5, 5), jnp.float32)
    with jax.numpy_dtype_promotion("standard"):
        for operand_dtype in (jnp.float32, jnp.bfloat16, jnp.float64, jnp.int32, jnp.complex64):
            x = jnp.ones((5,), operand_dtype)
            expected = jnp.matmul(matrix.todense(), x).dtype
            assert (matrix @ x).dtype == expected
            assert (x @ matrix).dtype == expected
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
