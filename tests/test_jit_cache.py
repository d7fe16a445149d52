"""Static offsets and shape key the jit cache; new values reuse the compiled function."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import counted_compilations, random_csr, random_dia

import jaxsparse as js

# Compilations are counted as XLA reports them: `f._cache_size()` reads JAX's C++ dispatch
# cache, a global LRU shared by every jitted function, whose entries the rest of a long
# test session may evict or bypass.


@pytest.mark.parametrize("backend", ["xla", "interpret"])
def test_dia_same_offsets_reuse_new_offsets_compile(backend):
    rng = np.random.default_rng(0)
    product = jax.jit(lambda a, b: js.matmul(a, b, backend=backend))
    x = jnp.ones((8, 2), jnp.float32)
    first, _ = random_dia(rng, (8, 8), (-1, 0, 1))
    second, _ = random_dia(rng, (8, 8), (-1, 0, 1))
    others = [
        (random_dia(rng, (8, 8), (-2, 0, 1))[0], x),
        (random_dia(rng, (9, 8), (-1, 0, 1))[0], x),
        (first.astype(jnp.float64), x.astype(jnp.float64)),
    ]
    with counted_compilations() as compiled:
        out_first = product(first, x)
        out_second = product(second, x)
    assert len(compiled) == 1
    assert not np.allclose(out_first, out_second)
    np.testing.assert_allclose(out_second, second.todense() @ x, rtol=1e-5)
    for matrix, operand in others:
        with counted_compilations() as compiled:
            product(matrix, operand)
        assert len(compiled) == 1


def test_csr_one_compilation_serves_every_pattern_with_same_nnz():
    rng = np.random.default_rng(1)
    product = jax.jit(lambda a, b: a @ b)
    x = jnp.ones((10, 3), jnp.float32)
    lengths = np.array([3, 0, 1, 4, 2, 0, 1, 1, 0, 2])
    first, first_twin = random_csr(rng, (10, 10), row_lengths=lengths)
    second, second_twin = random_csr(rng, (10, 10), row_lengths=lengths[::-1])
    more = random_csr(rng, (10, 10), row_lengths=lengths + 1)[0]
    assert first.nnz == second.nnz
    assert not np.array_equal(first.indptr, second.indptr)
    with counted_compilations() as compiled:
        products = [product(first, x), product(second, x)]
    assert len(compiled) == 1
    np.testing.assert_allclose(products[0], first_twin @ np.ones((10, 3)), rtol=1e-5)
    np.testing.assert_allclose(products[1], second_twin @ np.ones((10, 3)), rtol=1e-5)
    with counted_compilations() as compiled:
        product(more, x)
    assert len(compiled) == 1


def test_gradient_step_compiles_once():
    rng = np.random.default_rng(2)
    step = jax.jit(jax.grad(lambda a, x: jnp.sum((a @ x) ** 2)))
    x = jnp.ones((6,), jnp.float32)
    matrices = [random_dia(rng, (6, 6), (0, 2))[0] for _ in range(3)]
    with counted_compilations() as compiled:
        steps = [step(matrix, x) for matrix in matrices]
    assert len(compiled) == 1
    assert all(grads.offsets == (0, 2) for grads in steps)


def _program_size(fn, *args) -> int:
    """Operations in the StableHLO of `jax.jit(fn)` (compile time grows with them)."""
    return jax.jit(fn).lower(*args).as_text().count("= stablehlo.")


def test_kron_chain_program_grows_linearly_with_factors():
    # A chain of Kronecker products of traced 2 x 2 factors (a spin-chain term): each
    # factor adds the same few operations, however many diagonals the chain has gathered.
    def chain(x, factors):
        pauli_x = js.DIAMatrix(x, (-1, 1), (2, 2))
        product = pauli_x
        for _ in range(factors - 1):
            product = js.kron(product, pauli_x)
        return product.data

    x = jnp.ones((2, 2))
    sizes = {k: _program_size(lambda x, k=k: chain(x, k), x) for k in (4, 8)}
    assert sizes[8] < 3 * sizes[4], sizes


def test_gradient_of_a_sum_of_many_dia_terms_grows_linearly_with_terms():
    # Each `+` places both operands' diagonals in one gather, so the program (and its
    # transpose) grows with the number of terms, not with terms times diagonals.
    def loss(c, terms):
        n = 64
        total = None
        for i in range(terms):
            term = js.DIAMatrix(c[i] * jnp.ones((1, n), c.dtype), (i - terms // 2,), (n, n))
            total = term if total is None else total + term
        return jnp.sum(total @ jnp.arange(n, dtype=c.dtype))

    sizes = {
        k: _program_size(jax.grad(lambda c, k=k: loss(c, k)), jnp.ones(k, jnp.float32))
        for k in (8, 16)
    }
    assert sizes[16] < 2.5 * sizes[8], sizes
    # d loss / d c_i sums x over the columns diagonal i meets.
    offsets = np.arange(16) - 8
    expected = [np.arange(64)[max(0, off) : 64 + min(0, off)].sum() for off in offsets]
    gradient = jax.grad(lambda c: loss(c, 16))(jnp.ones(16, jnp.float32))
    np.testing.assert_allclose(gradient, expected)


def test_eager_products_reuse_one_compiled_program():
    # Eager `A @ x` and `x @ A` compile once per shape, dtype and static metadata, as under
    # `jax.jit`; new values and a new pattern with the same nnz reuse the program.
    rng = np.random.default_rng(3)
    lengths = np.array([2, 0, 3, 1, 2, 1, 0, 4, 1, 2, 1])
    first, first_twin = random_csr(rng, (11, 13), row_lengths=lengths)
    second, second_twin = random_csr(rng, (11, 13), row_lengths=lengths[::-1])
    x, y = jnp.ones((13,), jnp.float32), jnp.arange(11.0, dtype=jnp.float32)
    first @ x, y @ first
    with counted_compilations() as compiled:
        for matrix, twin in ((first, first_twin), (second, second_twin)):
            np.testing.assert_allclose(matrix @ x, twin @ np.ones(13), rtol=1e-5)
            np.testing.assert_allclose(y @ matrix, np.arange(11.0) @ twin, rtol=1e-5)
    assert compiled == []
