"""Property tests: random shapes, offsets and sparsity patterns against scipy.sparse."""

import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import jaxsparse as js

SETTINGS = settings(max_examples=10, deadline=None)
dims = st.integers(min_value=0, max_value=9)


@st.composite
def dia_cases(draw):
    m, n, k = draw(dims), draw(dims), draw(st.integers(1, 3))
    offsets = draw(st.lists(st.integers(-12, 12), unique=True, max_size=6))
    data = draw(arrays(np.float64, (len(offsets), n), elements=st.floats(-4, 4, width=32)))
    x = draw(arrays(np.float64, (n, k), elements=st.floats(-4, 4, width=32)))
    y = draw(arrays(np.float64, (k, m), elements=st.floats(-4, 4, width=32)))
    return data, tuple(offsets), (m, n), x, y


@st.composite
def csr_cases(draw):
    m, n, k = draw(dims), draw(dims), draw(st.integers(1, 3))
    mask = draw(arrays(np.bool_, (m, n)))
    dense = np.where(mask, draw(arrays(np.float64, (m, n), elements=st.floats(-4, 4))), 0.0)
    x = draw(arrays(np.float64, (n, k), elements=st.floats(-4, 4, width=32)))
    y = draw(arrays(np.float64, (k, m), elements=st.floats(-4, 4, width=32)))
    return scipy.sparse.csr_array(dense), x, y


def assert_matches(actual, expected):
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=1e-10, atol=1e-10)


@pytest.mark.slow  # a random sweep over shapes the registry's tests cover
@SETTINGS
@given(dia_cases())
def test_dia_matches_scipy(case):
    data, offsets, shape, x, y = case
    matrix = js.DIAMatrix(data, offsets, shape)
    twin = scipy.sparse.dia_array((data, np.asarray(offsets, dtype=np.int64)), shape=shape)
    dense = twin.toarray()
    assert matrix.nnz == twin.nnz
    assert_matches(matrix.todense(), dense)
    assert_matches(matrix @ x, dense @ x)
    assert_matches(y @ matrix, y @ dense)
    assert_matches(matrix.T.todense(), dense.T)
    assert_matches(matrix.tocsr().todense(), dense)
    assert_matches(js.DIAMatrix.from_scipy(twin).todense(), dense)


@pytest.mark.slow  # a random sweep over shapes the registry's tests cover
@SETTINGS
@given(csr_cases())
def test_csr_matches_scipy(case):
    twin, x, y = case
    matrix = js.CSRMatrix.from_scipy(twin)
    dense = twin.toarray()
    assert matrix.nnz == twin.nnz and matrix.indices.dtype == jnp.int32
    assert_matches(matrix.todense(), dense)
    assert_matches(matrix @ x, dense @ x)
    assert_matches(y @ matrix, y @ dense)
    assert_matches(matrix.T.todense(), dense.T)
    assert_matches(matrix.todia().todense(), dense)
    padded_nnz = twin.nnz + 2 if dense.size else 0  # an empty matrix holds no entries
    assert_matches(js.CSRMatrix.fromdense(dense, nnz=padded_nnz).todense(), dense)
