"""The Mosaic GPU DIA kernels (`kernels/mosaic_gpu_dia.py`): Mosaic GPU's interpreter (race
detection on) against the XLA reference, values and the product's VJP; cross-lowering and
export of products and gradients for cuda through the product primitives.

The interpreter runs kernels through ordered host callbacks, which a primitive's lowering
rule cannot hold (`mlir.lower_fun` raises `KeyError: OrderedIOEffect`), so interpreted
kernels are called directly here, and the primitives are checked by lowering."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import DIA_MATRICES, ignored_slots, random_values, tolerance
from lowering import DIA_KERNEL_CALLS, NEEDS_CROSS_LOWERING, abstract_mesh, lower

import jaxsparse as js
from jaxsparse.kernels import mosaic_gpu_dia
from jaxsparse.kernels.mosaic_gpu_dia import (
    dia_matmul_mosaic_gpu,
    dia_matmul_t_mosaic_gpu,
    dia_sddmm_mosaic_gpu,
)
from jaxsparse.kernels.xla_dia import dia_matmul_t_xla, dia_matmul_xla, dia_sddmm_xla

try:  # where Mosaic GPU's interpreter records the races it finds
    from jax._src.pallas.mosaic_gpu.interpret.interpret_pallas_call import get_races
except ImportError:
    get_races = None

pytestmark = pytest.mark.skipif(
    mosaic_gpu_dia.plgpu is None,
    reason="jax.experimental.pallas.mosaic_gpu does not import with this JAX",
)

_CASES = {case.name: case for case in DIA_MATRICES}
_KERNELS = {
    "matmul": (dia_matmul_mosaic_gpu, dia_matmul_xla),
    "matmul_t": (dia_matmul_t_mosaic_gpu, dia_matmul_t_xla),
    "sddmm": (dia_sddmm_mosaic_gpu, dia_sddmm_xla),
}
_MOSAIC_CALL = DIA_KERNEL_CALLS["cuda"]


def _operands(rng, member, data, m, n, k, dtype, *, batch=None, shared=False):
    """The two arguments of `member` for values `data` (NaN in its ignored slots)."""
    lead = () if batch is None or shared else (batch,)
    x = jnp.asarray(random_values(rng, (*lead, n, k), dtype))
    g = jnp.asarray(random_values(rng, (*lead, m, k), dtype))
    return {"matmul": (data, x), "matmul_t": (data, g), "sddmm": (g, x)}[member]


def _data_with_nan_junk(rng, offsets, shape, dtype, batch=None):
    lead = () if batch is None else (batch,)
    data = random_values(rng, (*lead, len(offsets), shape[1]), dtype)
    return jnp.asarray(np.where(ignored_slots(offsets, shape), np.nan, data).astype(data.dtype))


def _assert_matches_reference(member, args, offsets, shape):
    kernel, reference = _KERNELS[member]
    params = dict(offsets=offsets, shape=shape)
    actual = jax.jit(functools.partial(kernel, interpret=True, **params))(*args)
    expected = reference(*args, **params)
    dtype = args[1].dtype
    assert actual.dtype == dtype and actual.shape == expected.shape
    expected = np.asarray(expected.astype(jnp.float64))
    scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
    np.testing.assert_allclose(
        np.asarray(actual.astype(jnp.float64)), expected, rtol=0, atol=4 * tolerance(dtype) * scale
    )
    # With no diagonal inside the matrix the kernels return zeros without a launch, and
    # the interpreter may have no race record yet in this process.
    if get_races is not None and mosaic_gpu_dia.active_diagonals(offsets, shape)[0]:
        assert not get_races().races_found


@pytest.mark.parametrize("member", list(_KERNELS))
@pytest.mark.parametrize(
    ("name", "k", "dtype"),
    [
        ("dia-tridiagonal", 1, jnp.float32),
        ("dia-unsorted-offsets", 3, jnp.bfloat16),
        ("dia-tall-beyond-matrix", 8, jnp.float32),
        ("dia-wide-beyond-matrix", 1, jnp.bfloat16),
        ("dia-many-diagonals", 3, jnp.float32),  # looped over an offset table
        ("dia-all-outside", 2, jnp.float32),
        ("dia-one-column", 3, jnp.float64),
    ],
)
def test_kernels_match_xla_reference(member, name, k, dtype):
    case = _CASES[name]
    rng = np.random.default_rng(0)
    m, n = case.shape
    data = _data_with_nan_junk(rng, case.structure, case.shape, dtype)
    args = _operands(rng, member, data, m, n, k, dtype)
    _assert_matches_reference(member, args, case.structure, case.shape)


@pytest.mark.parametrize(
    ("member", "shared"), [("matmul", False), ("matmul_t", True), ("sddmm", True)]
)
def test_batches_match_xla_reference(member, shared):
    offsets, shape = (-7, 0, 3, 40), (300, 290)  # several row blocks, a band beyond n
    rng = np.random.default_rng(1)
    data = _data_with_nan_junk(rng, offsets, shape, jnp.float32, batch=3)
    args = _operands(rng, member, data, *shape, 9, jnp.float32, batch=3, shared=shared)
    if member == "sddmm" and shared:  # one shared argument, the other batched
        args = (args[0], jnp.asarray(random_values(rng, (3, shape[1], 9), jnp.float32)))
    _assert_matches_reference(member, args, offsets, shape)


def test_programs_at_the_ends_and_in_the_interior():
    """Six programs of 512 rows: two at the top and two at the bottom would read outside
    the arrays and read zero-padded windows instead; two in the interior read the arrays."""
    offsets, shape = (-600, -1, 0, 1, 300), (2600, 2500)
    rng = np.random.default_rng(2)
    data = _data_with_nan_junk(rng, offsets, shape, jnp.float32)
    for member in _KERNELS:
        args = _operands(rng, member, data, *shape, 2, jnp.float32)
        _assert_matches_reference(member, args, offsets, shape)


def test_ignored_slots_are_exactly_zero_in_the_gradient():
    offsets, shape = (-3, 0, 2, 9), (10, 12)
    rng = np.random.default_rng(3)
    g = jnp.asarray(random_values(rng, (10, 2), jnp.float32))
    x = jnp.full((12, 2), jnp.inf, jnp.float32)
    out = dia_sddmm_mosaic_gpu(g, x, offsets=offsets, shape=shape, interpret=True)
    ignored = ignored_slots(offsets, shape)
    assert np.all(np.asarray(out)[ignored] == 0)
    assert not np.any(np.isfinite(np.asarray(out)[~ignored]))


@pytest.mark.parametrize(
    ("k", "dtype", "columns"),
    [
        (32, jnp.float32, 32),
        (96, jnp.float32, 32),
        (16, jnp.float32, 16),
        (8, jnp.float32, 8),
        (24, jnp.float32, None),
        (4, jnp.float32, None),
        (1, jnp.float32, None),
        (16, jnp.float64, 16),
        (8, jnp.float64, 8),
        (32, jnp.bfloat16, None),
    ],
)
def test_tile_columns_read_whole_lines(k, dtype, columns):
    """Row-major tiles take one 128-byte line of each row where rows are whole lines,
    else whole rows of 32 or 64 bytes (8 columns at least); none for other `k` (a part
    of a row that is no whole line fails to lower), for half precision, past 32
    diagonals (the looped kernels), or before JAX 0.12."""
    want = columns if mosaic_gpu_dia._TILES_FROM_GMEM else None
    assert mosaic_gpu_dia._tile_columns(k, jnp.dtype(dtype).itemsize, 5) == want
    assert mosaic_gpu_dia._tile_columns(k, jnp.dtype(dtype).itemsize, 33) is None


_STENCIL = (-200, -1, 0, 1, 250)


def test_gradient_tiles_take_64_rows_past_8_diagonals_or_for_narrow_matrices():
    """One accumulator a diagonal: past 8 diagonals (or at most 64 stored columns) the
    data gradient's programs take 64 rows, so their registers stay within 255."""
    rows = mosaic_gpu_dia._tile_rows
    assert [rows(580, 5), rows(580, 8), rows(580, 9), rows(580, 27), rows(64, 5)] == [
        128,
        128,
        64,
        64,
        64,
    ]


@pytest.mark.parametrize("member", list(_KERNELS))
@pytest.mark.parametrize(
    ("k", "dtype", "batch", "shared", "offsets"),
    [
        (32, jnp.float32, None, True, _STENCIL),
        (8, jnp.float32, None, True, _STENCIL),
        (16, jnp.float64, 2, True, _STENCIL),
        (16, jnp.float32, 2, False, _STENCIL),
        (8, jnp.float64, 2, False, _STENCIL),
        (8, jnp.float32, None, True, tuple(range(-120, 121, 24))),
        (96, jnp.float32, None, True, _STENCIL),
    ],
    ids=[
        "f32-line",
        "f32-quarter-line",
        "f64",
        "f32-half-line-batched",
        "f64-half-line-batched",
        "f32-many-diagonals",
        "f32-three-lines",
    ],
)
def test_row_major_tiles_match_xla_reference(member, k, dtype, batch, shared, offsets):
    """Products and the data gradient whose operand rows are whole 128-byte lines, or
    whole fractions of one, run on row-major tiles (no transposes in the program), with
    programs at the ends and in the interior, operands shared by a batch or batched."""
    shape = (600, 580)
    rng = np.random.default_rng(6)
    data = _data_with_nan_junk(rng, offsets, shape, dtype, batch=batch)
    args = _operands(rng, member, data, *shape, k, dtype, batch=batch, shared=shared)
    _assert_matches_reference(member, args, offsets, shape)
    kernel = _KERNELS[member][0]
    program = jax.make_jaxpr(functools.partial(kernel, offsets=offsets, shape=shape))(*args)
    transposes = str(program).count("transpose[")
    assert transposes == (0 if mosaic_gpu_dia._TILES_FROM_GMEM else 2)


@pytest.mark.parametrize("member", list(_KERNELS))
def test_empty_shapes_give_zeros(member):
    kernel, reference = _KERNELS[member]
    offsets = (-1, 0, 2)
    for shape, k, batch in [((6, 5), 0, None), ((0, 5), 2, None), ((6, 5), 2, 0)]:
        m, n = shape
        rng = np.random.default_rng(4)
        lead = () if batch is None else (batch,)
        data = jnp.asarray(random_values(rng, (*lead, 3, n), jnp.float32))
        args = _operands(rng, member, data, m, n, k, jnp.float32, batch=batch)
        out = kernel(*args, offsets=offsets, shape=shape, interpret=True)
        expected = reference(*args, offsets=offsets, shape=shape)
        assert out.shape == expected.shape and not np.any(np.asarray(out))


@pytest.mark.parametrize("member", list(_KERNELS))
def test_bad_arguments_raise(member):
    kernel, _ = _KERNELS[member]
    data = jnp.zeros((2, 5), jnp.float32)
    x = jnp.zeros((5, 2), jnp.float32)
    first = x if member == "sddmm" else data
    with pytest.raises(ValueError, match="duplicate"):
        kernel(first, x, offsets=(1, 1), shape=(5, 5), interpret=True)
    with pytest.raises(TypeError, match="share a dtype"):
        kernel(first, x.astype(jnp.bfloat16), offsets=(0, 1), shape=(5, 5), interpret=True)
    with pytest.raises(ValueError, match="has shape"):
        kernel(first, x[:4], offsets=(0, 1), shape=(5, 5), interpret=True)


def test_supports():
    supports = mosaic_gpu_dia.supports
    for dtype in (jnp.float32, jnp.bfloat16, jnp.float16, jnp.float64):
        assert supports(dtype, "cuda") and supports(dtype, "cpu")
    for dtype in (jnp.complex64, jnp.int32, jnp.bool_):
        assert not supports(dtype, "cuda")
    assert not supports(jnp.float32, "rocm") and not supports(jnp.float32, "tpu")


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_vjp_of_the_product_matches_xla(dtype):
    """The product and its VJP as the primitives' rules build it (`_primitive.py`: `d data =
    sddmm(ct, x)`, `d x = matmul_t(data, ct)`), from the interpreted kernels, against
    `jax.vjp` of the XLA backend with a random cotangent."""
    offsets, shape = (2, -7, 0, 5, 60), (45, 47)
    rng = np.random.default_rng(5)
    data = _data_with_nan_junk(rng, offsets, shape, dtype)
    x = jnp.asarray(random_values(rng, (shape[1], 3), dtype))
    cotangent = jnp.asarray(random_values(rng, (shape[0], 3), dtype))
    params = dict(offsets=offsets, shape=shape, interpret=True)
    got = (
        dia_matmul_mosaic_gpu(data, x, **params),
        dia_sddmm_mosaic_gpu(cotangent, x, **params),
        dia_matmul_t_mosaic_gpu(data, cotangent, **params),
    )

    def product(data, x):
        return js.matmul(js.DIAMatrix(data, offsets, shape), x, backend="xla")

    out, vjp = jax.vjp(product, data, x)
    want = (out, *vjp(cotangent))
    for actual, expected in zip(got, want, strict=True):
        assert actual.dtype == expected.dtype
        expected = np.asarray(expected.astype(jnp.float64))
        scale = max(1.0, float(np.abs(expected).max()))
        np.testing.assert_allclose(
            np.asarray(actual.astype(jnp.float64)),
            expected,
            rtol=0,
            atol=4 * tolerance(dtype) * scale,
        )
    # With no diagonal inside the matrix the kernels return zeros without a launch, and
    # the interpreter may have no race record yet in this process.
    if get_races is not None and mosaic_gpu_dia.active_diagonals(offsets, shape)[0]:
        assert not get_races().races_found


def _stencil_product_and_gradient(backend):
    side = 256
    offsets, shape = (-side, -1, 0, 1, side), (side * side, side * side)

    def product(data, x):
        return js.matmul(js.DIAMatrix(data, offsets, shape), x, backend=backend)

    def gradient(data, x):
        return jax.grad(lambda d, x: jnp.sum(product(d, x)), argnums=(0, 1))(data, x)

    return product, gradient, (5, shape[1])


@NEEDS_CROSS_LOWERING
@pytest.mark.parametrize("k", [1, 128])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_product_and_gradient_lower_for_cuda(dtype, k):
    product, gradient, values_shape = _stencil_product_and_gradient("pallas")
    data = jax.ShapeDtypeStruct(values_shape, dtype)
    x = jax.ShapeDtypeStruct((values_shape[1], k), dtype)
    product_text = lower(product, (data, x), "cuda")
    assert product_text.count(_MOSAIC_CALL) == 1 and "triton" not in product_text
    gradient_text = lower(gradient, (data, x), "cuda")
    assert gradient_text.count(_MOSAIC_CALL) == 2
    assert "dia_sddmm_mosaic_gpu" in gradient_text
    assert "dia_matmul_t_mosaic_gpu" in gradient_text


@NEEDS_CROSS_LOWERING
def test_data_gradient_is_written_at_its_width():
    """Columns past the kernel's last whole block (5000 = 9 blocks of 512 and 392) come
    from XLA, written into the kernel's result of 5000 columns in place: no padded result
    of 5120 columns cut to 5000, which copies the whole gradient."""
    offsets, shape = (-1, 0, 1), (5000, 5000)
    g = x = jax.ShapeDtypeStruct((5000, 1), jnp.float32)
    sddmm = functools.partial(dia_sddmm_mosaic_gpu, offsets=offsets, shape=shape)
    text = lower(sddmm, (g, x), "cuda")
    kernel_line = next(line for line in text.splitlines() if _MOSAIC_CALL in line)
    assert kernel_line.rstrip().endswith("tensor<1x3x5000xf32>")
    assert "stablehlo.dynamic_update_slice" in text and "x5120x" not in text


@NEEDS_CROSS_LOWERING
@pytest.mark.parametrize("backend", ["pallas", "auto"])
def test_product_and_gradient_export_for_cuda_with_default_checks(backend):
    product, _, values_shape = _stencil_product_and_gradient(backend)

    def product_and_vjp(data, x, cotangent):
        out, vjp = jax.vjp(product, data, x)
        return (out, *vjp(cotangent))

    avals = (
        jax.ShapeDtypeStruct(values_shape, jnp.float32),
        jax.ShapeDtypeStruct((values_shape[1], 8), jnp.float32),
        jax.ShapeDtypeStruct((values_shape[1], 8), jnp.float32),
    )
    with abstract_mesh("cuda"):
        exported = jax.export.export(jax.jit(product_and_vjp), platforms=("cuda",))(*avals)
    restored = jax.export.deserialize(exported.serialize())
    assert restored.platforms == ("cuda",)
    assert restored.mlir_module().count(_MOSAIC_CALL) == 3
