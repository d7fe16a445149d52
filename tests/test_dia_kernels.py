"""The DIA Pallas kernels: interpret mode against scipy, cross-lowering, static offsets."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
from helpers import tolerance

from jaxsparse.kernels.dia import BlockSizes, dia_matmul, dia_sddmm, pallas_supports

# A 3-D 27-point stencil on a 4x4x4 grid, in a scrambled order.
_STENCIL_27 = tuple(
    np.random.default_rng(27)
    .permutation([a * 16 + b * 4 + c for a in (-1, 0, 1) for b in (-1, 0, 1) for c in (-1, 0, 1)])
    .tolist()
)

# (m, n, offsets, k, block_sizes)
_CASES = {
    "square-tridiagonal": (37, 37, (-1, 0, 1), 1, None),
    "square-k3-unsorted": (45, 45, (2, -7, 0, 5), 3, None),
    "tall-beyond-matrix": (50, 23, (3, -40, 0, 22, 100, -50), 5, None),
    "wide-beyond-matrix": (20, 70, (-5, 2, 60, -19, 69, 70, -20), 3, None),
    "single-diagonal": (33, 33, (7,), 1, None),
    "27-diagonals": (70, 64, _STENCIL_27, 2, None),
    "small-blocks": (77, 61, (-9, -1, 0, 1, 40), 5, BlockSizes(block_rows=32, block_cols=2)),
    "one-by-one": (1, 1, (0,), 1, None),
    "one-row": (1, 5, (0, 4, -1, 2), 2, None),
    "one-column": (6, 1, (0, -5, 1, -2), 1, None),
    "all-beyond-matrix": (10, 10, (10, -10, 25), 2, None),
}


def _random(rng, shape, dtype):
    """Host values exactly representable in `dtype`, in float64 or complex128."""
    values = rng.standard_normal(shape)
    host_dtype = np.float64
    if jnp.issubdtype(dtype, jnp.complexfloating):
        values, host_dtype = values + 1j * rng.standard_normal(shape), np.complex128
    return np.array(jnp.asarray(values, dtype=dtype).astype(host_dtype))


def _ignored_slots(offsets, m, n):
    """Mask of the `data` slots that fall outside the `(m, n)` matrix."""
    rows = np.arange(n)[None, :] - np.asarray(offsets)[:, None]
    return (rows < 0) | (rows >= m)


def _make_problem(m, n, offsets, k, dtype, seed=0):
    """`data` (with NaN junk in ignored slots) and `x`, `g`, as host arrays of `dtype`."""
    rng = np.random.default_rng(seed)
    data = _random(rng, (len(offsets), n), dtype)
    data[_ignored_slots(offsets, m, n)] = np.nan
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
    actual = np.asarray(actual.astype(jnp.complex128))
    scale = max(1.0, np.abs(expected).max(initial=0.0))
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol * scale)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("case", sorted(_CASES))
def test_matmul_matches_scipy(case, dtype):
    m, n, offsets, k, block_sizes = _CASES[case]
    data, x, _ = _make_problem(m, n, offsets, k, dtype)
    y = dia_matmul(
        jnp.asarray(data, dtype),
        jnp.asarray(x, dtype),
        offsets=offsets,
        shape=(m, n),
        interpret=True,
        block_sizes=block_sizes,
    )
    assert y.shape == (m, k)
    _check_close(y, _dense(data, offsets, m, n) @ x, dtype)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("case", sorted(_CASES))
def test_sddmm_matches_einsum(case, dtype):
    m, n, offsets, k, block_sizes = _CASES[case]
    _, x, g = _make_problem(m, n, offsets, k, dtype)
    grad = dia_sddmm(
        jnp.asarray(g, dtype),
        jnp.asarray(x, dtype),
        offsets=offsets,
        shape=(m, n),
        interpret=True,
        block_sizes=block_sizes,
    )
    assert grad.shape == (len(offsets), n)
    expected = _sddmm_oracle(g, x, offsets, m, n)
    _check_close(grad, expected, dtype)
    assert not np.asarray(grad.astype(jnp.float64))[_ignored_slots(offsets, m, n)].any()


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.float64])
@pytest.mark.parametrize("case", ["tall-beyond-matrix", "wide-beyond-matrix"])
def test_interpret_dtypes(case, dtype):
    assert pallas_supports(dtype, "cpu")
    m, n, offsets, k, _ = _CASES[case]
    data, x, g = _make_problem(m, n, offsets, k, dtype)
    data, x, g = (jnp.asarray(a, dtype) for a in (data, x, g))
    kwargs = dict(offsets=offsets, shape=(m, n), interpret=True)
    expected = _dense(np.asarray(data.astype(jnp.complex128)), offsets, m, n)
    expected = expected @ np.asarray(x.astype(jnp.complex128))
    _check_close(dia_matmul(data, x, **kwargs), expected, dtype)
    x128, g128 = (np.asarray(a.astype(jnp.complex128)) for a in (x, g))
    _check_close(dia_sddmm(g, x, **kwargs), _sddmm_oracle(g128, x128, offsets, m, n), dtype)


@pytest.mark.parametrize("m, n, k", [(0, 4, 2), (4, 0, 2), (4, 4, 0)])
def test_empty(m, n, k):
    offsets = (-1, 0, 1)
    data = jnp.ones((3, n), jnp.float32)
    y = dia_matmul(data, jnp.ones((n, k), jnp.float32), offsets=offsets, shape=(m, n))
    assert y.shape == (m, k) and not y.any()
    grad = dia_sddmm(
        jnp.ones((m, k), jnp.float32), jnp.ones((n, k), jnp.float32), offsets=offsets, shape=(m, n)
    )
    assert grad.shape == (3, n) and not grad.any()


def test_shape_errors():
    data, x = jnp.ones((2, 4), jnp.float32), jnp.ones((4, 3), jnp.float32)
    with pytest.raises(ValueError, match="duplicate"):
        dia_matmul(data, x, offsets=(1, 1), shape=(4, 4))
    with pytest.raises(ValueError, match="data.shape"):
        dia_matmul(data, x, offsets=(0,), shape=(4, 4))
    with pytest.raises(ValueError, match="x.shape"):
        dia_matmul(data, x[:3], offsets=(0, 1), shape=(4, 4))
    with pytest.raises(ValueError, match="dtype"):
        dia_matmul(data, x.astype(jnp.float64), offsets=(0, 1), shape=(4, 4))
    with pytest.raises(ValueError, match="g.shape"):
        dia_sddmm(x[:3], x, offsets=(0, 1), shape=(4, 4))
    with pytest.raises(ValueError, match="platform"):
        dia_matmul(data, x, offsets=(0, 1), shape=(4, 4), platform="metal")


def test_block_sizes():
    with pytest.raises(ValueError, match="block_rows"):
        BlockSizes(block_rows=48)
    with pytest.raises(ValueError, match="block_rows"):
        BlockSizes(block_rows=16)
    with pytest.raises(ValueError, match="block_cols"):
        BlockSizes(block_cols=3)
    for platform in ("cuda", "rocm", "tpu", "cpu"):
        for k in (1, 7, 128, 1000):
            default = BlockSizes.get_default(platform=platform, num_cols=k)
            assert default.block_rows is not None and default.block_cols is not None


def test_pallas_supports():
    assert pallas_supports(jnp.float32, "cuda") and pallas_supports(jnp.bfloat16, "tpu")
    assert pallas_supports(jnp.float64, "cuda") and pallas_supports(jnp.float16, "cpu")
    assert not pallas_supports(jnp.float64, "tpu") and not pallas_supports(jnp.float16, "tpu")
    assert not pallas_supports(jnp.int32, "cpu")
    for platform in ("cuda", "rocm", "tpu", "cpu"):
        assert not pallas_supports(jnp.complex64, platform)
    with pytest.raises(ValueError, match="platform"):
        pallas_supports(jnp.float32, "gpu")


def _pallas_call_eqn(fn, *args, **kwargs):
    jaxpr = jax.make_jaxpr(functools.partial(fn, **kwargs))(*args)
    (eqn,) = [e for e in jaxpr.eqns if e.primitive.name == "pallas_call"]
    return eqn


@pytest.mark.parametrize("fn", [dia_matmul, dia_sddmm])
def test_offsets_are_not_operands(fn):
    m = n = 40
    first = jnp.ones((3, n), jnp.float32) if fn is dia_matmul else jnp.ones((m, 4), jnp.float32)
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
    matmul = jax.jit(dia_matmul, static_argnames=("offsets", "shape", "interpret"))
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


_CROSS_LOWERING = pytest.mark.skipif(
    jax.__version_info__ < (0, 12),
    reason="lowering for a platform the machine lacks needs JAX >= 0.12 (abstract devices)",
)
# JAX 0.11+ warns on every Triton lowering; the Triton path is still the one checkable here.
_IGNORE_TRITON_DEPRECATION = pytest.mark.filterwarnings(
    "ignore:The Pallas Triton backend is deprecated:DeprecationWarning"
)
_ROWS = 2**20
_STENCIL_5 = (-1024, -1, 0, 1, 1024)  # 2-D 5-point stencil on a 1024 x 1024 grid


def _lower(fn, offsets, k, dtype, platform):
    n = _ROWS
    first = (len(offsets), n) if fn is dia_matmul else (n, k)
    avals = (jax.ShapeDtypeStruct(first, dtype), jax.ShapeDtypeStruct((n, k), dtype))
    f = functools.partial(fn, offsets=offsets, shape=(n, n), platform=platform)
    if platform == "cuda":
        device = jax.sharding.AbstractDevice(
            device_kind="NVIDIA H100", num_cores=132, platform="cuda"
        )
        mesh = jax.sharding.AbstractMesh((1,), ("x",), abstract_device=device)
        with jax.sharding.use_abstract_mesh(mesh):
            return jax.jit(f).trace(*avals).lower(lowering_platforms=("cuda",)).as_text()
    return jax.jit(f).trace(*avals).lower(lowering_platforms=("tpu",)).as_text()


@_CROSS_LOWERING
@_IGNORE_TRITON_DEPRECATION
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("k", [1, 128])
@pytest.mark.parametrize("fn", [dia_matmul, dia_sddmm])
def test_lowers_for_cuda(fn, k, dtype):
    text = _lower(fn, _STENCIL_5, k, dtype, "cuda")
    assert "@__gpu$xla.gpu.triton" in text
    assert f'name = "{fn.__name__}"' in text
    block_rows = BlockSizes.get_default(platform="cuda", num_cols=k).block_rows
    assert f"grid_x = {_ROWS // block_rows} : i32" in text


@_CROSS_LOWERING
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("k", [1, 128])
@pytest.mark.parametrize("fn", [dia_matmul, dia_sddmm])
def test_lowers_for_tpu(fn, k, dtype):
    text = _lower(fn, _STENCIL_5, k, dtype, "tpu")
    assert "@tpu_custom_call" in text
    assert f'kernel_name = "{fn.__name__}"' in text
    assert "triton" not in text


@_CROSS_LOWERING
@_IGNORE_TRITON_DEPRECATION
@pytest.mark.parametrize("platform", ["cuda", "tpu"])
@pytest.mark.parametrize("fn", [dia_matmul, dia_sddmm])
def test_27_point_stencil_lowers(fn, platform):
    offsets = tuple(
        a * 4096 + b * 64 + c for a in (-1, 0, 1) for b in (-1, 0, 1) for c in (-1, 0, 1)
    )
    text = _lower(fn, offsets, 128, jnp.float32, platform)
    assert ("@__gpu$xla.gpu.triton" if platform == "cuda" else "@tpu_custom_call") in text
