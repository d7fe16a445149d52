"""The DIA Pallas kernels: the TPU window kernels (`kernels/mosaic_tpu_dia.py`) and the GPU
Triton kernels (`kernels/triton_dia.py`), in interpret mode against scipy over the
registry's DIA matrices, block sizes, cross-lowering, static offsets."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
from helpers import DIA_MATRICES, cases, ignored_slots, slow_unless, tolerance
from lowering import KERNEL_CALLS, NEEDS_CROSS_LOWERING, lower

from jaxsparse.kernels import mosaic_tpu_dia, triton_dia
from jaxsparse.kernels._bounds_check import out_of_bounds_reports
from jaxsparse.kernels.mosaic_tpu_dia import (
    dia_matmul_mosaic_tpu,
    dia_matmul_t_mosaic_tpu,
    dia_sddmm_mosaic_tpu,
    supports,
)
from jaxsparse.kernels.triton_dia import (
    default_block_sizes,
    dia_matmul_t_triton,
    dia_matmul_triton,
    dia_sddmm_triton,
)
from jaxsparse.kernels.triton_dia import supports as triton_supports


def _random(rng, shape, dtype):
    """Host values exactly representable in `dtype`, in float64 or complex128."""
    values = rng.standard_normal(shape)
    host_dtype = np.float64
    if jnp.issubdtype(dtype, jnp.complexfloating):
        values, host_dtype = values + 1j * rng.standard_normal(shape), np.complex128
    return values.astype(jnp.dtype(dtype)).astype(host_dtype)


def _make_problem(m, n, offsets, k, dtype, seed=0):
    """`data` (with NaN junk in ignored slots) and `x`, `g`, as host arrays of `dtype`."""
    rng = np.random.default_rng(seed)
    data = _random(rng, (len(offsets), n), dtype)
    data[ignored_slots(offsets, (m, n))] = np.nan
    x = _random(rng, (n, k), dtype)
    g = _random(rng, (m, k), dtype)
    return data, x, g


def _dense(data, offsets, m, n):
    dense = scipy.sparse.dia_array((data, offsets), shape=(m, n)).toarray()
    assert np.isfinite(dense).all(), "scipy must ignore the junk slots"
    return dense


def _sddmm_oracle(g, x, offsets, m, n):
    full = np.einsum("ic,jc->ij", g, x)
    rows = np.arange(n)[None, :] - np.asarray(offsets)[:, None]
    valid = (rows >= 0) & (rows < m)
    return np.where(valid, full[np.clip(rows, 0, max(m - 1, 0)), np.arange(n)[None, :]], 0)


def _check_close(actual, expected, dtype):
    assert actual.dtype == jnp.dtype(dtype)
    tol = tolerance(dtype)
    actual = np.asarray(actual).astype(np.complex128)
    scale = max(1.0, np.abs(expected).max(initial=0.0))
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol * scale)


FAMILIES = {
    "window": (dia_matmul_mosaic_tpu, dia_matmul_t_mosaic_tpu, dia_sddmm_mosaic_tpu),
    "triton": (dia_matmul_triton, dia_matmul_t_triton, dia_sddmm_triton),
}


def _check_kernels(m, n, offsets, k, dtype, block_sizes=None, family="window"):
    """Product, transposed product and data gradient of one family in interpret mode
    against scipy; the data gradient is exactly zero on ignored slots."""
    matmul, matmul_t, sddmm = FAMILIES[family]
    data, x, g = _make_problem(m, n, offsets, k, dtype)
    options = dict(offsets=offsets, shape=(m, n), interpret=True, block_sizes=block_sizes)
    dense = _dense(data, offsets, m, n)

    def kernels(data, x, g):  # one program, compiled once
        return (
            matmul(data, x, **options),
            matmul_t(data, g, **options),
            sddmm(g, x, **options),
        )

    y, yt, grad = jax.jit(kernels)(*(jnp.asarray(a, dtype) for a in (data, x, g)))
    assert y.shape == (m, k)
    _check_close(y, dense @ x, dtype)
    assert yt.shape == (n, k)
    _check_close(yt, dense.T @ g, dtype)
    assert grad.shape == (len(offsets), n)
    _check_close(grad, _sddmm_oracle(g, x, offsets, m, n), dtype)
    assert not np.asarray(grad.astype(jnp.float64))[ignored_slots(offsets, (m, n))].any()


# In the fast suite: float32 on the matrices whose diagonals run past the matrix, unrolled
# and looping kernels, unsorted offsets, and bfloat16 (a float32 accumulator) on the
# looping one; the other matrices and dtypes are `slow`.
_FAST_CASES = (
    "dia-tall-beyond-matrix",
    "dia-27-point",
    "dia-many-diagonals",
    "dia-unsorted-offsets",
)
_BFLOAT16_CASES = ("dia-many-diagonals",)


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize(
    ("case", "dtype"),
    [
        pytest.param(
            case,
            dtype,
            id=f"{case.name}-{np.dtype(dtype).name}",
            marks=slow_unless(
                case.name in (_FAST_CASES if dtype is jnp.float32 else _BFLOAT16_CASES)
            ),
        )
        for case in DIA_MATRICES
        for dtype in (jnp.float32, jnp.bfloat16)
    ],
)
def test_kernels_match_scipy(case, dtype, family):
    _check_kernels(*case.shape, case.structure, 3, dtype, family=family)


# Several row blocks, and several column blocks (TPU: multiples of 128 lanes).
_SMALL_BLOCKS = {
    "window": (mosaic_tpu_dia.BlockSizes(block_rows=32, block_cols=128), 130),
    "triton": (triton_dia.BlockSizes(block_rows=32, block_cols=2), 5),
}


_OUT_OF_BOUNDS_CASES = ("dia-tall-beyond-matrix", "dia-many-diagonals", "dia-one-column")


# Beyond the matrix on both sides, many diagonals (the loop over offsets given as data),
# one column: the Triton kernels touch no memory outside their buffers.
@pytest.mark.parametrize("case", cases([c for c in DIA_MATRICES if c.name in _OUT_OF_BOUNDS_CASES]))
def test_triton_kernels_make_no_access_outside_their_buffers(case):
    with out_of_bounds_reports() as reports:
        _check_kernels(*case.shape, case.structure, 3, jnp.float32, family="triton")
    assert reports == []


@pytest.mark.parametrize("family", list(FAMILIES))
def test_small_blocks_span_several_programs_and_column_blocks(family):
    blocks, k = _SMALL_BLOCKS[family]
    _check_kernels(77, 61, (-9, -1, 0, 1, 40), k, jnp.float32, blocks, family)


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.float64])
@pytest.mark.parametrize("case", cases(DIA_MATRICES[3:5]))
def test_interpret_dtypes(case, dtype):
    """The Triton kernels take every real floating dtype; the window kernels take the
    TPU's (`test_supports`)."""
    assert triton_supports(dtype, "cpu")
    _check_kernels(*case.shape, case.structure, 3, dtype, family="triton")


@pytest.mark.parametrize("m, n, k", [(0, 4, 2), (4, 0, 2), (4, 4, 0)])
def test_empty(m, n, k):
    offsets = (-1, 0, 1)
    data = jnp.ones((3, n), jnp.float32)
    y = dia_matmul_mosaic_tpu(data, jnp.ones((n, k), jnp.float32), offsets=offsets, shape=(m, n))
    assert y.shape == (m, k) and not y.any()
    grad = dia_sddmm_mosaic_tpu(
        jnp.ones((m, k), jnp.float32), jnp.ones((n, k), jnp.float32), offsets=offsets, shape=(m, n)
    )
    assert grad.shape == (3, n) and not grad.any()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_shape_errors(family):
    matmul, _, sddmm = FAMILIES[family]
    data, x = jnp.ones((2, 4), jnp.float32), jnp.ones((4, 3), jnp.float32)
    with pytest.raises(ValueError, match="duplicate"):
        matmul(data, x, offsets=(1, 1), shape=(4, 4))
    with pytest.raises(ValueError, match="`data` has shape"):
        matmul(data, x, offsets=(0,), shape=(4, 4))
    with pytest.raises(ValueError, match="`x` has shape"):
        matmul(data, x[:3], offsets=(0, 1), shape=(4, 4))
    with pytest.raises(TypeError, match="share a dtype"):
        matmul(data, x.astype(jnp.float64), offsets=(0, 1), shape=(4, 4))
    with pytest.raises(ValueError, match="`g` has shape"):
        sddmm(x[:3], x, offsets=(0, 1), shape=(4, 4))
    with pytest.raises(ValueError, match="platform"):
        matmul(data, x, offsets=(0, 1), shape=(4, 4), platform="metal")


def test_block_sizes():
    for module in (mosaic_tpu_dia, triton_dia):
        with pytest.raises(ValueError, match="block_rows"):
            module.BlockSizes(block_rows=48)
        with pytest.raises(ValueError, match="block_rows"):
            module.BlockSizes(block_rows=16)
        with pytest.raises(ValueError, match="block_cols"):
            module.BlockSizes(block_cols=3)
    with pytest.raises(ValueError, match="num_warps"):
        triton_dia.BlockSizes(num_warps=3)
    with pytest.raises(ValueError, match="num_stages"):
        triton_dia.BlockSizes(num_stages=0)
    for platform in ("tpu", "cpu"):
        for k in (1, 7, 128, 1000):
            default = mosaic_tpu_dia.BlockSizes.get_default(platform=platform, num_cols=k)
            assert default.block_rows is not None and default.block_cols is not None
    with pytest.raises(ValueError, match="platform"):
        mosaic_tpu_dia.BlockSizes.get_default(platform="cuda", num_cols=1)


def test_supports():
    """The window kernels take the TPU's dtypes, in interpret mode (`"cpu"`) too."""
    for platform in ("tpu", "cpu"):
        assert supports(jnp.bfloat16, platform) and supports(jnp.float32, platform)
        assert not supports(jnp.float64, platform) and not supports(jnp.float16, platform)
        assert not supports(jnp.int32, platform) and not supports(jnp.complex64, platform)
    assert triton_supports(jnp.float64, "cuda") and triton_supports(jnp.float16, "rocm")
    assert not triton_supports(jnp.float32, "tpu") and not triton_supports(jnp.int32, "cuda")


def _pallas_call_eqn(fn, *args, **kwargs):
    jaxpr = jax.make_jaxpr(functools.partial(fn, **kwargs))(*args)
    (eqn,) = [e for e in jaxpr.eqns if e.primitive.name == "pallas_call"]
    return eqn


@pytest.mark.parametrize("fn", [dia_matmul_mosaic_tpu, dia_sddmm_mosaic_tpu])
def test_offsets_are_not_operands(fn):
    m = n = 40
    first = (3, n) if fn is dia_matmul_mosaic_tpu else (m, 4)
    first = jnp.ones(first, jnp.float32)
    x = jnp.ones((n, 4), jnp.float32)
    kwargs = dict(shape=(m, n), interpret=True)
    eqn_a = _pallas_call_eqn(fn, first, x, offsets=(-2, 0, 1), **kwargs)
    eqn_b = _pallas_call_eqn(fn, first, x, offsets=(-1, 0, 2), **kwargs)
    for eqn in (eqn_a, eqn_b):
        avals = [v.aval for v in eqn.invars]
        # Exactly the two padded float operands: no offsets, no scalar-prefetch ints.
        assert len(avals) == 2
        assert all(a.dtype == jnp.float32 and a.ndim == 2 for a in avals)
    # Same operand shapes (same span), but the offsets live in the kernel body.
    assert [v.aval for v in eqn_a.invars] == [v.aval for v in eqn_b.invars]
    assert str(eqn_a.params["jaxpr"]) != str(eqn_b.params["jaxpr"])


def test_same_offsets_reuse_the_compiled_kernel():
    matmul = jax.jit(dia_matmul_mosaic_tpu, static_argnames=("offsets", "shape", "interpret"))
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.standard_normal((24, 2)), jnp.float32)
    for seed in range(2):
        data = jnp.asarray(np.random.default_rng(seed).standard_normal((3, 24)), jnp.float32)
        matmul(data, x, offsets=(-1, 0, 1), shape=(24, 24), interpret=True)
    assert matmul._cache_size() == 1
    y = matmul(data, x, offsets=(-2, 0, 1), shape=(24, 24), interpret=True)
    assert matmul._cache_size() == 2
    expected = _dense(np.asarray(data, np.float64), (-2, 0, 1), 24, 24) @ np.asarray(x)
    _check_close(y, expected, jnp.float32)


_ROWS = 2**20
_STENCIL_5 = (-1024, -1, 0, 1, 1024)  # 2-D 5-point stencil on a 1024 x 1024 grid
_KERNEL_NAMES = {
    dia_matmul_mosaic_tpu: "dia_matmul",
    dia_matmul_t_mosaic_tpu: "dia_matmul",
    dia_sddmm_mosaic_tpu: "dia_sddmm",
}
_TRITON_KERNEL_NAMES = {
    dia_matmul_triton: "dia_matmul",
    dia_matmul_t_triton: "dia_matmul_t",
    dia_sddmm_triton: "dia_sddmm",
}


def _lower(fn, offsets, k, dtype, platform):
    n = _ROWS
    first = (n, k) if fn in (dia_sddmm_mosaic_tpu, dia_sddmm_triton) else (len(offsets), n)
    avals = (jax.ShapeDtypeStruct(first, dtype), jax.ShapeDtypeStruct((n, k), dtype))
    f = functools.partial(fn, offsets=offsets, shape=(n, n), platform=platform)
    return lower(f, avals, platform)


@NEEDS_CROSS_LOWERING
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("k", [1, 128])
@pytest.mark.parametrize("fn", list(_TRITON_KERNEL_NAMES), ids=lambda fn: fn.__name__)
def test_lowers_for_cuda(fn, k, dtype):
    text = _lower(fn, _STENCIL_5, k, dtype, "cuda")
    assert KERNEL_CALLS["cuda"] in text
    assert f'name = "{_TRITON_KERNEL_NAMES[fn]}"' in text
    kernel = "sddmm" if fn is dia_sddmm_triton else "matmul"
    block_rows = default_block_sizes(kernel, k).block_rows
    assert f"grid_x = {_ROWS // block_rows} : i32" in text


def test_window_kernels_decline_gpus():
    """GPUs run `triton_dia` and `mosaic_gpu_dia`; the window kernels are TPU kernels."""
    assert not supports(jnp.float32, "cuda") and not supports(jnp.float32, "rocm")
    with pytest.raises(ValueError, match="platform"):
        dia_matmul_mosaic_tpu(
            jnp.ones((1, 4)), jnp.ones((4, 1)), offsets=(0,), shape=(4, 4), platform="cuda"
        )


def test_triton_knobs_reach_the_kernel_call():
    """`num_warps` and `num_stages` travel with the block sizes into Triton's parameters."""
    blocks = triton_dia.BlockSizes(num_warps=8, num_stages=3)
    f = functools.partial(
        dia_matmul_triton, offsets=_STENCIL_5, shape=(4096, 4096), platform="cuda"
    )
    data, x = jnp.zeros((5, 4096), jnp.float32), jnp.zeros((4096, 1), jnp.float32)
    jaxpr = jax.make_jaxpr(functools.partial(f, block_sizes=blocks))(data, x)
    (eqn,) = [e for e in jaxpr.eqns if e.primitive.name == "pallas_call"]
    params = eqn.params["compiler_params"]
    triton = params["triton"] if isinstance(params, dict) else params
    assert triton.num_warps == 8 and triton.num_stages == 3


@NEEDS_CROSS_LOWERING
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("k", [1, 128])
@pytest.mark.parametrize("fn", list(_KERNEL_NAMES), ids=lambda fn: fn.__name__)
def test_lowers_for_tpu(fn, k, dtype):
    text = _lower(fn, _STENCIL_5, k, dtype, "tpu")
    assert KERNEL_CALLS["tpu"] in text
    assert f'kernel_name = "{_KERNEL_NAMES[fn]}"' in text
    assert "triton" not in text


@NEEDS_CROSS_LOWERING
@pytest.mark.parametrize(
    ("fn", "platform"),
    [(dia_matmul_mosaic_tpu, "tpu"), (dia_sddmm_mosaic_tpu, "tpu")]
    + [(dia_matmul_triton, "cuda"), (dia_sddmm_triton, "cuda")],
    ids=lambda p: getattr(p, "__name__", p),
)
def test_27_point_stencil_lowers(fn, platform):
    offsets = tuple(
        a * 4096 + b * 64 + c for a in (-1, 0, 1) for b in (-1, 0, 1) for c in (-1, 0, 1)
    )
    text = _lower(fn, offsets, 128, jnp.float32, platform)
    assert KERNEL_CALLS[platform] in text
