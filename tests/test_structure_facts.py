"""Facts about known CSR structures (`_structure_facts.py`): computed once per pair of
index arrays and fact, never for host or traced arrays, gone with the arrays; the
constructor's checks, eager transposes and `may_repeat` use them without changing any
answer."""

import gc

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse

import jaxsparse as js
from jaxsparse import _csr, _structure_facts
from jaxsparse._coordinates import may_repeat


def counting(value):
    """A computation returning `value` that counts its calls."""

    def compute():
        compute.calls += 1
        return value

    compute.calls = 0
    return compute


def test_a_fact_is_computed_once_per_pair_of_known_arrays():
    indices, indptr = jnp.asarray([0, 2, 1]), jnp.asarray([0, 2, 3])
    compute = counting("fact")
    assert _structure_facts.remembered(indices, indptr, "f", compute) == "fact"
    assert _structure_facts.remembered(indices, indptr, "f", compute) == "fact"
    assert compute.calls == 1
    _structure_facts.remembered(indices, indptr, "other fact", compute)
    _structure_facts.remembered(jnp.asarray([0, 2, 1]), indptr, "f", compute)
    assert compute.calls == 3  # another fact, another (equal) array


def test_host_and_traced_arrays_compute_every_time():
    compute = counting(True)
    host = (np.array([0, 1]), np.array([0, 2]))
    _structure_facts.remembered(*host, "f", compute)
    _structure_facts.remembered(*host, "f", compute)
    assert compute.calls == 2
    jax.jit(lambda i, p: _structure_facts.remembered(i, p, "f", compute) and i)(
        jnp.asarray([0, 1]), jnp.asarray([0, 2])
    )
    assert compute.calls == 3


def test_facts_leave_with_their_arrays():
    before = len(_structure_facts._FACTS)
    indices, indptr = jnp.asarray([0, 1]), jnp.asarray([0, 2])
    _structure_facts.remembered(indices, indptr, "f", counting(1))
    assert len(_structure_facts._FACTS) == before + 1
    del indices
    gc.collect()
    assert len(_structure_facts._FACTS) == before


def test_a_structure_valid_for_one_shape_is_checked_for_another():
    indices, indptr = jnp.asarray([0, 4, 1], jnp.int32), jnp.asarray([0, 2, 3], jnp.int32)
    js.CSRMatrix(jnp.ones(3), indices, indptr, (2, 5))
    with pytest.raises(ValueError, match="out of range"):
        js.CSRMatrix(jnp.ones(3), indices, indptr, (2, 3))
    with pytest.raises(ValueError, match="out of range"):  # a failed check is not kept
        js.CSRMatrix(jnp.ones(3), indices, indptr, (2, 3))


def test_an_eager_transpose_sorts_once_per_structure(monkeypatch):
    """The second `A.T` (and `A.with_data(...).T`, which shares the index arrays) reuses
    the first one's structure, index arrays included, and still gathers its own values:
    scipy's transposes."""
    matrix = scipy.sparse.random_array((7, 5), density=0.4, format="csr", rng=0)
    a = js.CSRMatrix.from_scipy(matrix)
    calls = []
    sort = _csr._transposed_structure
    monkeypatch.setattr(_csr, "_transposed_structure", lambda m: calls.append(1) or sort(m))
    first, second = a.T, a.with_data(2 * a.data).T
    assert len(calls) == 1
    assert first.indices is second.indices and first.indptr is second.indptr
    np.testing.assert_array_equal(first.todense(), matrix.T.toarray())
    np.testing.assert_array_equal(second.todense(), 2 * matrix.T.toarray())


def test_may_repeat_is_kept_per_structure(monkeypatch):
    a = js.CSRMatrix(jnp.ones(3), jnp.asarray([1, 1, 0]), jnp.asarray([0, 2, 3]), (2, 2))
    b = js.CSRMatrix.from_scipy(scipy.sparse.eye_array(3, format="csr"))
    assert may_repeat(a) is True and may_repeat(b) is False
    monkeypatch.setattr(
        "jaxsparse._coordinates._repeats_on_host", lambda m: pytest.fail("recomputed")
    )
    assert may_repeat(a) is True and may_repeat(a.with_data(a.data + 1)) is True
    assert may_repeat(b) is False


def test_a_transpose_taken_under_jit_leaves_no_tracer_behind(monkeypatch):
    """A matrix closed over by a jitted function transposes its known structure while
    tracing; scipy's route there (no native sort) must keep concrete arrays, so a later
    eager `A.T` works."""
    monkeypatch.setenv("JAXSPARSE_BACKEND", "xla")
    matrix = scipy.sparse.random_array((6, 4), density=0.5, format="csr", rng=1)
    a = js.CSRMatrix.from_scipy(matrix)
    traced = jax.jit(lambda d: js.CSRMatrix(d, a.indices, a.indptr, a.shape).T.todense())
    np.testing.assert_array_equal(traced(a.data), matrix.T.toarray())
    np.testing.assert_array_equal(a.T.todense(), matrix.T.toarray())


def test_a_donated_transpose_is_built_anew():
    matrix = scipy.sparse.random_array((6, 4), density=0.5, format="csr", rng=2)
    a = js.CSRMatrix.from_scipy(matrix)
    jax.jit(lambda t: t.with_data(2 * t.data), donate_argnums=0)(a.T)
    np.testing.assert_array_equal(a.T.todense(), matrix.T.toarray())


def test_a_pairs_finalizers_leave_with_it():
    """When one array of a pair dies, the finalizer on the other one, which may live on
    (an `indptr` shared by many matrices), goes too."""
    indptr = jnp.asarray([0, 1, 2])
    indices = jnp.asarray([1, 0])
    _structure_facts.remembered(indices, indptr, "f", counting(1))
    entry = _structure_facts._FACTS[(id(indices), id(indptr))]
    assert all(finalizer.alive for finalizer in entry.finalizers)
    del indices
    gc.collect()
    assert not any(finalizer.alive for finalizer in entry.finalizers)


def test_transposes_of_kept_transposes_are_not_kept():
    """`M = M.T` in a loop keeps `A`'s transpose alone, not a chain of every level that
    would live as long as `A`."""
    matrix = scipy.sparse.random_array((7, 5), density=0.4, format="csr", rng=3)
    a = js.CSRMatrix.from_scipy(matrix)
    before = sum("transpose" in str(list(e.facts)) for e in _structure_facts._FACTS.values())
    m = a
    for level in range(6):
        m = m.T
        np.testing.assert_array_equal(
            m.todense(), (matrix.T if level % 2 == 0 else matrix).toarray()
        )
    del m
    gc.collect()
    kept = sum("transpose" in str(list(e.facts)) for e in _structure_facts._FACTS.values())
    assert kept == before + 1
