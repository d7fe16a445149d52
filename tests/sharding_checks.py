"""Checks of the row-sharded products on 8 simulated CPU devices, run as a script in its own
process (`tests/test_sharding.py` spawns it) so that the rest of the suite keeps one device.

For each matrix (DIA stencils in 1, 2 and 3 dimensions, rectangular DIA, CSR stencil,
random and power-law CSR) over meshes of 1, 2, 4 and 8 devices, with row counts that do
not divide evenly: `S @ x`, `S @ X`, `x @ S`, `X @ S` and the gradients of both sides in
the values (through `js.shard`) and in the operand, against scipy in float64, all in one
compiled function per case. Then the bytes each product's compiled module sends, read
from its collectives, against the plan (and, for DIA, against the halo minimum counted
here independently), and gradients that stay sharded.

Run it with `python tests/sharding_checks.py PART`; it prints one line per check and exits
non-zero on the first failure. `PART` is one of `PARTS`: `cases`, each matrix's products
and gradients; `bytes-and-gradients`, the exchanged bytes, gradients, `shard_from_rows`
and bad input; `surface-AXIS-FORMAT`, the sharded matrix's methods for one format on an
`Explicit` or `Auto` axis; `more-meshes`, each case's products over another device count (the
suite's `slow` test).
"""

import os

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import dataclasses  # noqa: E402
import io  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable  # noqa: E402

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse  # noqa: E402
from helpers import counted_compilations  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import jaxsparse as js  # noqa: E402
from jaxsparse._collectives import collective_bytes  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")

F64 = np.float64
COLUMNS = 3
TOLERANCE = 1e-11


def compiles_in(function: Callable) -> int:
    """How many programs XLA compiles while `function()` runs."""
    with counted_compilations() as compiled:
        jax.block_until_ready(function())
    return len(compiled)


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    make: Callable  # rng -> scipy sparse array (float64)
    format: str  # "dia" or "csr"
    meshes: tuple[int, ...]
    more_meshes: tuple[int, ...] = ()  # only in the `more-meshes` part (the `slow` test)


def stencil(grid: tuple[int, ...]) -> scipy.sparse.csr_array:
    """The (2 d + 1)-point Laplacian on a grid of shape `grid`, row-major."""
    total = scipy.sparse.csr_array((int(np.prod(grid)),) * 2)
    for axis, size in enumerate(grid):
        line = scipy.sparse.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(size, size))
        factors = [scipy.sparse.eye_array(s) for s in grid]
        factors[axis] = line
        term = factors[0]
        for factor in factors[1:]:
            term = scipy.sparse.kron(term, factor)
        total = total + term
    return scipy.sparse.csr_array(total)


def with_random_values(matrix, rng) -> scipy.sparse.csr_array:
    """`matrix`'s pattern (stencils: diagonals kept whole) with random values."""
    coo = scipy.sparse.coo_array(matrix)
    values = rng.standard_normal(coo.nnz)
    return scipy.sparse.csr_array((values, (coo.row, coo.col)), shape=coo.shape)


def random_dia(shape, offsets, rng) -> scipy.sparse.dia_array:
    data = rng.standard_normal((len(offsets), shape[1]))
    return scipy.sparse.dia_array((data, np.asarray(offsets)), shape=shape)


def banded_random_csr(n: int, band: int, rng) -> scipy.sparse.csr_array:
    """Random entries (about a third of the band) within `band` of the diagonal."""
    rows, cols = np.nonzero(np.abs(np.subtract.outer(np.arange(n), np.arange(n))) <= band)
    keep = rng.random(len(rows)) < 0.35
    values = rng.standard_normal(np.count_nonzero(keep))
    return scipy.sparse.csr_array((values, (rows[keep], cols[keep])), shape=(n, n))


def power_law_csr(n: int, rng) -> scipy.sparse.csr_array:
    """Rows with Zipf-distributed lengths and columns drawn with power-law popularity."""
    lengths = np.minimum(rng.zipf(1.8, size=n), n)
    popularity = 1.0 / np.arange(1, n + 1) ** 1.2
    popularity /= popularity.sum()
    rows, cols = [], []
    for row, length in enumerate(lengths):
        chosen = rng.choice(n, size=length, replace=False, p=popularity)
        rows.extend([row] * length)
        cols.extend(rng.permutation(n)[chosen])
    values = rng.standard_normal(len(rows))
    return scipy.sparse.csr_array((values, (rows, cols)), shape=(n, n))


CASES = [
    Case("dia-1d-3point", lambda rng: random_dia((21, 21), (-1, 0, 1), rng), "dia", (1, 2, 4, 8)),
    Case("dia-2d-5point", lambda rng: with_random_values(stencil((5, 5)), rng), "dia", (8,), (2,)),
    Case(
        "dia-3d-7point", lambda rng: with_random_values(stencil((3, 3, 3)), rng), "dia", (4,), (8,)
    ),
    Case(
        "dia-rectangular-tall", lambda rng: random_dia((23, 20), (-4, -1, 0, 2), rng), "dia", (8,)
    ),
    Case("dia-rectangular-wide", lambda rng: random_dia((12, 30), (-2, 0, 3, 9), rng), "dia", (2,)),
    Case("csr-2d-5point", lambda rng: with_random_values(stencil((5, 5)), rng), "csr", (8,), (1,)),
    Case("csr-banded-random", lambda rng: banded_random_csr(43, 7, rng), "csr", (4,), (8,)),
    Case(
        "csr-random",
        lambda rng: scipy.sparse.random_array((30, 26), density=0.12, random_state=rng),
        "csr",
        (2,),
    ),
    Case("csr-power-law", lambda rng: power_law_csr(37, rng), "csr", (8,)),
]


def mesh_of(devices: int) -> jax.sharding.Mesh:
    return jax.sharding.Mesh(np.array(jax.devices()[:devices]), ("x",))


def to_jaxsparse(matrix, format: str):
    if format == "dia":
        return js.DIAMatrix.from_scipy(matrix)
    return js.CSRMatrix.from_scipy(matrix)


def in_layout(A, dense_gradient: np.ndarray) -> np.ndarray:
    """A gradient in the dense matrix, read at `A`'s stored slots (zero outside)."""
    if isinstance(A, js.DIAMatrix):
        return np.asarray(js.DIAMatrix.fromdense(jnp.asarray(dense_gradient), A.offsets).data)
    rows = np.repeat(np.arange(A.shape[0]), np.diff(np.asarray(A.indptr)))
    return dense_gradient[rows, np.asarray(A.indices)]


def products_and_gradients(A, mesh):
    """One compiled function of `(values, x, X, x_left, X_left, G, H)`: the four products
    of `shard(A.with_data(values))` and the gradients of `<G, S @ X>` and `<H, X_left @ S>`
    in the values and the operand."""

    def sharded(values):
        return js.shard(A.with_data(values), mesh, axis="x")

    def right(values, X):
        return sharded(values) @ X

    def left(values, X_left):
        return X_left @ sharded(values)

    def run(values, x, X, x_left, X_left, G, H):
        S = sharded(values)
        _, right_vjp = jax.vjp(right, values, X)
        _, left_vjp = jax.vjp(left, values, X_left)
        return (S @ x, S @ X, x_left @ S, X_left @ S, *right_vjp(G), *left_vjp(H))

    return jax.jit(run)


def check_case(case: Case, devices: int, rng) -> None:
    twin = scipy.sparse.csr_array(case.make(rng))
    A = to_jaxsparse(twin, case.format)
    mesh = mesh_of(devices)
    S = js.shard(A, mesh, axis="x")
    m, n = A.shape
    padded_m, padded_n = S.padded_shape
    x, X = rng.standard_normal(n), rng.standard_normal((n, COLUMNS))
    x_left, X_left = rng.standard_normal(m), rng.standard_normal((COLUMNS, m))
    G, H = rng.standard_normal((m, COLUMNS)), rng.standard_normal((COLUMNS, n))
    operands = (
        S.shard_vector(x),
        S.shard_vector(X),
        S.shard_vector(x_left),
        S.shard_vector(X_left.T).T,
        S.shard_vector(G),
        S.shard_vector(H.T).T,
    )
    results = products_and_gradients(A, mesh)(A.data, *operands)
    y, Y, u, U, grad_values_right, grad_X, grad_values_left, grad_X_left = map(np.asarray, results)
    dense = twin.toarray()
    expected = {
        "A @ x": (y[:m], dense @ x, y[m:]),
        "A @ X": (Y[:m], dense @ X, Y[m:]),
        "x @ A": (u[:n], x_left @ dense, u[n:]),
        "X @ A": (U[:, :n], X_left @ dense, U[:, n:]),
        "d(A @ X)/dX": (grad_X[:n], dense.T @ G, grad_X[n:]),
        "d(A @ X)/dvalues": (grad_values_right, in_layout(A, G @ X.T), None),
        "d(X @ A)/dX": (grad_X_left[:, :m], H @ dense.T, grad_X_left[:, m:]),
        "d(X @ A)/dvalues": (grad_values_left, in_layout(A, X_left.T @ H), None),
    }
    assert (padded_m, padded_n) == (y.shape[0], grad_X.shape[0])
    for what, (actual, wanted, padding) in expected.items():
        np.testing.assert_allclose(actual, wanted, rtol=TOLERANCE, atol=TOLERANCE, err_msg=what)
        if padding is not None:
            assert not np.any(padding), f"{what}: padded rows must stay zero"
    print(f"ok   {case.name:22} {devices} devices {A.shape} {S.plan.summary()}")


def measured_bytes(S, columns: int, *, transposed: bool) -> int:
    padded_m, padded_n = S.padded_shape
    shape = (padded_m if transposed else padded_n, columns)
    operand = jax.ShapeDtypeStruct(shape, F64, sharding=S.sharding)
    product = (lambda S, X: X.T @ S) if transposed else (lambda S, X: S @ X)
    text = jax.jit(product).lower(S, operand).compile().as_text()
    return sum(collective_bytes(text).values())


def halo_minimum(offsets, n: int, devices: int, columns: int) -> int:
    """Bytes the DIA product must move at least: for each device, the operand rows its
    rows' diagonals touch outside its own block (whole blocks, `n` divisible)."""
    block = n // devices
    needed = 0
    for p in range(devices):
        rows = np.arange(p * block, (p + 1) * block)
        touched = np.unique(np.concatenate([rows + off for off in offsets]))
        touched = touched[(touched >= 0) & (touched < n)]
        needed += np.count_nonzero((touched < p * block) | (touched >= (p + 1) * block))
    return needed * columns * np.dtype(F64).itemsize


def check_exchanged_bytes(rng) -> None:
    """Bytes read from the compiled products' collectives: the halo minimum for DIA (offsets
    within a block, and longer), the plan's size for CSR, less than an all-gather where the
    pattern is local."""
    for grid, devices in (((8, 8), 4), ((8, 8), 8), ((4, 4, 4), 8), ((64,), 8)):
        A = js.DIAMatrix.from_scipy(with_random_values(stencil(grid), rng))
        S = js.shard(A, mesh_of(devices), axis="x")
        for columns, transposed in ((1, False), (COLUMNS, True)):
            minimum = halo_minimum(A.offsets, A.shape[0], devices, columns)
            measured = measured_bytes(S, columns, transposed=transposed)
            assert measured == minimum == S.exchanged_bytes(columns, F64), (grid, measured, minimum)
        if max(A.offsets) <= A.shape[0] // devices:
            halo = (devices - 1) * (max(A.offsets) - min(A.offsets)) * np.dtype(F64).itemsize
            assert S.exchanged_bytes(1, F64) == halo
        print(f"ok   bytes DIA {grid} on {devices} devices: {measured} = halo minimum")
    for case in CASES:
        if case.name.startswith("dia-") and "rectangular" not in case.name:
            continue
        twin = scipy.sparse.csr_array(case.make(rng))
        S = js.shard(to_jaxsparse(twin, case.format), mesh_of(8), axis="x")
        measured = measured_bytes(S, COLUMNS, transposed=False)
        assert measured == S.exchanged_bytes(COLUMNS, F64), (case.name, measured)
        assert measured == measured_bytes(S, COLUMNS, transposed=True), case.name
        print(f"ok   bytes {case.name}: {measured} = plan ({S.plan.summary()})")
    csr_stencil = js.CSRMatrix.from_scipy(stencil((16, 16)))
    S = js.shard(csr_stencil, mesh_of(8), axis="x")
    all_gather = 7 * S.padded_shape[1] * np.dtype(F64).itemsize
    assert not S.plan.all_gather and measured_bytes(S, 1, transposed=False) < all_gather / 4
    print("ok   bytes CSR 5-point stencil: a halo, not an all-gather")


def check_gradients_stay_sharded(rng) -> None:
    """Gradients in the values and the operand come out sharded like them, on a mesh of one
    axis and on a two-axis mesh with explicit axes (`jax.make_mesh`'s default)."""
    two_axes = jax.make_mesh((4, 2), ("x", "y"))
    for format, mesh in (("dia", mesh_of(8)), ("csr", two_axes)):
        A = to_jaxsparse(with_random_values(stencil((6, 6)), rng), format)
        S = js.shard(A, mesh, axis="x")
        x = S.shard_vector(rng.standard_normal(A.shape[1]))

        def loss(values, x, S=S):
            return jnp.sum(jnp.sin(S.with_data(values) @ x))

        grad_values, grad_x = jax.jit(jax.grad(loss, argnums=(0, 1)))(S.data, x)
        values_spec = P(None, "x") if format == "dia" else P("x")
        assert grad_values.sharding.spec == values_spec, grad_values.sharding
        assert grad_x.sharding.spec == P("x"), grad_x.sharding
        assert len(grad_values.sharding.device_set) == 8
        dense = np.asarray(A.todense())
        expected_x = dense.T @ np.cos(dense @ np.asarray(x)[: A.shape[1]])
        np.testing.assert_allclose(np.asarray(grad_x)[: A.shape[1]], expected_x, rtol=TOLERANCE)
        print(f"ok   gradients of a sharded {format} product stay sharded ({mesh})")


def check_forward_mode_complex(rng) -> None:
    """`jax.jvp` of a complex sharded product in the values and the operand, and `jax.vmap`
    over operands, against scipy."""
    for format in ("dia", "csr"):
        twin = with_random_values(stencil((5, 4)), rng) * (1 + 2j)
        A = to_jaxsparse(twin, format)
        S = js.shard(A, mesh_of(8), axis="x")
        n = A.shape[1]
        x, dx = (rng.standard_normal(n) + 1j * rng.standard_normal(n) for _ in range(2))

        def product(values, x, S=S):
            return S.with_data(values) @ x

        def forward(values, x, dvalues, dx, product=product):
            batch = jax.vmap(product, in_axes=(None, 0))(values, jnp.stack([x, 2 * x]))
            return (*jax.jvp(product, (values, x), (dvalues, dx)), batch)

        y, dy, batch = jax.jit(forward)(S.data, S.shard_vector(x), 0.5 * S.data, S.shard_vector(dx))
        expected = twin @ x
        np.testing.assert_allclose(np.asarray(y)[: A.shape[0]], expected, rtol=TOLERANCE)
        np.testing.assert_allclose(
            np.asarray(dy)[: A.shape[0]], 0.5 * expected + twin @ dx, rtol=TOLERANCE
        )
        np.testing.assert_allclose(np.asarray(batch)[1, : A.shape[0]], 2 * expected, rtol=TOLERANCE)
        print(f"ok   jvp and vmap of a complex sharded {format} product")


def check_sharded_matrix_surface(rng, axis_type: jax.sharding.AxisType, format: str) -> None:
    """What a user of a sharded matrix of `format` reaches for, on 4 devices with 203 rows
    (blocks of 51, operands padded to 204), on a mesh axis of `axis_type`
    (`jax.make_mesh`'s default is `Explicit`): `js.matmul`, operands of the matrix's own
    length, `S.T`, `todense`, `to_scipy`, `unshard`, `unpad` and `repr`, against scipy."""
    twin = scipy.sparse.diags_array(
        [rng.standard_normal(202), rng.standard_normal(203), rng.standard_normal(202)],
        offsets=[-1, 0, 1],
        shape=(203, 203),
    ).tocsr()
    twin[5, 150] = 3.0
    dense = twin.toarray()
    x, X = rng.standard_normal(203), rng.standard_normal((203, 2))
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:4]), ("x",), axis_types=(axis_type,))
    A = to_jaxsparse(twin, format)
    S = js.shard(A, mesh, axis="x")
    what = f"{format} on an {axis_type.name} axis"
    assert S.padded_shape == (204, 204), S.padded_shape
    # An eager product with an operand of a new shape compiles its exchange and local
    # product as one program, not one per operation in them (dozens); `X @ S` transposes
    # its operand and result in two more.
    wide = rng.standard_normal((203, 5))
    for product in (lambda: S @ wide, lambda: wide.T @ S):
        assert (count := compiles_in(product)) <= 3, (what, count)
    # An operand committed to a device outside the mesh is moved onto it.
    elsewhere = jax.device_put(x, jax.devices()[5])
    np.testing.assert_allclose(np.asarray(S @ elsewhere), dense @ x, rtol=TOLERANCE, err_msg=what)
    y = js.matmul(S, x)
    assert y.shape == (203,), (what, y.shape)
    np.testing.assert_allclose(np.asarray(y), dense @ x, rtol=TOLERANCE, err_msg=what)
    np.testing.assert_allclose(np.asarray(S @ X), dense @ X, rtol=TOLERANCE, err_msg=what)
    np.testing.assert_allclose(np.asarray(x @ S), x @ dense, rtol=TOLERANCE, err_msg=what)
    np.testing.assert_allclose(np.asarray(X.T @ S), X.T @ dense, rtol=TOLERANCE)
    jitted = jax.jit(lambda S, x: js.matmul(S, x))(S, x)
    np.testing.assert_allclose(np.asarray(jitted), dense @ x, rtol=TOLERANCE, err_msg=what)
    padded = js.matmul(S, S.shard_vector(x))
    assert padded.shape == (204,) and padded.sharding.spec == P("x"), (what, padded)
    np.testing.assert_allclose(np.asarray(S.unpad(padded)), dense @ x, rtol=TOLERANCE)
    left = S.T.unpad(S.shard_vector(x) @ S)
    np.testing.assert_allclose(np.asarray(left), x @ dense, rtol=TOLERANCE, err_msg=what)
    unpadded_in_jit = jax.jit(lambda S, b: S.unpad(S @ b))(S, S.shard_vector(x))
    np.testing.assert_allclose(np.asarray(unpadded_in_jit), dense @ x, rtol=TOLERANCE)
    assert S.T.shape == (203, 203) and S.T.T is S and isinstance(S.T, js.ShardedMatrix)
    np.testing.assert_allclose(np.asarray(S.T @ x), dense.T @ x, rtol=TOLERANCE)
    np.testing.assert_allclose(np.asarray(X.T @ S.T), X.T @ dense.T, rtol=TOLERANCE)
    np.testing.assert_allclose(np.asarray(S.todense()), dense, rtol=0, atol=0)
    np.testing.assert_allclose(np.asarray(S.T.todense()), dense.T, rtol=0, atol=0)
    assert abs(S.to_scipy() - twin).max() == 0 and abs(S.T.to_scipy() - twin.T).max() == 0
    # Values off the mesh, as `with_data` of a host array or `eqx.tree_deserialise_leaves`
    # leave them: the product places them as the matrix's own.
    saved = io.BytesIO()
    eqx.tree_serialise_leaves(saved, S)
    saved.seek(0)
    for local in (S.with_data(np.asarray(S.data)), eqx.tree_deserialise_leaves(saved, S)):
        np.testing.assert_allclose(np.asarray(local @ x), dense @ x, rtol=TOLERANCE, err_msg=what)
    whole = S.unshard()
    assert type(whole) is type(A) and whole.shape == A.shape
    np.testing.assert_array_equal(np.asarray(whole.todense()), dense)
    # Differentiating through `todense` creates arrays that meet the sharded values:
    # on `Explicit` axes JAX wants the mesh set for that (`jax.set_mesh`).
    with jax.set_mesh(mesh):
        grad = jax.grad(lambda v, S=S: jnp.sum(S.with_data(v).todense() ** 2))(S.data)
    np.testing.assert_allclose(
        np.asarray(S.with_data(grad).todense()), 2 * dense, rtol=TOLERANCE, err_msg=what
    )
    # Outside `jit`, `jax.grad` through a product compiles once per shape: a second call
    # compiles nothing, and it agrees with the jitted gradient.
    with jax.set_mesh(mesh):
        loss_grad = jax.grad(lambda v, S=S: jnp.sum((S.with_data(v) @ x) ** 2))
        eager = loss_grad(S.data)
        assert (count := compiles_in(lambda: loss_grad(S.data))) == 0, (what, count)
        jitted = jax.jit(loss_grad)(S.data)
    np.testing.assert_allclose(np.asarray(eager), np.asarray(jitted), rtol=TOLERANCE, err_msg=what)
    for convert, error, message in (
        (np.asarray, TypeError, "implicitly"),
        (jnp.asarray, TypeError, "implicitly"),
        (bool, ValueError, "ambiguous"),
        (lambda S: S == S, TypeError, "unshard"),
        (lambda S: S.T != S, TypeError, "unshard"),
    ):
        try:
            convert(S)
        except error as raised:
            assert message in str(raised), (what, raised)
        else:
            raise AssertionError(f"{convert} of a sharded {what} did not raise")
    text = repr(S)
    assert "\n" not in text and text.startswith(type(S).__name__ + "(shape=(203, 203)")
    assert "devices=4" in text and "'x'" in text, text
    print(
        f"ok   js.matmul, own-length operands, .T, todense, to_scipy, unshard, unpad, repr "
        f"of {format} on an {axis_type.name} axis"
    )


def check_shard_from_rows(rng) -> None:
    """`shard_from_rows` in one process builds what `shard` builds from the whole matrix
    (plan and every array), on one axis and on a two-axis mesh (blocks replicated over the
    other axis), asking for each row block once; bad input names the argument."""
    two_axes = jax.make_mesh((4, 2), ("x", "y"))
    for case in CASES:
        if "rectangular" in case.name:
            continue
        twin = scipy.sparse.csr_array(case.make(rng))
        for mesh in (mesh_of(8), two_axes):
            asked = []

            def rows(start, stop, twin=twin, asked=asked):
                asked.append((start, stop))
                return twin[start:stop]

            built = js.shard_from_rows(rows, twin.shape, mesh, "x", format=case.format)
            expected = js.shard(to_jaxsparse(twin, case.format), mesh, axis="x")
            assert built.plan == expected.plan, (case.name, built.plan, expected.plan)
            for ours, theirs in zip(jax.tree.leaves(built), jax.tree.leaves(expected), strict=True):
                assert ours.sharding == theirs.sharding, case.name
                np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
            block = built.plan.row_block
            assert sorted(asked) == [
                (start, min(start + block, twin.shape[0]))
                for start in range(0, twin.shape[0], block)
            ], (case.name, asked)
    print("ok   shard_from_rows builds what shard builds, each row block asked for once")
    A = stencil((7,))
    for call, error, message in (
        (lambda: js.shard_from_rows(A, A.shape, mesh_of(2), "x"), TypeError, "`rows`"),
        (
            lambda: js.shard_from_rows(lambda a, b: A, A.shape, mesh_of(2), "x"),
            ValueError,
            "rows(0, 4)",
        ),
        (
            lambda: js.shard_from_rows(lambda a, b: A[a:b], A.shape, mesh_of(2), "x", format="coo"),
            ValueError,
            "`format`",
        ),
        (
            lambda: js.shard_from_rows(lambda a, b: A[a:b], (7,), mesh_of(2), "x"),
            ValueError,
            "`shape`",
        ),
        (
            lambda: js.shard_from_rows(lambda a, b: A[a:b], A.shape, mesh_of(2), "z"),
            ValueError,
            "`axis`",
        ),
        (
            lambda: js.shard_from_rows(lambda a, b: A[a:b].toarray(), A.shape, mesh_of(2), "x"),
            TypeError,
            "scipy.sparse",
        ),
    ):
        try:
            call()
        except error as caught:
            assert message in str(caught), (message, caught)
        else:
            raise AssertionError(f"no error for {message}")
    print("ok   shard_from_rows: bad input raises, naming the argument")


def check_errors() -> None:
    A = js.DIAMatrix.from_scipy(stencil((7,)))
    S = js.shard(A, mesh_of(2), axis="x")
    for call, message in (
        (lambda: S @ jnp.ones(5), "dimension mismatch"),
        (lambda: js.shard(A, mesh_of(2), axis="y"), "`axis`"),
        (lambda: js.shard(A.todense(), mesh_of(2), axis="x"), "`matrix`"),
        (lambda: S.shard_vector(jnp.ones(5)), "`vector`"),
    ):
        try:
            call()
        except (TypeError, ValueError) as error:
            assert message in str(error), (message, error)
        else:
            raise AssertionError(f"no error for {message}")
    print("ok   bad input raises, naming the argument")


def check_matrices_with_no_entries() -> None:
    """No diagonal inside the matrix, or no CSR entry: zero products, as unsharded."""
    for A in (
        js.DIAMatrix(jnp.zeros((0, 6)), (), (6, 6)),
        js.DIAMatrix(jnp.ones((1, 6)), (10,), (6, 6)),
        js.CSRMatrix(jnp.zeros(0), jnp.zeros(0, jnp.int32), jnp.zeros(7, jnp.int32), (6, 6)),
    ):
        for devices in (1, 4):
            S = js.shard(A, mesh_of(devices), axis="x")
            assert np.array_equal(np.asarray(S @ jnp.ones(6)), np.zeros(6))
            assert np.array_equal(np.asarray(jnp.ones(6) @ S), np.zeros(6))
    print("ok   matrices with no entries")


def check_transpose_of_arrays_on_two_devices(rng) -> None:
    """An unsharded CSR matrix whose values and index arrays sit on different devices (or
    whose two index arrays do) transposes as scipy does: the native sort takes index
    arrays on one device only, and the values stay on theirs."""
    twin = scipy.sparse.random_array((9, 7), density=0.4, format="csr", rng=rng)
    A = js.CSRMatrix.from_scipy(twin)
    first, second = jax.devices()[:2]
    for placement in ((second, first, first), (first, second, first)):
        placed = map(jax.device_put, (A.data, A.indices, A.indptr), placement)
        transposed = js.CSRMatrix(*placed, A.shape).T
        assert np.array_equal(np.asarray(transposed.todense()), twin.T.toarray())
        assert transposed.data.devices() == {placement[0]}
    print("ok   CSR transpose of values and index arrays on different devices")


# The checks in parts, each run in its own process, so that test workers share them.
SURFACES = tuple(
    f"surface-{axis}-{format}" for axis in ("explicit", "auto") for format in ("dia", "csr")
)
PARTS = ("cases", "bytes-and-gradients", *SURFACES, "more-meshes")


def main(argv: list[str]) -> None:
    assert len(jax.devices()) == 8, jax.devices()
    if len(argv) != 1 or argv[0] not in PARTS:
        raise SystemExit(f"usage: sharding_checks.py {{{'|'.join(PARTS)}}}")
    part = argv[0]
    rng = np.random.default_rng(0)
    if part in ("cases", "more-meshes"):
        for case in CASES:
            for devices in case.meshes if part == "cases" else case.more_meshes:
                check_case(case, devices, rng)
        if part == "cases":
            check_matrices_with_no_entries()
    elif part == "bytes-and-gradients":
        check_exchanged_bytes(rng)
        check_gradients_stay_sharded(rng)
        check_forward_mode_complex(rng)
        check_shard_from_rows(rng)
        check_errors()
        check_transpose_of_arrays_on_two_devices(rng)
    else:
        _, axis, format = part.split("-")
        check_sharded_matrix_surface(rng, getattr(jax.sharding.AxisType, axis.capitalize()), format)
    print("ALL SHARDING CHECKS PASSED")


if __name__ == "__main__":
    main(sys.argv[1:])
