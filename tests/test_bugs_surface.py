"""Bugs a new user's trial found on the scipy-like surface (issue 15), one test each."""

import types

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
from helpers import MANY_DIAGONALS, random_csr, random_dia

import jaxsparse as js


@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_repr_of_gradients_and_partitions(fmt):
    rng = np.random.default_rng(0)
    if fmt == "dia":
        matrix = random_dia(rng, (6, 5), (-1, 0, 2), jnp.float64)[0]
    else:
        matrix = random_csr(rng, (6, 5), density=0.4, dtype=jnp.float64)[0]
    x = jnp.ones(5)
    filtered = eqx.filter_grad(lambda a: jnp.sum(a @ x))(matrix)
    with_ints = jax.grad(lambda a: jnp.sum(a @ x), allow_int=True)(matrix)
    values, structure = eqx.partition(matrix, eqx.is_inexact_array)
    head = f"{type(matrix).__name__}(shape=(6, 5), dtype="
    assert repr(filtered).startswith(head + "float64, nnz=")
    assert repr(values).startswith(head + "float64, nnz=")
    assert repr(structure).startswith(head + "None, nnz=")
    if fmt == "csr":
        assert repr(filtered).endswith(f"nnz={matrix.nnz}, index_dtype=None)")
        assert repr(with_ints).endswith("index_dtype=float0)")
        assert repr(structure).endswith(f"nnz={matrix.nnz}, index_dtype=int32)")


def test_csr_fromdense_refuses_to_drop_nonzeros():
    dense = np.arange(1.0, 11.0).reshape(2, 5)
    with pytest.raises(ValueError, match=r"`dense` has 10 nonzeros but `nnz=5`: 5 would be"):
        js.CSRMatrix.fromdense(dense, nnz=5)
    exact = js.CSRMatrix.fromdense(dense, nnz=10)
    np.testing.assert_array_equal(exact.todense(), dense)
    # Under jit the count is unknown until run time: the documented truncation.
    truncated = jax.jit(lambda d: js.CSRMatrix.fromdense(d, nnz=5))(dense)
    np.testing.assert_array_equal(
        truncated.todense(), np.where(np.arange(10) < 5, dense.ravel(), 0).reshape(2, 5)
    )


@pytest.mark.parametrize("cls", [js.DIAMatrix, js.CSRMatrix])
def test_fromdense_of_a_scipy_matrix_points_to_from_scipy(cls):
    with pytest.raises(TypeError, match=rf"use `{cls.__name__}.from_scipy`"):
        cls.fromdense(scipy.sparse.eye(3))


def test_csr_todia_under_jit_says_what_to_do():
    matrix = js.CSRMatrix.from_scipy(scipy.sparse.eye(3, format="csr"))
    with pytest.raises(TypeError, match=r"Convert outside `jit`.*offsets=\.\.\."):
        jax.jit(lambda a: a.todia())(matrix)


def test_dir_lists_the_public_names_only():
    public = {
        name
        for name, value in vars(js).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(js.__all__) - {
        name for name in js.__all__ if isinstance(getattr(js, name), types.ModuleType)
    }
    assert set(dir(js)) == {*js.__all__, "__version__"}
    assert "importlib" not in dir(js) and "kernels" not in dir(js)


@pytest.mark.parametrize("side", ["A@X", "X@A"])
@pytest.mark.parametrize("backend", ["xla", "auto"])
@pytest.mark.parametrize("batched", [False, True], ids=["one", "vmap"])
def test_zero_columns_with_many_diagonals_give_zero_gradients(side, backend, batched):
    """The looping DIA path (more than 32 diagonals) with an operand of no columns, one
    matrix or a batch of values: an empty product, all-zero gradients, no IndexError."""
    matrix = random_dia(np.random.default_rng(1), (44, 40), MANY_DIAGONALS, jnp.float32)[0]
    m, n = matrix.shape
    operand = jnp.ones((n, 0) if side == "A@X" else (0, m), jnp.float32)

    def product(data):
        a = matrix.with_data(data)
        return js.matmul(*((a, operand) if side == "A@X" else (operand, a)), backend=backend)

    def loss(data):
        if batched:
            return jnp.sum(jax.vmap(product)(jnp.stack([data, 2 * data])))
        return jnp.sum(product(data))

    gradient = jax.jit(jax.grad(loss))(matrix.data)
    np.testing.assert_array_equal(gradient, np.zeros(matrix.data.shape))


def test_readme_differences_from_scipy_hold():
    """README: `DIA.tocsr()` keeps explicit zeros where scipy drops them, and `from_scipy`
    of DIA data narrower than `n` counts the padded slots in `nnz`."""
    data = np.array([[1.0, 0.0, 3.0, 4.0], [5.0, 6.0, 0.0, 8.0]])
    dia = js.DIAMatrix(data, (0, 1), (4, 4))
    assert dia.tocsr().nnz == dia.nnz == 7
    assert scipy.sparse.csr_array(dia.to_scipy()).nnz == 5
    assert dia.to_scipy().tocsr().nnz == 5
    narrow = scipy.sparse.dia_array((np.ones((2, 3)), [0, 1]), shape=(5, 5))
    converted = js.DIAMatrix.from_scipy(narrow)
    assert (narrow.nnz, converted.nnz) == (5, 9)
    np.testing.assert_array_equal(converted.todense(), narrow.toarray())


def test_boolean_csr_entries_combine_by_or():
    values = np.array([[1.0, -2.0, 0.0], [0.0, 3.0, 4.0]], np.float32)
    matrix = js.CSRMatrix.fromdense(jnp.asarray(values))
    booleans, dense = matrix > 0, values > 0
    twin = scipy.sparse.csr_array(dense)
    assert int(booleans.count_nonzero()) == twin.count_nonzero()
    product = booleans @ booleans.T
    assert product.dtype == (twin @ twin.T).dtype == np.bool_
    np.testing.assert_array_equal(product.todense(), (twin @ twin.T).toarray())
    np.testing.assert_allclose(js.linalg.norm(booleans), np.linalg.norm(dense), rtol=1e-6)


@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_boolean_products_are_ors_of_ands(fmt):
    """`B @ x` and `x @ B` with booleans: numpy's or of ands, in bool, eager and under jit."""
    dense = np.array([[1.0, -2.0, 0.0], [0.0, 3.0, 4.0]], np.float32)
    flags = js.CSRMatrix.fromdense(jnp.asarray(dense)) > 0
    flags = flags.todia() if fmt == "dia" else flags
    expected = dense > 0
    for x in (np.array([True, False, True]), np.ones((3, 2), bool)):
        for product in (lambda B, x: B @ x, jax.jit(lambda B, x: B @ x)):
            got = product(flags, x)
            assert got.dtype == jnp.bool_
            np.testing.assert_array_equal(got, expected @ x)
    y = np.array([False, True])
    np.testing.assert_array_equal(y @ flags, y @ expected)
