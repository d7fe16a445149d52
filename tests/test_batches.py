"""`jax.vmap` over matrix values: one batched product on every implementation (XLA, the CPU
family, the Pallas kernels in interpret mode), against scipy for each batch member; the
batch axis where the caller puts it; gradients through the batched product, vmap of grad
and grad of vmap, nested vmaps; batches of whole matrices (CSR structures too); and the
lowered programs hold no loop over the batch."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
from helpers import MATRICES, assert_close, random_csr, random_dia, random_values, slow_unless
from lowering import DIA_KERNEL_CALLS, KERNEL_CALLS, NEEDS_CROSS_LOWERING, lower

import jaxsparse as js
from jaxsparse.kernels import (
    _native_library,
    mosaic_tpu_csr,
    mosaic_tpu_dia,
    triton_csr,
    triton_dia,
)

BACKENDS = ["xla", "auto", "interpret"]
BATCH = 3


def batch_of(matrix, rng, dtype=jnp.float32):
    """`BATCH` values for `matrix`'s structure, stacked on a leading axis."""
    return jnp.asarray(random_values(rng, (BATCH, *matrix.data.shape), dtype))


def twin(matrix, data):
    """The scipy matrix of `matrix`'s structure with values `data` (float64)."""
    return matrix.with_data(jnp.asarray(data, jnp.float64)).to_scipy()


# Every matrix on the XLA and CPU paths; the kernels in interpret mode on one matrix of each
# kind (`test_kernels_take_the_batch_axis` covers them further).
_INTERPRETED = ("dia-tall-beyond-matrix", "dia-many-diagonals", "csr-power-law")
# Every matrix on "auto" (the native kernels here); on "xla" the matrices of the
# interpreted set, the rest `slow`.
_VALUE_CASES = [
    *[
        pytest.param(
            case,
            backend,
            id=f"{case.name}-{backend}",
            marks=slow_unless(backend == "auto" or case.name in _INTERPRETED),
        )
        for case in MATRICES
        for backend in ("xla", "auto")
    ],
    *[
        pytest.param(c, "interpret", id=f"{c.name}-interpret")
        for c in MATRICES
        if c.name in _INTERPRETED
    ],
]


@pytest.mark.parametrize(("case", "backend"), _VALUE_CASES)
def test_vmap_over_values_matches_scipy(case, backend):
    rng = np.random.default_rng(0)
    matrix, _ = case.make(rng)
    m, n = matrix.shape
    values = batch_of(matrix, rng)
    x = jnp.asarray(random_values(rng, (BATCH, n, 2), jnp.float32))

    def product(data, x):
        return js.matmul(matrix.with_data(data), x, backend=backend)

    shared = jax.jit(jax.vmap(product, in_axes=(0, None)))(values, x[0])
    both = jax.jit(jax.vmap(product))(values, x)
    for b in range(BATCH):
        member = twin(matrix, values[b]).toarray()
        assert_close(shared[b], member @ np.asarray(x[0], np.float64), jnp.float32)
        assert_close(both[b], member @ np.asarray(x[b], np.float64), jnp.float32)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_batch_axis_anywhere_and_transposed_products(fmt, backend):
    """`in_axes` and `out_axes` other than 0, and `x @ A` (the transposed product)."""
    rng = np.random.default_rng(1)
    case = next(
        c
        for c in MATRICES
        if c.name == f"{fmt}-{'unsorted-offsets' if fmt == 'dia' else 'uniform'}"
    )
    matrix, _ = case.make(rng)
    m, n = matrix.shape
    values = batch_of(matrix, rng)
    rows = jnp.asarray(random_values(rng, (2, m, BATCH), jnp.float32))

    def left_product(data, y):
        return js.matmul(y, matrix.with_data(data), backend=backend)

    out = jax.vmap(left_product, in_axes=(1, 2), out_axes=1)(jnp.moveaxis(values, 0, 1), rows)
    assert out.shape == (2, BATCH, n)
    for b in range(BATCH):
        expected = np.asarray(rows[:, :, b], np.float64) @ twin(matrix, values[b]).toarray()
        assert_close(out[:, b], expected, jnp.float32)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_gradients_vmap_of_grad_and_grad_of_vmap(fmt, backend):
    rng = np.random.default_rng(2)
    matrix = (
        random_dia(rng, (9, 7), (-2, 0, 1, 6), jnp.float64)[0]
        if fmt == "dia"
        else random_csr(rng, (9, 7), density=0.4, dtype=jnp.float64, shuffle_columns=True)[0]
    )
    values = batch_of(matrix, rng, jnp.float64)
    xs = jnp.asarray(random_values(rng, (BATCH, 7, 2), jnp.float64))

    def sparse(data, x):
        return js.matmul(matrix.with_data(data), x, backend=backend)

    def dense(data, x):
        return matrix.with_data(data).todense() @ x

    def gradients(product):
        def loss(data, x):
            return jnp.sum(jnp.sin(product(data, x)))

        def batch_loss(values, x):
            return jnp.sum(jax.vmap(loss, in_axes=(0, None))(values, x))

        vmap_of_grad = jax.vmap(jax.grad(loss, argnums=(0, 1)))(values, xs)
        grad_of_vmap = jax.grad(batch_loss, argnums=(0, 1))(values, xs[0])
        return (*vmap_of_grad, *grad_of_vmap)

    got, want = gradients(sparse), gradients(dense)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, atol=1e-12)
    # The gradient in a shared operand sums over the batch: it has the operand's shape.
    assert got[3].shape == (7, 2)


@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_nested_vmaps_merge_into_one_batch(fmt):
    rng = np.random.default_rng(3)
    case = next(c for c in MATRICES if c.fmt == fmt and c.shape[0] > 10)
    matrix, _ = case.make(rng)
    n = matrix.shape[1]
    values = jnp.asarray(random_values(rng, (2, BATCH, *matrix.data.shape), jnp.float32))
    xs = jnp.asarray(random_values(rng, (2, n, 1), jnp.float32))

    def product(data, x):
        return matrix.with_data(data) @ x

    inner = jax.vmap(product, in_axes=(0, None))
    jaxpr = jax.make_jaxpr(jax.vmap(inner))(values, xs)
    products = [e for e in jaxpr.eqns if e.primitive.name.startswith("jaxsparse_")]
    assert len(products) == 1 and products[0].invars[0].aval.shape[0] == 2 * BATCH
    out = jax.vmap(inner)(values, xs)
    for i in range(2):
        for b in range(BATCH):
            expected = twin(matrix, values[i, b]).toarray() @ np.asarray(xs[i], np.float64)
            assert_close(out[i, b], expected, jnp.float32)


def test_a_batch_of_dia_matrices_is_a_vmapped_constructor():
    """The public way to hold a batch: `vmap` a constructor; `vmap` over the result."""
    rng = np.random.default_rng(4)
    offsets, shape = (-1, 0, 2), (8, 6)
    values = jnp.asarray(random_values(rng, (BATCH, 3, 6), jnp.float32))
    batch = jax.vmap(lambda d: js.DIAMatrix(d, offsets, shape))(values)
    assert isinstance(batch, js.DIAMatrix) and batch.data.shape == (BATCH, 3, 6)
    x = jnp.asarray(random_values(rng, (6,), jnp.float32))
    out = jax.vmap(lambda a: a @ x)(batch)
    for b in range(BATCH):
        expected = scipy.sparse.dia_array((np.asarray(values[b]), offsets), shape=shape) @ x
        assert_close(out[b], expected, jnp.float32)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_batch_of_csr_structures_is_one_block_diagonal_product(backend):
    rng = np.random.default_rng(5)
    members = []
    while len(members) < BATCH:  # structures with the same number of entries
        matrix, scipy_twin = random_csr(rng, (6, 5), density=0.5, shuffle_columns=True)
        if matrix.nnz == 14:
            members.append((matrix, scipy_twin))
    batch = jax.tree.map(lambda *leaves: jnp.stack(leaves), *[m for m, _ in members])
    xs = jnp.asarray(random_values(rng, (BATCH, 5, 2), jnp.float32))
    product = jax.vmap(lambda a, x: js.matmul(a, x, backend=backend))
    out = product(batch, xs)
    shared = jax.vmap(lambda a: js.matmul(a, xs[0], backend=backend))(batch)
    gradient = jax.vmap(jax.grad(lambda a, x: jnp.sum(jnp.sin(a @ x)), allow_int=True))(batch, xs)
    for b, (matrix, scipy_twin) in enumerate(members):
        assert_close(out[b], scipy_twin @ np.asarray(xs[b], np.float64), jnp.float32)
        assert_close(shared[b], scipy_twin @ np.asarray(xs[0], np.float64), jnp.float32)
        expected = jax.grad(
            lambda d, a=matrix, x=xs[b]: jnp.sum(jnp.sin(a.with_data(d).todense() @ x))
        )
        assert_close(gradient.data[b], expected(matrix.data), jnp.float32)


def test_too_many_structures_for_int32_indices_is_a_clear_error():
    matrix = js.CSRMatrix(
        jnp.ones(1, jnp.float32), jnp.zeros(1, jnp.int32), jnp.array([0, 1], jnp.int32), (1, 2**30)
    )
    batch = jax.tree.map(lambda leaf: jnp.stack([leaf] * 4), matrix)
    x = jax.ShapeDtypeStruct((2**30, 1), jnp.float32)
    with pytest.raises(ValueError, match="overflows int32 indices"):
        jax.eval_shape(jax.vmap(lambda a, x: a @ x, in_axes=(0, None)), batch, x)


def _two_structures():
    """A batch of two 4 x 5 CSR matrices with different structures, 3 entries each."""
    members = [
        js.CSRMatrix.from_scipy(scipy.sparse.csr_array(dense))
        for dense in (
            np.array([[1.0, 0, 2, 0, 0], [0] * 5, [0, 3, 0, 0, 0], [0] * 5], np.float32),
            np.array([[0] * 5, [4.0, 0, 0, 0, 5], [0] * 5, [0, 0, 6, 0, 0]], np.float32),
        )
    ]
    return members, jax.tree.map(lambda *leaves: jnp.stack(leaves), *members)


@pytest.mark.parametrize("backend", ["xla", "auto"])
@pytest.mark.parametrize("fault", ["column-past-the-end", "decreasing-indptr"])
def test_an_invalid_member_of_a_batch_of_structures_is_nan_and_spares_the_others(backend, fault):
    """Member 0's bad structure would otherwise reach into member 1's block."""
    members, batch = _two_structures()
    indices, indptr = np.array(batch.indices), np.array(batch.indptr)
    if fault == "column-past-the-end":
        indices[0, 2] = 5 + 1  # member 1's column 1 in the block-diagonal matrix
    else:
        indptr[0, 1:3] = (3, 1)  # [0, 2, 2, 3, 3] becomes [0, 3, 1, 3, 3]
    x = jnp.arange(1.0, 6.0, dtype=jnp.float32)

    @jax.jit
    @jax.vmap
    def product(data, indices, indptr):
        return js.matmul(js.CSRMatrix(data, indices, indptr, (4, 5)), x, backend=backend)

    out = product(batch.data, jnp.asarray(indices), jnp.asarray(indptr))
    assert np.all(np.isnan(out[0]))
    assert_close(out[1], members[1].to_scipy() @ np.asarray(x), jnp.float32)


def test_vmap_over_no_structures_gives_empty_results():
    members, batch = _two_structures()
    empty = js.CSRMatrix(batch.data[:0], batch.indices[:0], batch.indptr[:0], (4, 5))
    assert jax.vmap(lambda a: a @ jnp.ones(5, jnp.float32))(empty).shape == (0, 4)
    ones = jnp.ones(5, jnp.float32)
    gradient = jax.vmap(jax.grad(lambda d: jnp.sum(members[0].with_data(d) @ ones)))
    assert gradient(batch.data[:0]).shape == (0, 3)


def test_batch_of_structures_with_no_columns_or_no_entries_gives_empty_results():
    """Products with no columns, and members that store nothing: the dense batch's shapes
    and values (the reshapes must not divide by a size 0)."""
    _, batch = _two_structures()
    assert (batch @ jnp.zeros((5, 0), jnp.float32)).shape == (2, 4, 0)
    assert (jnp.zeros((0, 4), jnp.float32) @ batch).shape == (2, 0, 5)
    twin = scipy.sparse.csr_array((4, 5), dtype=np.float32)
    member = js.CSRMatrix.from_scipy(twin)
    empty = jax.tree.map(lambda *leaves: jnp.stack(leaves), member, member)
    np.testing.assert_array_equal(empty.T.todense(), np.zeros((2, 5, 4)))
    np.testing.assert_array_equal(empty.H.todense(), np.zeros((2, 5, 4)))
    np.testing.assert_array_equal(empty.argmax(axis=0), [twin.argmax(axis=0)] * 2)
    np.testing.assert_array_equal(empty.argmin(axis=0), [twin.argmin(axis=0)] * 2)


def test_vmap_of_grad_through_a_cond_with_a_product_of_a_traced_structure():
    """`vmap` of a batched `cond` runs both branches; the one not taken sees zero-filled
    structures (JAX 0.10), whose NaN the `cond` then discards."""
    members, batch = _two_structures()
    x = jnp.arange(1.0, 6.0, dtype=jnp.float32)

    @jax.jit
    def loss(matrix, p):
        return jnp.sum(jax.lax.cond(p > 0, lambda a: a @ x, lambda a: x[:4], matrix) ** 2)

    data, p = jnp.stack([members[0].data, 2 * members[0].data]), jnp.array([1.0, -1.0])
    got = jax.vmap(jax.grad(lambda d, p: loss(members[0].with_data(d), p)))(data, p)
    for b in range(2):
        expected = jax.grad(lambda d, b=b: loss(members[0].with_data(d), p[b]))(data[b])
        assert_close(got[b], expected, jnp.float32)


# The batch: 5-point DIA and 8-per-row CSR at 2^16 rows, 64 matrices, k = 1 and 8
# (lowered only; `benchmarks/batches.py` times them).
_SIDE = 256
_ROWS = _SIDE * _SIDE


def _batched_product(fmt, backend, k):
    """`vmap` over 64 matrices' values of a product with a shared `(rows, k)` operand, and
    the avals of its arguments."""
    if fmt == "dia":
        offsets = (-_SIDE, -1, 0, 1, _SIDE)

        def product(data, x):
            return js.matmul(js.DIAMatrix(data, offsets, (_ROWS, _ROWS)), x, backend=backend)

        values = (5, _ROWS)
        structure = ()
    else:

        def product(data, x, indices, indptr):
            matrix = js.CSRMatrix(data, indices, indptr, (_ROWS, _ROWS))
            return js.matmul(matrix, x, backend=backend)

        values = (8 * _ROWS,)
        structure = (
            jax.ShapeDtypeStruct((8 * _ROWS,), jnp.int32),
            jax.ShapeDtypeStruct((_ROWS + 1,), jnp.int32),
        )
    in_axes = (0, None) + (None,) * len(structure)
    avals = (
        jax.ShapeDtypeStruct((64, *values), jnp.float32),
        jax.ShapeDtypeStruct((_ROWS, k), jnp.float32),
        *structure,
    )
    return jax.vmap(product, in_axes=in_axes), avals


@pytest.mark.parametrize("k", [1, 8])
@pytest.mark.parametrize(
    ("fmt", "backend"), [("dia", "xla"), ("dia", "auto"), ("csr", "xla"), ("csr", "auto")]
)
def test_lowered_batch_has_no_loop(fmt, backend, k):
    """One batched product: no `while` in the lowered CPU module, and with `"auto"` one
    native kernel call for the whole batch."""
    product, avals = _batched_product(fmt, backend, k)
    jaxpr = jax.make_jaxpr(product)(*avals)
    assert [e.primitive.name.startswith("jaxsparse_") for e in jaxpr.eqns].count(True) == 1
    text = lower(product, avals, "cpu")
    assert text.count("stablehlo.while") == 0
    native_calls = text.count(f"jaxsparse_{fmt}_matmul")
    assert native_calls == (1 if backend == "auto" and _native_library.AVAILABLE else 0)


@NEEDS_CROSS_LOWERING
@pytest.mark.parametrize("platform", ["cuda", "tpu"])
@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_lowered_batch_is_one_kernel_call(fmt, platform):
    """A batch lowers to the kernel of one product, one call with no loop around it."""
    product, avals = _batched_product(fmt, "pallas", 1)
    text = lower(product, avals, platform)
    marker = (DIA_KERNEL_CALLS if fmt == "dia" else KERNEL_CALLS)[platform]
    assert text.count(marker) == 1
    assert "stablehlo.while" not in text.split(marker)[0]


_KERNELS = {
    "mosaic_tpu-dia": (
        mosaic_tpu_dia.dia_matmul_mosaic_tpu,
        mosaic_tpu_dia.dia_matmul_t_mosaic_tpu,
        mosaic_tpu_dia.dia_sddmm_mosaic_tpu,
    ),
    "triton-dia": (
        triton_dia.dia_matmul_triton,
        triton_dia.dia_matmul_t_triton,
        triton_dia.dia_sddmm_triton,
    ),
    "triton": (
        triton_csr.csr_matmul_triton,
        triton_csr.csr_matmul_t_triton,
        triton_csr.csr_sddmm_triton,
    ),
    "mosaic_tpu": (
        mosaic_tpu_csr.csr_matmul_mosaic_tpu,
        mosaic_tpu_csr.csr_matmul_t_mosaic_tpu,
        mosaic_tpu_csr.csr_sddmm_mosaic_tpu,
    ),
}


# One matrix per family with a batched operand in the fast suite; a shared operand (the
# same kernels, one operand block for every member) and the other DIA matrix of each DIA
# family `slow`.
@pytest.mark.parametrize(
    "shared",
    [pytest.param(True, id="shared-operand", marks=pytest.mark.slow), False],
    ids=["shared-operand", "batched-operand"],
)
@pytest.mark.parametrize(
    ("family", "case"),
    [
        ("mosaic_tpu-dia", "dia-tall-beyond-matrix"),
        pytest.param("mosaic_tpu-dia", "dia-many-diagonals", marks=pytest.mark.slow),
        pytest.param("triton-dia", "dia-tall-beyond-matrix", marks=pytest.mark.slow),
        ("triton-dia", "dia-many-diagonals"),
        ("triton", "csr-power-law"),
        ("mosaic_tpu", "csr-empty-rows"),
    ],
)
def test_kernels_take_the_batch_axis(family, case, shared):
    """Each kernel family in interpret mode, called with the batch axis directly."""
    rng = np.random.default_rng(6)
    case = next(c for c in MATRICES if c.name == case)
    matrix, _ = case.make(rng)
    m, n = matrix.shape
    values = batch_of(matrix, rng)
    x = jnp.asarray(random_values(rng, (BATCH, n, 3), jnp.float32))
    g = jnp.asarray(random_values(rng, (BATCH, m, 3), jnp.float32))
    if shared:
        x, g = x[0], g[0]
    if case.fmt == "dia":
        structure, params = (), dict(offsets=matrix.offsets, shape=matrix.shape)
    else:
        structure, params = (matrix.indices, matrix.indptr), dict(shape=matrix.shape)
    if family == "mosaic_tpu":  # small blocks: interpret mode emulates each row's DMA
        params["block_sizes"] = mosaic_tpu_csr.BlockSizes(block_nnz=16, block_rows=8)
    matmul, matmul_t, sddmm = (
        functools.partial(kernel, interpret=True, **params) for kernel in _KERNELS[family]
    )
    y, yt = matmul(values, x, *structure), matmul_t(values, g, *structure)
    gradients = sddmm(g, x, *structure)
    assert y.shape == (BATCH, m, 3) and yt.shape == (BATCH, n, 3)
    for b in range(BATCH):
        member = twin(matrix, values[b])
        xb, gb = (np.asarray(a if shared else a[b], np.float64) for a in (x, g))
        assert_close(y[b], member @ xb, jnp.float32)
        assert_close(yt[b], member.T @ gb, jnp.float32)
        expected = jax.grad(lambda d, x=xb, g=gb: jnp.sum((matrix.with_data(d).todense() @ x) * g))
        got = gradients if shared else gradients[b]
        assert_close(got, expected(jnp.asarray(values[b], jnp.float64)), jnp.float32)


@pytest.mark.parametrize("shared", [True, False], ids=["shared-operand", "batched-operand"])
@pytest.mark.parametrize(
    ("family", "case"),
    [
        ("mosaic_tpu-dia", "dia-tall-beyond-matrix"),
        ("triton-dia", "dia-many-diagonals"),
        ("triton", "csr-power-law"),
        ("mosaic_tpu", "csr-empty-rows"),
    ],
)
def test_kernels_take_an_empty_batch(family, case, shared):
    """A batch of no matrices (`jax.vmap` over zero members) gives empty results of the
    batch's shapes, as `jnp` does, from every kernel family."""
    matrix, _ = next(c for c in MATRICES if c.name == case).make(np.random.default_rng(7))
    m, n = matrix.shape
    values = jnp.zeros((0, *matrix.data.shape), jnp.float32)
    x, g = jnp.ones((n, 3), jnp.float32), jnp.ones((m, 3), jnp.float32)
    if not shared:
        x, g = x[None][:0], g[None][:0]
    if isinstance(matrix, js.DIAMatrix):
        structure, params = (), dict(offsets=matrix.offsets, shape=matrix.shape)
    else:
        structure, params = (matrix.indices, matrix.indptr), dict(shape=matrix.shape)
    matmul, matmul_t, sddmm = (
        functools.partial(kernel, interpret=True, **params) for kernel in _KERNELS[family]
    )
    assert matmul(values, x, *structure).shape == (0, m, 3)
    assert matmul_t(values, g, *structure).shape == (0, n, 3)
    batched_g = g[None][:0] if shared else g  # sddmm's batch comes from its operands
    assert sddmm(batched_g, x, *structure).shape == values.shape
