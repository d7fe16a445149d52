"""scipy habits: elementwise comparisons, and clear errors for what we do not take."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse

import jaxsparse as js

LEFT = np.array([[1.0, 0.0, 2.0, 0.0], [0.0, -3.0, 3.0, 0.0], [4.0, 0.0, 0.0, 1.0]])
RIGHT = np.array([[1.0, 5.0, 0.0, 0.0], [0.0, 2.0, 3.0, 0.0], [0.0, 0.0, 0.0, -1.0]])
OPERATORS = ("==", "!=", "<", "<=", ">", ">=")


def compare(a, b, op):
    return {
        "==": lambda: a == b,
        "!=": lambda: a != b,
        "<": lambda: a < b,
        "<=": lambda: a <= b,
        ">": lambda: a > b,
        ">=": lambda: a >= b,
    }[op]()


def as_dense_bool(result) -> np.ndarray:
    if isinstance(result, js.SparseMatrix):
        return np.asarray(result.todense())
    return np.asarray(result)


@pytest.fixture(scope="module", params=["dia", "csr"])
def pair(request):
    build = js.DIAMatrix.fromdense if request.param == "dia" else js.CSRMatrix.fromdense
    return build(jnp.asarray(LEFT)), build(jnp.asarray(RIGHT))


@pytest.mark.filterwarnings("ignore::scipy.sparse.SparseEfficiencyWarning")
@pytest.mark.parametrize("op", OPERATORS)
def test_sparse_against_sparse(pair, op):
    a, b = pair
    result = compare(a, b, op)
    expected = compare(scipy.sparse.csr_array(LEFT), scipy.sparse.csr_array(RIGHT), op)
    np.testing.assert_array_equal(as_dense_bool(result), expected.toarray())
    # Sparse where scipy's result is sparse (false where both are zero), else dense.
    assert isinstance(result, js.SparseMatrix) == (op in ("!=", "<", ">"))
    if isinstance(result, js.SparseMatrix):
        assert result.dtype == jnp.bool_ and result.format == a.format


@pytest.mark.parametrize("op", OPERATORS)
@pytest.mark.parametrize("scalar", [0.0, 2.0, -1.0])
def test_sparse_against_scalar(pair, op, scalar):
    a, _ = pair
    result = compare(a, scalar, op)
    expected = compare(LEFT, scalar, op)
    np.testing.assert_array_equal(as_dense_bool(result), expected)
    assert isinstance(result, js.SparseMatrix) == (not compare(0.0, scalar, op))
    if isinstance(result, js.SparseMatrix):
        assert int(result.sum()) == int(expected.sum())


@pytest.mark.parametrize("op", OPERATORS)
def test_literal_scalars_keep_their_result_under_jit(pair, op):
    """A Python or numpy scalar is known under `jit` too: the same result type as outside."""
    a, _ = pair
    for scalar in (0, 2.0, np.float64(-1.0)):
        eager = compare(a, scalar, op)
        traced = jax.jit(lambda m, scalar=scalar: compare(m, scalar, op))(a)
        assert type(traced) is type(eager)
        assert isinstance(traced, js.SparseMatrix) == (not compare(0.0, scalar, op))
        np.testing.assert_array_equal(as_dense_bool(traced), compare(LEFT, scalar, op))


def test_counts_and_dense_operands(pair):
    a, b = pair
    assert int((a != 0).sum()) == np.count_nonzero(LEFT)
    np.testing.assert_array_equal((a != 0).sum(axis=0), np.count_nonzero(LEFT, axis=0))
    np.testing.assert_array_equal(a < RIGHT, LEFT < RIGHT)
    np.testing.assert_array_equal(a == jnp.asarray(RIGHT), LEFT == RIGHT)
    np.testing.assert_array_equal(as_dense_bool(0.5 < a), 0.5 < LEFT)
    # conftest's strict promotion wants the cast that default promotion makes itself.
    product = (a > 0).astype(jnp.float64) @ jnp.ones(4)
    np.testing.assert_allclose(product, (LEFT > 0).sum(axis=1))
    # Under jit, a traced scalar cannot tell whether `0 op s` holds: dense, still right.
    traced = jax.jit(lambda m, s: m != s)(a, 2.0)
    np.testing.assert_array_equal(traced, LEFT != 2.0)
    with pytest.raises(TypeError, match="`<`"):
        compare(a, None, "<")
    with pytest.raises(ValueError, match="ambiguous"):
        bool(a == b)


def test_comparisons_of_batched_matrices(pair):
    a, _ = pair
    batched = jax.vmap(lambda c: c * a)(jnp.array([1.0, -1.0]))
    result = batched > 0
    assert result.batch_shape == (2,)
    np.testing.assert_array_equal(result.todense(), np.stack([LEFT > 0, -LEFT > 0]))


def test_errors_name_what_to_do(pair):
    a, _ = pair
    twin = scipy.sparse.csr_array(RIGHT.T)
    with pytest.raises(TypeError, match="NoneType"):
        None * a
    for convert in (jnp.asarray, np.asarray):
        with pytest.raises(TypeError, match="todense"):
            convert(a)
    with pytest.raises(TypeError, match="from_scipy"):
        a @ twin
    with pytest.raises(TypeError, match="from_scipy"):
        twin.T @ a.T
    with pytest.raises(TypeError, match="from_scipy"):
        a + scipy.sparse.csr_array(RIGHT)


def test_traced_row_index_clamps_like_jnp(pair):
    a, _ = pair
    dense = jnp.asarray(LEFT)
    row = jax.jit(lambda m, i: m[i])
    entry = jax.jit(lambda m, i, j: m[i, j])
    for i in (5, -7, 2, -1):
        np.testing.assert_array_equal(row(a, i), jax.jit(lambda d, i: d[i])(dense, i))
        np.testing.assert_array_equal(entry(a, i, 9), jax.jit(lambda d, i, j: d[i, j])(dense, i, 9))
    column = jax.jit(lambda m, j: m[:, j])
    np.testing.assert_array_equal(column(a, 10), dense[:, -1])
    # An empty axis has no row or column to clamp to: IndexError at trace time, as `jnp`.
    for shape in ((0, 5), (5, 0)):
        empty = type(a).fromdense(jnp.zeros(shape))
        with pytest.raises(IndexError):
            jax.jit(lambda d, i, j: d[i, j])(jnp.zeros(shape), 0, 0)
        with pytest.raises(IndexError, match="out of range for size 0"):
            entry(empty, 0, 0)
        axis = row if shape[0] == 0 else column
        with pytest.raises(IndexError, match="out of range for size 0"):
            axis(empty, 0)
