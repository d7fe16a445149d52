"""The tridiagonal solve that GPUs run on the device (`kernels/device_tridiagonal.py`,
`jax.lax.linalg.tridiagonal_solve`: cuSPARSE's `gtsv2` there, LAPACK's `gtsv` here) against
scipy and the host path: `A`, `A^T`, `A^H`, every band it covers, batches, systems that need
pivots, singular ones; `spsolve` with its derivatives and batches through that route; and
what `spsolve` exports to for cuda."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
import scipy.sparse.linalg
from helpers import as_float64, random_values
from jax.test_util import check_grads

import jaxsparse as js
from jaxsparse.kernels import device_tridiagonal, native_banded_kept, native_banded_lu
from jaxsparse.linalg import _banded_one_pass

BANDS = {
    "tridiagonal": (-1, 0, 1),
    "upper-bidiagonal": (0, 1),
    "lower-bidiagonal": (-1, 0),
    "no-main-diagonal": (-1, 1),
}
TOLERANCES = {
    np.dtype(jnp.float32): 2e-4,
    np.dtype(jnp.complex64): 2e-4,
    np.dtype(jnp.float64): 1e-11,
    np.dtype(jnp.complex128): 1e-11,
}
# An even size (a band with no main diagonal is singular at odd sizes) that no other test
# solves, so that no trace of the patched route outlives its test.
ROWS = 44


def _system(rng, offsets, dtype, rows=ROWS):
    """Random DIA values (random junk in the slots outside the matrix), the main diagonal,
    where there is one, shifted by 3 (well conditioned); and the scipy twin."""
    data = random_values(rng, (len(offsets), rows), dtype).copy()
    if 0 in offsets:
        data[offsets.index(0)] += 3.0
    return data, scipy.sparse.dia_array((as_float64(data), offsets), shape=(rows, rows))


def _relative_error(x, expected) -> float:
    return float(np.max(np.abs(as_float64(x) - expected)) / np.max(np.abs(expected)))


# Every dtype on the full band; the other bands in complex128, where A^T and A^H differ.
SOLVED = [("tridiagonal", dtype) for dtype in TOLERANCES] + [
    (band, np.dtype(jnp.complex128)) for band in BANDS if band != "tridiagonal"
]


@pytest.mark.parametrize("band,dtype", SOLVED, ids=[f"{b}-{d.name}" for b, d in SOLVED])
def test_solves_match_scipy(band, dtype):
    rng = np.random.default_rng(31)
    offsets = BANDS[band]
    data, matrix = _system(rng, offsets, dtype)
    b = random_values(rng, (ROWS, 2), dtype)

    def solves(data, b):
        return [device_tridiagonal.solve(data, b, offsets=offsets, op=op) for op in "NTH"]

    for x, system in zip(
        jax.jit(solves)(jnp.asarray(data), jnp.asarray(b)),
        (matrix, matrix.T, matrix.conj().T),
        strict=True,
    ):
        expected = np.linalg.solve(system.toarray(), as_float64(b))
        assert x.dtype == dtype
        assert _relative_error(x, expected) < TOLERANCES[dtype]


def _right_hand_sides_solved(jaxpr):
    """The shapes of the right-hand sides of every `tridiagonal_solve` in `jaxpr`, nested
    programs included."""
    shapes = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "tridiagonal_solve":
            shapes.append(eqn.invars[3].aval.shape)
        for param in eqn.params.values():
            for inner in param if isinstance(param, tuple) else (param,):
                inner = getattr(inner, "jaxpr", inner)
                if hasattr(inner, "eqns"):
                    shapes += _right_hand_sides_solved(inner)
    return shapes


def test_batches_of_single_columns_are_solved_with_pivots():
    """Every member has a zero main diagonal, so only a pivoting solve succeeds; batches of
    single columns, explicit or from `vmap`, reach `tridiagonal_solve` with a second column
    (jaxlib's batched call for single columns does not pivot), a shared matrix's, explicit
    or from `vmap`, as columns."""
    rng = np.random.default_rng(32)
    offsets = BANDS["no-main-diagonal"]
    data = jnp.asarray(random_values(rng, (5, 2, 40), jnp.float64))
    b = jnp.asarray(random_values(rng, (5, 40, 1), jnp.float64))

    def solve(data, b):
        return device_tridiagonal.solve(data, b, offsets=offsets)

    for program, arguments in (
        (solve, (data, b)),
        (solve, (data[0], b)),
        (jax.vmap(solve), (data, b)),
        (jax.vmap(solve, in_axes=(0, None)), (data, b[0])),
        (jax.vmap(solve, in_axes=(None, 0)), (data[0], b)),
    ):
        x = program(*arguments)
        shapes = _right_hand_sides_solved(jax.make_jaxpr(program)(*arguments).jaxpr)
        assert shapes and all(len(shape) == 2 or shape[-1] > 1 for shape in shapes), shapes
        members = np.broadcast_to(np.asarray(arguments[0]), (5, 2, 40))
        rhs = np.broadcast_to(np.asarray(arguments[1]), (5, 40, 1))
        for member in range(5):
            matrix = scipy.sparse.dia_array((members[member], offsets), shape=(40, 40)).toarray()
            expected = np.linalg.solve(matrix, rhs[member])
            assert _relative_error(x[member], expected) < 1e-10


@pytest.mark.parametrize("offsets", [(-1, 0, 1), (-1, 1)])
def test_singular_systems_give_nan(offsets):
    rows = 41  # singular: all ones at 41 rows, or only the two off-diagonals at an odd size
    data = np.ones((len(offsets), rows))
    x = device_tridiagonal.solve(jnp.asarray(data), jnp.ones((rows, 2)), offsets=offsets)
    assert np.all(np.isnan(x))


def test_nan_stays_in_the_member_or_column_it_belongs_to():
    """In one batched call: a singular member is nan throughout, a right-hand side with an
    infinite last entry gives a nan column (arithmetic alone would leave infinities), and
    the other columns and members are solved."""
    rng = np.random.default_rng(35)
    offsets = BANDS["tridiagonal"]
    data = np.stack([_system(rng, offsets, jnp.float64, rows=41)[0] for _ in range(3)])
    data[1] = 1.0  # singular at 41 rows
    b = random_values(rng, (3, 41, 2), jnp.float64).copy()
    b[2, -1, 1] = np.inf
    x = np.asarray(device_tridiagonal.solve(jnp.asarray(data), jnp.asarray(b), offsets=offsets))
    assert np.all(np.isnan(x[1])) and np.all(np.isnan(x[2, :, 1]))
    for member, column in ((0, 0), (0, 1), (2, 0)):
        matrix = scipy.sparse.dia_array((data[member], offsets), shape=(41, 41)).toarray()
        expected = np.linalg.solve(matrix, b[member, :, column])
        assert _relative_error(x[member, :, column], expected) < 1e-10


@pytest.mark.parametrize("band", list(BANDS))
def test_adjoint_matches_the_host_path(band):
    rng = np.random.default_rng(33)
    offsets = BANDS[band]
    data, _ = _system(rng, offsets, jnp.complex128)
    x, g = (jnp.asarray(random_values(rng, (2, ROWS, 3), jnp.complex128)) for _ in range(2))
    data = jnp.broadcast_to(jnp.asarray(data), (2, *data.shape))
    device = device_tridiagonal.adjoint(data, x, g, offsets=offsets)
    host = native_banded_lu.banded_adjoint(data, x, g, offsets=offsets, host=True)
    for ours, theirs in zip(device, host, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-11, atol=1e-12)


@pytest.fixture
def gpu_route(monkeypatch):
    """`spsolve` on this CPU as a GPU runs it: no native kernels, and the device route for
    the bands it covers."""

    def off_cpu(device, host, kl, ku, n):
        return dict(default=device if device_tridiagonal.covers(kl, ku, n) else host)

    monkeypatch.setattr(native_banded_lu, "native_available", lambda dtype: False)
    monkeypatch.setattr(native_banded_kept, "native_available", lambda dtype: False)
    monkeypatch.setattr(native_banded_lu, "_off_cpu", off_cpu)


def test_spsolve_and_its_derivatives_through_the_device_route(gpu_route, monkeypatch):
    rng = np.random.default_rng(34)
    offsets = BANDS["tridiagonal"]
    dtype = jnp.float64
    data, matrix = _system(rng, offsets, dtype)
    A = js.DIAMatrix(jnp.asarray(data), offsets, (ROWS, ROWS))
    b = jnp.asarray(random_values(rng, (ROWS,), dtype))
    x = jax.jit(js.linalg.spsolve)(A, b)
    assert _relative_error(x, scipy.sparse.linalg.spsolve(matrix.tocsc(), as_float64(b))) < 1e-11

    def solve(values, b):
        return js.linalg.spsolve(A.with_data(values), b)

    def loss(values, b):
        return jnp.sum(solve(values, b) ** 2)

    # Every program runs on the device alone: the solve, forward mode, and reverse mode in
    # `b` and in the values, with the forward pass's factors kept and without (the route
    # of large systems).
    programs = [
        lambda: jax.make_jaxpr(solve)(A.data, b),
        lambda: jax.make_jaxpr(lambda v, b: jax.jvp(solve, (v, b), (v, b)))(A.data, b),
        lambda: jax.make_jaxpr(jax.grad(loss, argnums=1))(A.data, b),
        lambda: jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(A.data, b),
    ]
    texts = [str(program()) for program in programs]
    monkeypatch.setattr(_banded_one_pass, "KEPT_BYTES", 0)
    texts += [str(program()) for program in programs[1:]]
    for text in texts:
        assert "tridiagonal_solve" in text and "callback" not in text
    check_grads(solve, (A.data, b), order=1, modes=("fwd", "rev"), atol=1e-6, rtol=1e-6)

    members = jnp.stack([A.data, A.data * 1.5])
    batched = jax.jit(jax.vmap(solve, in_axes=(0, None)))(members, b)
    for member, values in zip(batched, members, strict=True):
        twin = scipy.sparse.dia_array((as_float64(values), offsets), shape=(ROWS, ROWS))
        expected = scipy.sparse.linalg.spsolve(twin.tocsc(), as_float64(b))
        assert _relative_error(member, expected) < 1e-11


def test_factorized_solves_through_the_device_route(gpu_route):
    """`factorized`'s solves (with `A`, `A^T`, `A^H`, their derivatives and batches) run on
    the device from the values; only the factorization itself needs the host there."""
    rng = np.random.default_rng(36)
    offsets = BANDS["tridiagonal"]
    data, matrix = _system(rng, offsets, jnp.complex128)
    A = js.DIAMatrix(jnp.asarray(data), offsets, (ROWS, ROWS))
    F = js.linalg.factorized(A)
    b = jnp.asarray(random_values(rng, (ROWS, 2), jnp.complex128))
    for trans, system in (("N", matrix), ("T", matrix.T), ("H", matrix.conj().T)):
        x = jax.jit(lambda F, b, trans=trans: F.solve(b, trans))(F, b)
        assert _relative_error(x, np.linalg.solve(system.toarray(), as_float64(b))) < 1e-11

    def loss(arguments):
        F, b = arguments
        return jnp.sum(jnp.abs(jax.vmap(F.solve, in_axes=1, out_axes=1)(b)) ** 2)

    for program in (
        jax.make_jaxpr(lambda F, b: F.solve(b, "H"))(F, b),
        jax.make_jaxpr(eqx.filter_grad(loss))((F, b)),
    ):
        assert "tridiagonal_solve" in str(program) and "callback" not in str(program)


def test_factored_solve_exports_for_cuda_as_cusparse_calls():
    """From factors made elsewhere, a tridiagonal band's solves export for cuda as cuSPARSE
    calls on the device, with no host callback."""
    offsets, kl, ku = (-1, 0, 1), 1, 1

    def solves(band, pivots, data, b):
        return [
            native_banded_lu.banded_lu_solve(
                band, pivots, data, b, offsets=offsets, kl=kl, ku=ku, op=op
            )
            for op in "NTH"
        ]

    avals = (
        jax.ShapeDtypeStruct((4, 64), jnp.complex64),
        jax.ShapeDtypeStruct((64,), jnp.int32),
        jax.ShapeDtypeStruct((3, 64), jnp.complex64),
        jax.ShapeDtypeStruct((64, 2), jnp.complex64),
    )
    program = jax.export.export(jax.jit(solves), platforms=("cuda",))(*avals).mlir_module()
    assert program.count("cusparse_gtsv2_ffi") == 3
    assert "callback" not in program


@pytest.mark.parametrize("platform, target", [("cuda", "cusparse"), ("rocm", "hipsparse")])
@pytest.mark.parametrize("kept_bytes", [_banded_one_pass.KEPT_BYTES, 0], ids=["kept", "values"])
def test_spsolve_exports_for_gpus_as_sparse_library_calls_for_tridiagonal_bands_only(
    platform, target, kept_bytes, monkeypatch
):
    """Exported for a GPU, a tridiagonal solve's gradient is two calls of the vendor's
    `gtsv2` on the device (the solve and the adjoint solve) and no host callback, on both
    routes of the derivatives (factors kept, or solved again from the values); a wider
    band's program holds the host's callback and no tridiagonal solve."""
    monkeypatch.setattr(_banded_one_pass, "KEPT_BYTES", kept_bytes)

    def gradient(offsets):
        def loss(values, b):
            A = js.DIAMatrix(values, offsets, (64, 64))
            return jnp.sum(js.linalg.spsolve(A, b) ** 2)

        return jax.grad(loss, argnums=(0, 1))

    avals = (jax.ShapeDtypeStruct((3, 64), jnp.float32), jax.ShapeDtypeStruct((64,), jnp.float32))
    # jax.export vouches for cuSPARSE's target alone; hipSPARSE's is let through.
    unchecked = [jax.export.DisabledSafetyCheck.custom_call(f"{target}_gtsv2_ffi")]
    exported = jax.export.export(
        jax.jit(gradient((-1, 0, 1))), platforms=(platform,), disabled_checks=unchecked
    )(*avals)
    program = exported.mlir_module()
    assert program.count(f"{target}_gtsv2_ffi") == 2
    assert "callback" not in program
    wider = str(jax.make_jaxpr(gradient((-2, 0, 2)))(*avals))
    assert "callback" in wider and "tridiagonal_solve" not in wider
