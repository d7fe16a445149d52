"""`js.linalg.spsolve` and `js.linalg.factorized` against scipy (`spsolve`, LAPACK's banded
LU) and dense `jnp` math: square DIA and CSR systems in four dtypes, inside and outside
`jit`, the transposed solves, batches, and bad input."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg.lapack
import scipy.sparse
import scipy.sparse.linalg
from helpers import (
    DIA_MATRICES,
    as_float64,
    counted_compilations,
    dtype_id,
    ignored_slots,
    random_csr,
    random_dia,
    random_values,
)
from jax.test_util import check_grads

import jaxsparse as js
from jaxsparse.kernels import native_banded_lu

SOLVE_DTYPES = (jnp.float32, jnp.float64, jnp.complex64, jnp.complex128)

# Relative error of a solve against the float64 oracle, for the well-conditioned systems
# below (condition numbers up to a few hundred).
SOLVE_TOLERANCES = {
    np.dtype(jnp.float32): 5e-4,
    np.dtype(jnp.complex64): 5e-4,
    np.dtype(jnp.float64): 1e-10,
    np.dtype(jnp.complex128): 1e-10,
}


def _grid_offsets(*sides) -> tuple[int, ...]:
    """The offsets of the (2 * len(sides) + 1)-point Laplacian on a grid of `sides`."""
    strides = [int(np.prod(sides[axis + 1 :])) for axis in range(len(sides))]
    return (0, *(sign * stride for stride in strides for sign in (-1, 1)))


def _shift_diagonal(matrix, twin, shift):
    """`matrix + shift * I` and its twin, keeping the format."""
    n = matrix.shape[0]
    if isinstance(matrix, js.DIAMatrix):
        main = matrix.offsets.index(0)
        data = matrix.data.at[main].add(jnp.asarray(shift, matrix.dtype))
        data_64 = twin.data.copy()
        data_64[main] += shift
        return matrix.with_data(data), scipy.sparse.dia_array(
            (data_64, twin.offsets), shape=twin.shape
        )
    dense_twin = twin + shift * scipy.sparse.eye_array(n)
    dense_twin = scipy.sparse.csr_array(dense_twin)
    return js.CSRMatrix.from_scipy(dense_twin.astype(matrix.dtype)), dense_twin


def _dia_system(rng, dtype, n, offsets, shift):
    matrix, twin = random_dia(rng, (n, n), offsets, dtype)
    return _shift_diagonal(matrix, twin, shift)


def _tridiagonal_needing_pivots(rng, dtype):
    """Zero main diagonal (every pivot comes from the row below), n even: nonsingular."""
    matrix, twin = random_dia(rng, (20, 20), (-1, 0, 1), dtype)
    main = matrix.offsets.index(0)
    data_64 = twin.data.copy()
    data_64[main] = 0
    data = matrix.data.at[main].set(0)
    return matrix.with_data(data), scipy.sparse.dia_array((data_64, twin.offsets), shape=twin.shape)


def _csr_system(rng, dtype, n, *, row_lengths=None, density=0.15, shift=4.0, repeat=False):
    matrix, twin = random_csr(
        rng,
        (n, n),
        density=density,
        dtype=dtype,
        row_lengths=row_lengths,
        shuffle_columns=True,
        repeat_columns=repeat,
    )
    return _shift_diagonal(matrix, twin, shift)


def _csr_needing_pivots(rng, dtype):
    """A permutation with small noise on the diagonal: no pivot is on the diagonal."""
    n = 24
    permutation = np.roll(np.arange(n), 5)
    dense = np.zeros((n, n))
    dense[np.arange(n), permutation] = 1.0 + rng.random(n)
    dense += np.diag(1e-3 * rng.random(n))
    twin = scipy.sparse.csr_array(dense)
    if np.issubdtype(np.dtype(dtype), np.complexfloating):
        twin = twin * (1 + 0.5j)
    return js.CSRMatrix.from_scipy(twin.astype(dtype)), twin


def _as_csr(system):
    """A DIA system and its twin as CSR (the stencils in the other format)."""
    matrix, twin = system
    twin = scipy.sparse.csr_array(twin)
    return js.CSRMatrix.from_scipy(twin.astype(matrix.dtype)), twin


_UNSORTED_OFFSETS = next(case for case in DIA_MATRICES if case.name == "dia-unsorted-offsets")

# name -> (rng, dtype) -> (matrix, float64/complex128 scipy twin)
SYSTEMS = {
    "dia-1x1": lambda rng, dtype: _dia_system(rng, dtype, 1, (0,), 3.0),
    "dia-tridiagonal": lambda rng, dtype: _dia_system(rng, dtype, 40, (-1, 0, 1), 4.0),
    "dia-pentadiagonal": lambda rng, dtype: _dia_system(rng, dtype, 40, (-2, -1, 0, 1, 2), 6.0),
    "dia-5-point": lambda rng, dtype: _dia_system(rng, dtype, 42, _grid_offsets(6, 7), 6.0),
    "dia-7-point": lambda rng, dtype: _dia_system(rng, dtype, 36, _grid_offsets(3, 3, 4), 7.0),
    "dia-unsorted-offsets": lambda rng, dtype: _dia_system(
        rng, dtype, _UNSORTED_OFFSETS.shape[0], _UNSORTED_OFFSETS.structure, 5.0
    ),
    "dia-needs-pivoting": _tridiagonal_needing_pivots,
    "dia-band-wider-than-dense": lambda rng, dtype: _dia_system(rng, dtype, 6, (-3, 0, 4), 5.0),
    "csr-5-point": lambda rng, dtype: _as_csr(
        _dia_system(rng, dtype, 42, _grid_offsets(6, 7), 6.0)
    ),
    "csr-7-point": lambda rng, dtype: _as_csr(
        _dia_system(rng, dtype, 36, _grid_offsets(3, 3, 4), 7.0)
    ),
    "csr-random": lambda rng, dtype: _csr_system(rng, dtype, 30),
    "csr-power-law": lambda rng, dtype: _csr_system(
        rng, dtype, 40, row_lengths=np.minimum(np.floor(rng.pareto(1.5, 40)), 36), shift=8.0
    ),
    "csr-repeated-columns": lambda rng, dtype: _csr_system(
        rng, dtype, 25, row_lengths=rng.integers(0, 6, 25), repeat=True
    ),
    "csr-needs-pivoting": _csr_needing_pivots,
}


def _oracle(twin, b, op="N"):
    """scipy's solve in float64/complex128."""
    system = {"N": twin, "T": twin.T, "H": twin.conj().T}[op]
    b = as_float64(b)
    if np.iscomplexobj(b) or np.iscomplexobj(system.data):
        system = system.astype(np.complex128)
        b = b.astype(np.complex128)
    x = scipy.sparse.linalg.spsolve(scipy.sparse.csc_array(system), b)
    return x.reshape(b.shape)


def _assert_solution(x, expected, dtype):
    assert x.dtype == np.dtype(dtype)
    scale = max(1.0, float(np.max(np.abs(expected))))
    np.testing.assert_allclose(
        as_float64(x), expected, rtol=0, atol=SOLVE_TOLERANCES[np.dtype(dtype)] * scale
    )


@functools.cache
def _jitted(trans):
    return jax.jit(lambda A, b: js.linalg.factorized(A).solve(b, trans))


# Every system in float64 and complex64, and these also in float32 and complex128; the
# rest of the sweep is marked slow (the same code paths, other dtypes).
_EVERY_DTYPE = (
    "dia-tridiagonal",
    "dia-5-point",
    "dia-needs-pivoting",
    "csr-random",
    "csr-needs-pivoting",
)


def _system_dtype_params():
    for name in SYSTEMS:
        for dtype in SOLVE_DTYPES:
            core = name in _EVERY_DTYPE or dtype in (jnp.float64, jnp.complex64)
            marks = () if core else (pytest.mark.slow,)
            yield pytest.param(name, dtype, id=f"{name}-{dtype_id(dtype)}", marks=marks)


@pytest.mark.parametrize(("name", "dtype"), list(_system_dtype_params()))
def test_spsolve_matches_scipy(name, dtype):
    rng = np.random.default_rng(1)
    matrix, twin = SYSTEMS[name](rng, dtype)
    b = random_values(rng, (matrix.shape[0],), dtype)
    expected = _oracle(twin, b)
    _assert_solution(js.linalg.spsolve(matrix, b), expected, dtype)
    _assert_solution(_jitted("N")(matrix, b), expected, dtype)


@pytest.mark.parametrize("trans", ["N", "T", "H"])
@pytest.mark.parametrize("name", ["dia-5-point", "dia-band-wider-than-dense", "csr-power-law"])
def test_transposed_solves_with_many_columns(name, trans):
    rng = np.random.default_rng(2)
    matrix, twin = SYSTEMS[name](rng, jnp.complex128)
    b = random_values(rng, (matrix.shape[0], 3), jnp.complex128)
    _assert_solution(_jitted(trans)(matrix, b), _oracle(twin, b, trans), jnp.complex128)


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.complex64], ids=dtype_id)
@pytest.mark.parametrize("offsets", [(-1, 0, 1), (-2, 3, 0, -5, 1)])
def test_band_factors_are_lapacks(offsets, dtype):
    """The native factors equal LAPACK's `?gbtrf` (scipy) in its memory order (the
    transpose of its band array), the host path's too."""
    rng = np.random.default_rng(3)
    n = 30
    data = random_values(rng, (len(offsets), n), dtype)
    kl, ku = native_banded_lu.bandwidths(offsets, n)
    band, pivots, info = native_banded_lu.banded_lu(
        jnp.asarray(data), offsets=offsets, kl=kl, ku=ku
    )
    lapack_band = np.zeros((2 * kl + ku + 1, n), data.dtype)
    for values, offset in zip(data, offsets, strict=True):
        columns = slice(max(0, offset), min(n, n + offset))
        lapack_band[kl + ku - offset, columns] = values[columns]
    gbtrf = scipy.linalg.lapack.get_lapack_funcs("gbtrf", dtype=data.dtype)
    expected_band, expected_pivots, expected_info = gbtrf(lapack_band, kl, ku)
    np.testing.assert_allclose(band, expected_band.T, rtol=1e-5)
    np.testing.assert_array_equal(pivots, expected_pivots)
    assert int(info) == expected_info == 0
    host = native_banded_lu.banded_lu(jnp.asarray(data), offsets=offsets, kl=kl, ku=ku, host=True)
    np.testing.assert_allclose(host[0], expected_band.T, rtol=1e-5)
    # 1, 3 and 17 columns: the native solve's paths for a vector, pairs and a remainder,
    # and many columns at once, split over threads.
    b = jnp.asarray(random_values(rng, (n, 17), dtype))
    for op in "NTH":
        solve = functools.partial(
            native_banded_lu.banded_lu_solve,
            band,
            pivots,
            jnp.asarray(data),
            offsets=offsets,
            kl=kl,
            ku=ku,
            op=op,
        )
        host_x = solve(b, host=True)
        for width in (1, 3, 17):
            native_x = solve(b[:, :width])
            np.testing.assert_allclose(native_x, host_x[:, :width], rtol=1e-4, atol=1e-5)
    # Factors edited by hand: a pivot outside [j, j + kl] is refused, never followed.
    for pivot in (n + 5, -1):
        for host in (False, True):
            bad = functools.partial(
                native_banded_lu.banded_lu_solve,
                band,
                pivots.at[3].set(pivot),
                jnp.asarray(data),
                b,
                offsets=offsets,
                kl=kl,
                ku=ku,
                host=host,
            )
            with pytest.raises(Exception, match=r"pivots\[j\] must lie in"):
                jax.block_until_ready(bad())


@pytest.mark.parametrize("name", ["dia-pentadiagonal", "csr-random"])
def test_factorization_reused_across_jitted_calls(name):
    rng = np.random.default_rng(4)
    matrix, twin = SYSTEMS[name](rng, jnp.float64)
    factors = jax.jit(js.linalg.factorized)(matrix)
    solve = jax.jit(lambda f, b: f.solve(b))
    for _ in range(3):
        b = random_values(rng, (matrix.shape[0],), jnp.float64)
        _assert_solution(solve(factors, b), _oracle(twin, b), jnp.float64)
    _assert_solution(factors(b), _oracle(twin, b), jnp.float64)
    assert solve._cache_size() == 1


@pytest.mark.parametrize("name", ["dia-tridiagonal", "dia-band-wider-than-dense", "csr-random"])
def test_vmap_over_right_hand_sides(name):
    rng = np.random.default_rng(5)
    matrix, twin = SYSTEMS[name](rng, jnp.float64)
    n = matrix.shape[0]
    bs = random_values(rng, (4, n, 2), jnp.float64)
    xs = jax.jit(jax.vmap(js.linalg.spsolve, in_axes=(None, 0)))(matrix, bs)
    for b, x in zip(bs, xs, strict=True):
        _assert_solution(x, _oracle(twin, b), jnp.float64)
    vectors = jax.vmap(js.linalg.spsolve, in_axes=(None, 1), out_axes=1)(matrix, bs[0])
    _assert_solution(vectors, _oracle(twin, bs[0]), jnp.float64)


@pytest.mark.parametrize("name", ["dia-pentadiagonal", "dia-band-wider-than-dense", "csr-random"])
def test_vmap_over_values(name):
    rng = np.random.default_rng(6)
    members = [SYSTEMS[name](np.random.default_rng(seed), jnp.float64) for seed in range(3)]
    matrix = members[0][0]
    n = matrix.shape[0]
    if isinstance(matrix, js.CSRMatrix):  # one shared structure, values from each member
        base = members[0][1]
        members = [
            (
                m,
                scipy.sparse.csr_array(
                    (base.data * (1 + 0.1 * i), base.indices, base.indptr), shape=base.shape
                ),
            )
            for i, (m, _) in enumerate(members)
        ]
        values = jnp.stack([jnp.asarray(twin.data) for _, twin in members])
        matrix = js.CSRMatrix(values[0], base.indices, base.indptr, base.shape)
    else:
        values = jnp.stack([m.data for m, _ in members])
    b = random_values(rng, (n,), jnp.float64)
    solve = jax.jit(
        jax.vmap(lambda data, b: js.linalg.spsolve(matrix.with_data(data), b), in_axes=(0, None))
    )
    xs = solve(values, b)
    for (_, twin), x in zip(members, xs, strict=True):
        _assert_solution(x, _oracle(twin, b), jnp.float64)
    bs = random_values(rng, (3, n), jnp.float64)
    xs = jax.vmap(lambda data, b: js.linalg.spsolve(matrix.with_data(data), b))(values, bs)
    for (_, twin), b, x in zip(members, bs, xs, strict=True):
        _assert_solution(x, _oracle(twin, b), jnp.float64)


@pytest.mark.parametrize(
    "name", ["dia-all-outside", "dia-dense-lu", "csr-zero-row", "csr-no-entries"]
)
def test_singular_matrix_gives_nan(name):
    if name == "dia-all-outside":
        matrix = js.DIAMatrix(jnp.ones((3, 10)), (10, -10, 25), (10, 10))
    elif name == "dia-dense-lu":  # a band as wide as the matrix, two equal rows
        dense = jnp.array([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
        matrix = js.DIAMatrix.fromdense(dense, offsets=(-1, 0, 1))
    elif name == "csr-no-entries":
        matrix = js.CSRMatrix(
            jnp.zeros(0), jnp.zeros(0, jnp.int32), jnp.zeros(3, jnp.int32), (2, 2)
        )
    else:
        dense = np.eye(6)
        dense[2] = 0.0
        matrix = js.CSRMatrix.fromdense(jnp.asarray(dense))
    b = jnp.ones(matrix.shape[0])
    assert np.all(np.isnan(js.linalg.spsolve(matrix, b)))
    assert np.all(np.isnan(jax.jit(js.linalg.spsolve)(matrix, b)))


@pytest.mark.parametrize("column", [2, 100_000, -1, -(2**31)])
def test_invalid_structure_under_jit_gives_nan(column):
    """Under `jit` nothing checks a CSR structure before the host factors it: an index out
    of range must give nan, never reach scipy's unchecked conversions."""
    indptr = jnp.array([0, 1, 2], jnp.int32)
    solve = jax.jit(
        lambda indices, indptr: js.linalg.spsolve(
            js.CSRMatrix(jnp.ones(2), indices, indptr, (2, 2)), jnp.ones(2)
        )
    )
    assert np.all(np.isnan(solve(jnp.array([0, column], jnp.int32), indptr)))
    assert np.all(np.isnan(solve(jnp.array([0, 1], jnp.int32), jnp.array([0, 2, 1], jnp.int32))))
    np.testing.assert_allclose(solve(jnp.array([0, 1], jnp.int32), indptr), [1.0, 1.0])


@pytest.mark.parametrize("name", ["dia-tridiagonal", "csr-random"])
def test_spsolve_promotes_as_scipy(name):
    """A complex `b` with a real `A`, or a float64 `b` with a float32 `A`, is solved in the
    promoted dtype, as scipy's `spsolve` does; gradients reach `A`'s real values."""
    rng = np.random.default_rng(14)
    matrix, twin = SYSTEMS[name](rng, jnp.float64)
    b = random_values(rng, (matrix.shape[0],), jnp.complex128)
    x = js.linalg.spsolve(matrix, b)
    expected = scipy.sparse.linalg.spsolve(twin.tocsc(), b)
    assert x.dtype == expected.dtype == np.complex128
    np.testing.assert_allclose(np.asarray(x), expected, rtol=1e-10)
    x = js.linalg.spsolve(matrix.astype(jnp.float32), b.real)
    expected = scipy.sparse.linalg.spsolve(twin.astype(np.float32).tocsc(), b.real)
    assert x.dtype == expected.dtype == np.float64
    np.testing.assert_allclose(np.asarray(x), expected, rtol=1e-5)
    check_grads(
        lambda data, b: js.linalg.spsolve(matrix.with_data(data), b),
        (matrix.data, jnp.asarray(b)),
        order=1,
        modes=("fwd", "rev"),
        atol=1e-6,
        rtol=1e-6,
    )


def test_a_scipy_sparse_b_is_solved_dense():
    rng = np.random.default_rng(15)
    matrix, twin = SYSTEMS["csr-random"](rng, jnp.float64)
    b = scipy.sparse.random_array((matrix.shape[0], 2), density=0.3, rng=rng, format="csr")
    expected = scipy.sparse.linalg.spsolve(twin.tocsc(), b.tocsc()).toarray()
    np.testing.assert_allclose(np.asarray(js.linalg.spsolve(matrix, b)), expected, rtol=1e-10)
    factors = js.linalg.factorized(matrix)
    np.testing.assert_allclose(np.asarray(factors.solve(b)), expected, rtol=1e-10)


def test_bad_input_is_a_clear_error():
    rng = np.random.default_rng(7)
    square, _ = random_dia(rng, (5, 5), (-1, 0, 1), jnp.float64)
    tall, _ = random_dia(rng, (6, 5), (-1, 0, 1), jnp.float64)
    with pytest.raises(ValueError, match="`A` must be square"):
        js.linalg.spsolve(tall, jnp.ones(6))
    with pytest.raises(ValueError, match=r"`b` must have shape \(5,\) or \(5, k\)"):
        js.linalg.spsolve(square, jnp.ones(4))
    with pytest.raises(ValueError, match="`b` must have shape"):
        js.linalg.spsolve(square, jnp.ones((5, 2, 2)))
    with pytest.raises(TypeError, match="`A` must be a DIAMatrix or CSRMatrix"):
        js.linalg.spsolve(np.eye(5), jnp.ones(5))
    with pytest.raises(TypeError, match="`A` must be float32, float64"):
        js.linalg.factorized(square.astype(jnp.bfloat16))
    with pytest.raises(TypeError, match="`b` is complex128 but the factors are float64"):
        js.linalg.factorized(square).solve(jnp.ones(5, jnp.complex128))
    with pytest.raises(TypeError, match="`b` is float64 but the factors are float32"):
        js.linalg.factorized(square.astype(jnp.float32)).solve(jnp.ones(5))
    with pytest.raises(ValueError, match="`trans` must be"):
        js.linalg.factorized(square).solve(jnp.ones(5), "X")


def test_host_factor_cache_stays_bounded(monkeypatch):
    """Factoring anew in every jitted call keeps at most `CACHE_ENTRIES` SuperLU factors
    on the host; evicted handles are refactored, never wrong."""
    from jaxsparse.linalg import _factor_superlu

    monkeypatch.setattr(_factor_superlu, "CACHE_ENTRIES", 3)
    rng = np.random.default_rng(8)
    matrix, twin = SYSTEMS["csr-random"](rng, jnp.float64)
    b = random_values(rng, (matrix.shape[0],), jnp.float64)
    factor = jax.jit(js.linalg.factorized)
    solve = jax.jit(lambda f, b: f.solve(b))
    first = factor(matrix)
    for scale in np.linspace(1.0, 2.0, 12):
        _assert_solution(solve(factor(matrix * scale), b), _oracle(twin * scale, b), jnp.float64)
        assert len(_factor_superlu.CACHE) <= 3
    _assert_solution(solve(first, b), _oracle(twin, b), jnp.float64)


def test_host_factors_answer_only_for_their_own_matrix():
    """A handle names factors only for the matrix they were made from: a factorization
    unpickled in another process, whose handle there names another matrix's factors, or
    one whose matrix was replaced, is refactored, never solved with the wrong factors."""
    import pickle

    rng = np.random.default_rng(12)
    matrix, twin = SYSTEMS["csr-random"](rng, jnp.float64)
    b = random_values(rng, (matrix.shape[0],), jnp.float64)
    first = js.linalg.factorized(matrix)
    other = js.linalg.factorized(matrix * 3.0)
    # `first` as another process would hold it: its handle names `other`'s factors here.
    stranger = eqx.tree_at(lambda f: f.handle, pickle.loads(pickle.dumps(first)), other.handle)
    _assert_solution(stranger.solve(b), _oracle(twin, b), jnp.float64)
    replaced = eqx.tree_at(lambda f: f.matrix, other, matrix * 2.0)
    _assert_solution(replaced.solve(b), _oracle(twin * 2.0, b), jnp.float64)
    _assert_solution(other.solve(b), _oracle(twin * 3.0, b), jnp.float64)


@pytest.mark.parametrize("name", ["dia-tridiagonal", "dia-band-wider-than-dense"])
def test_band_factors_of_a_replaced_matrix_give_nan(name):
    """`BandedLU` and `DenseLU` keep their factors as arrays: solves and derivatives after
    `matrix` was replaced would mix old factors and new values, so they are `nan`; a copy
    of the same values solves as before."""
    rng = np.random.default_rng(13)
    matrix, twin = SYSTEMS[name](rng, jnp.float64)
    b = random_values(rng, (matrix.shape[0],), jnp.float64)
    lu = js.linalg.factorized(matrix)
    same = eqx.tree_at(lambda f: f.matrix, lu, matrix.with_data(jnp.array(matrix.data)))
    _assert_solution(same.solve(b, "T"), _oracle(twin, b, "T"), jnp.float64)
    replaced = eqx.tree_at(lambda f: f.matrix, lu, matrix * 2.0)
    assert np.all(np.isnan(replaced.solve(b)))

    def loss(data):
        return jnp.sum(eqx.tree_at(lambda f: f.matrix.data, lu, data).solve(b))

    gradient = jax.jit(jax.grad(loss))(replaced.matrix.data)
    assert np.all(np.isnan(gradient[~ignored_slots(matrix.offsets, matrix.shape)]))


@pytest.mark.parametrize("system", ["dia-tridiagonal", "csr-random"])
def test_eager_solves_compile_once(system):
    """Eager `spsolve`, `factorized` and solves with new values of the same shapes reuse
    their compiled programs (a host callback or platform branch traced anew per call
    compiled again every time, holding memory in JAX's caches)."""
    rng = np.random.default_rng(13)
    matrix, twin = SYSTEMS[system](rng, jnp.float64)
    b = random_values(rng, (matrix.shape[0],), jnp.float64)
    js.linalg.spsolve(matrix, b), js.linalg.factorized(matrix).solve(b, "T")
    scaled = {scale: matrix * scale for scale in (2.0, 3.0)}
    with counted_compilations() as compiled:
        for scale, other in scaled.items():
            x = js.linalg.spsolve(other, b * scale)
            x_t = js.linalg.factorized(other).solve(b, "T")
            _assert_solution(x, _oracle(twin, b), jnp.float64)
            _assert_solution(x_t, _oracle(twin.T * scale, b), jnp.float64)
    assert compiled == []


@pytest.mark.on_cpu  # the native banded solve and SuperLU are the CPU's routes
def test_vmap_over_right_hand_sides_is_one_multi_column_solve(monkeypatch):
    """DIA: the batch becomes columns of one native solve; CSR: one SuperLU solve of every
    member's columns on the host."""
    from jaxsparse.linalg import _factor_superlu

    rng = np.random.default_rng(9)
    dia, _ = SYSTEMS["dia-tridiagonal"](rng, jnp.float64)
    bs = jnp.asarray(random_values(rng, (5, dia.shape[0], 2), jnp.float64))
    solve_many = jax.vmap(js.linalg.spsolve, in_axes=(None, 0))
    hlo = jax.jit(solve_many).lower(dia, bs).as_text()
    solves = [line for line in hlo.splitlines() if "jaxsparse_dia_banded_solve" in line]
    assert len(solves) == 1 and f"tensor<{dia.shape[0]}x10xf64>" in solves[0]
    solve_factored = jax.vmap(lambda f, b: f.solve(b), in_axes=(None, 0))
    hlo = jax.jit(solve_factored).lower(js.linalg.factorized(dia), bs).as_text()
    solves = [line for line in hlo.splitlines() if "jaxsparse_banded_lu_solve" in line]
    assert len(solves) == 1 and f"tensor<{dia.shape[0]}x10xf64>" in solves[0]

    csr, twin = SYSTEMS["csr-random"](rng, jnp.float64)
    bs = random_values(rng, (5, csr.shape[0], 2), jnp.float64)
    calls = []
    solve_one = _factor_superlu._solve_one
    monkeypatch.setattr(
        _factor_superlu, "_solve_one", lambda *args: calls.append(1) or solve_one(*args)
    )
    xs = solve_many(csr, jnp.asarray(bs))
    assert len(calls) == 1
    for b, x in zip(bs, xs, strict=True):
        _assert_solution(x, _oracle(twin, b), jnp.float64)
