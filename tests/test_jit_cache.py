"""Static offsets and shape key the jit cache; new values reuse the compiled function."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import random_csr, random_dia

import jaxsparse as js


@pytest.mark.parametrize("backend", ["xla", "interpret"])
def test_dia_same_offsets_reuse_new_offsets_compile(backend):
    rng = np.random.default_rng(0)
    product = jax.jit(lambda a, b: js.matmul(a, b, backend=backend))
    x = jnp.ones((8, 2), jnp.float32)
    first, _ = random_dia(rng, (8, 8), (-1, 0, 1))
    second, _ = random_dia(rng, (8, 8), (-1, 0, 1))
    out_first = product(first, x)
    out_second = product(second, x)
    assert product._cache_size() == 1
    assert not np.allclose(out_first, out_second)
    np.testing.assert_allclose(out_second, second.todense() @ x, rtol=1e-5)
    product(random_dia(rng, (8, 8), (-2, 0, 1))[0], x)
    assert product._cache_size() == 2
    product(random_dia(rng, (9, 8), (-1, 0, 1))[0], x)
    assert product._cache_size() == 3
    product(first.astype(jnp.float64), x.astype(jnp.float64))
    assert product._cache_size() == 4


def test_csr_one_compilation_serves_every_pattern_with_same_nnz():
    rng = np.random.default_rng(1)
    product = jax.jit(lambda a, b: a @ b)
    x = jnp.ones((10, 3), jnp.float32)
    lengths = np.array([3, 0, 1, 4, 2, 0, 1, 1, 0, 2])
    first, first_twin = random_csr(rng, (10, 10), row_lengths=lengths)
    second, second_twin = random_csr(rng, (10, 10), row_lengths=lengths[::-1])
    assert first.nnz == second.nnz
    assert not np.array_equal(first.indptr, second.indptr)
    np.testing.assert_allclose(product(first, x), first_twin @ np.ones((10, 3)), rtol=1e-5)
    np.testing.assert_allclose(product(second, x), second_twin @ np.ones((10, 3)), rtol=1e-5)
    assert product._cache_size() == 1
    product(random_csr(rng, (10, 10), row_lengths=lengths + 1)[0], x)
    assert product._cache_size() == 2


def test_gradient_step_compiles_once():
    rng = np.random.default_rng(2)
    step = jax.jit(jax.grad(lambda a, x: jnp.sum((a @ x) ** 2)))
    x = jnp.ones((6,), jnp.float32)
    for _ in range(3):
        matrix, _ = random_dia(rng, (6, 6), (0, 2))
        grads = step(matrix, x)
        assert grads.offsets == (0, 2)
    assert step._cache_size() == 1
