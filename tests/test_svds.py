"""`js.linalg.svds` against `numpy.linalg.svd` and `scipy.sparse.linalg.svds`: largest and
smallest singular values, tall and wide, CSR and DIA, real and complex; the triplets'
relations; `jit` and derivatives against finite differences; argument errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
import scipy.sparse.linalg
from helpers import random_csr, random_dia
from jax.test_util import check_grads

import jaxsparse as js


def matrices():
    """A tall CSR matrix with repeated positions (float64), and a wide banded DIA matrix
    (complex128), with their dense twins."""
    rng = np.random.default_rng(4)
    csr, csr_twin = random_csr(rng, (60, 35), density=0.15, dtype=jnp.float64, repeat_columns=True)
    dia, dia_twin = random_dia(rng, (20, 45), (-2, 0, 1, 5), jnp.complex128)
    return [
        pytest.param(csr, csr_twin.toarray(), id="csr-tall"),
        pytest.param(dia, dia_twin.toarray(), id="dia-wide"),
    ]


@pytest.mark.parametrize(("matrix", "dense"), matrices())
def test_triplets_match_numpys_singular_values(matrix, dense):
    k = 3
    u, s, vh = js.linalg.svds(matrix, k=k)
    expected = np.linalg.svd(dense, compute_uv=False)
    np.testing.assert_allclose(s, expected[:k][::-1], rtol=1e-10)
    assert s.dtype == jnp.float64
    np.testing.assert_allclose(dense @ np.conj(vh).T, np.asarray(u) * np.asarray(s), atol=1e-10)
    np.testing.assert_allclose(np.conj(u).T @ u, np.eye(k), atol=1e-10)
    np.testing.assert_allclose(vh @ np.conj(vh).T, np.eye(k), atol=1e-10)
    smallest = js.linalg.svds(matrix, k=2, which="SM", return_singular_vectors=False)
    np.testing.assert_allclose(smallest, expected[::-1][:2], rtol=1e-8)
    only_u, values, no_vh = js.linalg.svds(matrix, k=k, return_singular_vectors="u")
    assert no_vh is None and only_u.shape == (dense.shape[0], k)
    np.testing.assert_allclose(values, s, rtol=1e-12)


def test_singular_values_match_scipys_under_jit_with_a_traced_structure():
    """The Gram operator is two products with `A`: nothing depends on the structure on the
    host, so the structure may be traced too."""
    matrix, twin = random_csr(np.random.default_rng(5), (50, 30), density=0.2, dtype=jnp.float64)
    expected = scipy.sparse.linalg.svds(twin, k=4, return_singular_vectors=False)
    values = jax.jit(lambda a: js.linalg.svds(a, k=4, return_singular_vectors=False))(matrix)
    np.testing.assert_allclose(values, np.sort(expected), rtol=1e-10)


def test_derivatives_of_values_and_of_the_truncated_product():
    matrix, _ = random_csr(np.random.default_rng(6), (30, 20), density=0.3, dtype=jnp.float64)

    def triplets(data):
        u, s, vh = js.linalg.svds(matrix.with_data(data), k=2)
        return s, (u * s) @ vh  # the rank-2 approximation: free of the vectors' signs

    check_grads(triplets, (matrix.data,), order=1, modes=("fwd", "rev"))

    # `s = ||A v||` sends `eigsh` a cotangent along its vectors (`A^H u = s v`), which its
    # complement solve must take as nothing rather than chase the projection's rounding.
    def top_sum(data):
        return jnp.sum(js.linalg.svds(matrix.with_data(data), k=2)[1])

    def dense_top_sum(data):
        return jnp.sum(jnp.linalg.svd(matrix.with_data(data).todense(), compute_uv=False)[:2])

    np.testing.assert_allclose(
        jax.grad(top_sum)(matrix.data), jax.grad(dense_top_sum)(matrix.data), atol=1e-8
    )


def test_rank_deficient_matrices_keep_orthonormal_vectors():
    """Singular values of 0: `u` from the SVD of `A V`, not `A v / ||A v||` (rounding noise
    normalized), so it stays orthonormal and `s` ascending, as scipy's."""
    dense = np.zeros((6, 4))
    dense[0, 0], dense[1, 1], dense[2, 0] = 3.0, 2.0, 1.0  # rank 2
    u, s, vh = js.linalg.svds(js.CSRMatrix.fromdense(jnp.asarray(dense)), k=3, which="SM")
    np.testing.assert_allclose(s, [0.0, 0.0, 2.0], atol=1e-12)
    np.testing.assert_allclose(np.conj(u).T @ u, np.eye(3), atol=1e-12)
    np.testing.assert_allclose(dense @ np.conj(vh).T, np.asarray(u) * np.asarray(s), atol=1e-12)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k": 20}, r"1 <= k < min\(m, n\)"),
        ({"k": 0}, r"1 <= k < min\(m, n\)"),
        ({"which": "LA"}, "'LM' or 'SM'"),
        ({"return_singular_vectors": "v"}, "True, False, 'u' or 'vh'"),
        ({"ncv": 3}, "svds: `ncv` must be an int"),
        ({"v0": np.zeros(20)}, "svds: `v0` must not be zero"),
    ],
)
def test_arguments_are_checked(kwargs, message):
    matrix = js.CSRMatrix.from_scipy(scipy.sparse.random_array((30, 20), density=0.2, rng=0))
    with pytest.raises(ValueError, match=message):
        js.linalg.svds(matrix, **kwargs)
    with pytest.raises(TypeError, match="jaxsparse matrix"):
        js.linalg.svds(np.eye(3))
