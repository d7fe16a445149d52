"""Batched matrices (leading batch axes on the leaves) answer per member or refuse.

Each case is built the way a user meets it: `jax.vmap` returning a matrix. Results are
compared with the members built one by one and with dense `jnp` math.
"""

import jax
import jax.numpy as jnp
import jax.test_util
import numpy as np
import pytest
from helpers import assert_close

import jaxsparse as js

SCALES = jnp.array([1.0, 10.0, -2.0])


def batched_dia():
    base = js.diags([jnp.arange(1.0, 5.0), jnp.arange(1.0, 4.0)], [0, 1], shape=(4, 4))
    return base, jax.vmap(lambda c: c * base)(SCALES)


def batched_csr(shared_structure: bool):
    rng = np.random.default_rng(0)
    dense = np.where(rng.random((5, 4)) < 0.5, rng.standard_normal((5, 4)), 0.0)
    base = js.CSRMatrix.fromdense(jnp.asarray(dense))
    if shared_structure:
        data = SCALES[:, None] * base.data
        return base, js.CSRMatrix(data, base.indices, base.indptr, base.shape)
    # `vmap` gives every leaf the batch axis, the index arrays too.
    return base, jax.vmap(lambda c: c * base)(SCALES)


CASES = {
    "dia": batched_dia,
    "csr-shared-structure": lambda: batched_csr(True),
    "csr-from-vmap": lambda: batched_csr(False),
}


@pytest.fixture(params=list(CASES), scope="module")
def case(request):
    return CASES[request.param]()


def dense_members(base):
    return SCALES[:, None, None] * base.todense()


def test_batch_is_visible(case):
    base, batched = case
    assert batched.batch_shape == (3,)
    assert batched.shape == base.shape
    assert batched.nnz == base.nnz
    assert "batch=(3,)" in repr(batched)
    assert f"nnz={base.nnz}" in repr(batched)
    assert base.batch_shape == ()
    assert "batch" not in repr(base)


def test_todense_and_transpose(case):
    base, batched = case
    expected = dense_members(base)
    assert_close(batched.todense(), expected, jnp.float64)
    transposed = batched.T
    assert transposed.batch_shape == (3,)
    assert_close(transposed.todense(), jnp.swapaxes(expected, -1, -2), jnp.float64)


def test_products_broadcast_over_the_batch(case):
    base, batched = case
    m, n = base.shape
    expected = dense_members(base)
    x = jnp.arange(1.0, n + 1.0)
    X = jnp.arange(2.0 * n).reshape(n, 2)
    per_member = jnp.arange(3.0 * n * 2).reshape(3, n, 2)
    assert_close(batched @ x, expected @ x, jnp.float64)
    assert (batched @ X).shape == (3, m, 2)
    assert_close(batched @ X, expected @ X, jnp.float64)
    assert_close(batched @ per_member, expected @ per_member, jnp.float64)
    y = jnp.arange(1.0, m + 1.0)
    assert_close(y @ batched, y @ expected, jnp.float64)
    with pytest.raises(ValueError, match=r"batch=\(3,\)"):
        batched @ jnp.ones((2, n, 2))


def test_reductions_per_member(case):
    base, batched = case
    expected = dense_members(base)
    assert_close(batched.sum(), expected.sum(axis=(1, 2)), jnp.float64)
    assert_close(batched.sum(axis=0), expected.sum(axis=1), jnp.float64)
    assert_close(batched.max(axis=1), expected.max(axis=2), jnp.float64)
    assert_close(batched.min(), expected.min(axis=(1, 2)), jnp.float64)
    assert_close(batched.diagonal(), jnp.diagonal(expected, axis1=1, axis2=2), jnp.float64)
    assert_close(batched.trace(), jnp.trace(expected, axis1=1, axis2=2), jnp.float64)


def test_arithmetic_per_member(case):
    base, batched = case
    expected = dense_members(base)
    assert_close((2.0 * batched).todense(), 2.0 * expected, jnp.float64)
    assert_close((batched / 2.0).todense(), expected / 2.0, jnp.float64)
    if base.format == "csr" and batched.indices.ndim > 1:
        # A structure per member: each sum's structure may differ, a static `nnz` is needed.
        for operation in (lambda: batched + batched, lambda: batched @ base.T):
            with pytest.raises(ValueError, match=r"batch=\(3,\)"):
                operation()
        total = js.add(batched, batched, nnz=base.nnz)
        difference = js.subtract(batched, base, nnz=base.nnz)
    else:
        total, difference = batched + batched, batched - base
        product = base.todense() @ base.todense().T
        assert_close((batched @ base.T).todense(), SCALES[:, None, None] * product, jnp.float64)
    assert_close(total.todense(), 2.0 * expected, jnp.float64)
    assert_close(difference.todense(), expected - base.todense(), jnp.float64)
    assert_close((batched + base.todense()), expected + base.todense(), jnp.float64)
    assert_close(batched.multiply(base).todense(), expected * base.todense(), jnp.float64)
    assert_close((-batched).todense(), -expected, jnp.float64)


def test_dense_operands_pair_up_with_members(case):
    """A dense operand with the batch's axes in front gives each member its own; one of
    rank 2 is shared; other leading axes are a ValueError naming the batch."""
    base, batched = case
    m, n = base.shape
    expected = dense_members(base)
    per_member = jnp.arange(3.0 * m * n).reshape(3, m, n) - 10.0
    assert_close(batched + per_member, expected + per_member, jnp.float64)
    assert_close(per_member - batched, per_member - expected, jnp.float64)
    product = batched * per_member
    assert product.batch_shape == (3,) and product.format == base.format
    assert_close(product.todense(), expected * per_member, jnp.float64)
    rows = per_member[:, :, :1]  # each member's own row scaling
    assert_close(batched.multiply(rows).todense(), expected * rows, jnp.float64)
    np.testing.assert_array_equal(batched < per_member, expected < per_member)
    np.testing.assert_array_equal(batched == np.asarray(per_member), expected == per_member)
    traced = jax.jit(lambda a, d: (a * d).todense())(batched, per_member)
    assert_close(traced, expected * per_member, jnp.float64)
    assert_close((batched * per_member[0]).todense(), expected * per_member[0], jnp.float64)
    for operation in (lambda d: batched + d, lambda d: batched * d, lambda d: batched > d):
        for shape in ((2, m, n), (1, 3, m, n)):
            with pytest.raises(ValueError, match=r"batch=\(3,\)"):
                operation(jnp.ones(shape))


def test_sparse_comparisons_per_member_or_refused(case):
    """Sparse-to-sparse comparisons with a sparse result (`!=`, `<`, `>`) work on a shared
    structure; a structure per member (indices batched by `jax.vmap`) is a ValueError
    naming the batch, as for `+`; `==` (dense result) works on every batch."""
    base, batched = case
    expected = dense_members(base)
    np.testing.assert_array_equal(batched == base, expected == base.todense())
    if base.format == "csr" and batched.indices.ndim > 1:
        for operation in (lambda: batched < batched, lambda: base != batched):
            with pytest.raises(ValueError, match=r"batch=\(3,\)"):
                operation()
        return
    np.testing.assert_array_equal((batched < base).todense(), expected < base.todense())
    np.testing.assert_array_equal((base != batched).todense(), base.todense() != expected)


def test_member_and_refusals(case):
    base, batched = case
    member = batched.batch_member(1)
    assert member.batch_shape == ()
    assert_close(member.todense(), 10.0 * base.todense(), jnp.float64)
    for operation in (
        lambda: batched[0],
        lambda: batched.to_scipy(),
        lambda: js.kron(batched, base),
        lambda: js.vstack([batched, base]),
        lambda: batched.to_bcoo(),
    ):
        with pytest.raises(ValueError, match=r"batch=\(3,\)"):
            operation()
    with pytest.raises(ValueError, match="no batch"):
        base.batch_member(0)


def test_tocoo_and_triangles_per_member_or_refused(case):
    base, batched = case
    with pytest.raises(ValueError, match=r"batch=\(3,\)"):
        batched.tocoo()
    expected = dense_members(base)
    for triangle, dense_triangle in ((js.tril, jnp.tril), (js.triu, jnp.triu)):
        if base.format == "csr":
            with pytest.raises(ValueError, match=r"batch=\(3,\)"):
                triangle(batched)
        else:
            assert_close(triangle(batched).todense(), dense_triangle(expected), jnp.float64)


def test_gradient_through_a_batched_product():
    base, _ = batched_dia()
    x = jnp.arange(1.0, 5.0)

    def loss(scales):
        batched = jax.vmap(lambda c: c * base)(scales)
        return jnp.sum((batched @ x) ** 2)

    def dense_loss(scales):
        return jnp.sum((dense_members_of(scales, base) @ x) ** 2)

    assert_close(jax.grad(loss)(SCALES), jax.grad(dense_loss)(SCALES), jnp.float64)
    jax.test_util.check_grads(loss, (SCALES,), order=1, modes=["rev"])


def dense_members_of(scales, base):
    return scales[:, None, None] * base.todense()


def test_explicit_batched_construction():
    data = jnp.arange(2 * 2 * 4, dtype=jnp.float64).reshape(2, 2, 4)
    batched = js.DIAMatrix(data, (0, 1), (4, 4))
    assert batched.batch_shape == (2,)
    for b in range(2):
        member = js.DIAMatrix(data[b], (0, 1), (4, 4))
        assert_close(batched.todense()[b], member.todense(), jnp.float64)
    with pytest.raises(ValueError, match="diagonals"):
        js.DIAMatrix(jnp.ones((2, 3, 4)), (0, 1), (4, 4))
    base = js.CSRMatrix(jnp.ones(3), jnp.array([0, 1, 2]), jnp.array([0, 1, 2, 3]), (3, 3))
    csr = js.CSRMatrix(jnp.ones((2, 3)), base.indices, base.indptr, (3, 3))
    assert csr.batch_shape == (2,) and csr.nnz == 3
    with pytest.raises(ValueError, match="indices"):
        js.CSRMatrix(jnp.ones((2, 3)), jnp.zeros((4, 3), jnp.int32), base.indptr, (3, 3))


def test_two_batch_axes():
    base, _ = batched_dia()
    grid = jnp.arange(1.0, 7.0).reshape(2, 3)
    batched = jax.vmap(jax.vmap(lambda c: c * base))(grid)
    assert batched.batch_shape == (2, 3)
    x = jnp.arange(1.0, 5.0)
    expected = grid[:, :, None, None] * base.todense()
    assert_close(batched @ x, expected @ x, jnp.float64)
    assert_close(batched.sum(axis=1), expected.sum(axis=3), jnp.float64)
