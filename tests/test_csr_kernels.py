"""CSR Pallas kernels: interpret mode against scipy.sparse, and cross-lowering for cuda/tpu."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from helpers import tolerance

from jaxsparse.kernels import csr

PLATFORMS = ("cuda", "tpu")
# Small blocks so the tiny test matrices still take several loop steps and k blocks.
SMALL_BLOCKS = csr.BlockSizes(block_nnz=16, block_k=4, block_rows=8)


def _csr_from_lengths(rng, lengths, n, index_dtype=np.int32):
    """CSR arrays with the given row lengths and distinct, unsorted columns in each row."""
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(index_dtype)
    columns = [rng.choice(n, size=length, replace=False) for length in lengths]
    indices = np.concatenate([np.zeros(0, np.int64), *columns]).astype(index_dtype)
    data = rng.standard_normal(indices.shape[0])
    return data, indices, indptr


def make_matrix(kind, rng, index_dtype=np.int32):
    """`(data, indices, indptr, shape)` of one of the test structures."""
    if kind == "uniform":
        m, n = 20, 16
        lengths = rng.integers(0, 8, size=m)
    elif kind == "power_law":
        m, n = 40, 64
        lengths = np.minimum(rng.zipf(1.6, size=m), n)
    elif kind == "empty_rows":
        m, n = 24, 12
        lengths = rng.integers(1, 6, size=m) * (rng.random(m) < 0.4)
    elif kind == "all_empty":
        m, n = 9, 7
        lengths = np.zeros(m, np.int64)
    elif kind == "dense_row":
        m, n = 18, 60
        lengths = rng.integers(0, 2, size=m)
        lengths[5] = n
    elif kind == "tall":
        m, n = 33, 5
        lengths = rng.integers(0, 4, size=m)
    elif kind == "wide":
        m, n = 5, 70
        lengths = rng.integers(10, 40, size=m)
    else:
        raise ValueError(f"unknown {kind=}")
    data, indices, indptr = _csr_from_lengths(rng, lengths, n, index_dtype)
    return data, indices, indptr, (m, n)


def _as_jax(array, dtype):
    return jnp.asarray(
        np.asarray(array).astype(np.float64 if dtype == jnp.bfloat16 else dtype), dtype
    )


def _random_dense(rng, shape, dtype):
    values = rng.standard_normal(shape)
    if jnp.issubdtype(dtype, jnp.complexfloating):
        values = values + 1j * rng.standard_normal(shape)
    return _as_jax(values, dtype)


def _check_all_kernels(data, indices, indptr, shape, k, dtype, platform, block_sizes, rng):
    m, n = shape
    data = _random_dense(rng, data.shape, dtype) if data.shape[0] else jnp.zeros(0, dtype)
    x = _random_dense(rng, (n, k), dtype)
    g = _random_dense(rng, (m, k), dtype)
    indices_j, indptr_j = jnp.asarray(indices), jnp.asarray(indptr)
    kwargs = dict(shape=shape, interpret=True, platform=platform, block_sizes=block_sizes)

    # The reference sees the same (rounded) inputs, in a scipy-supported dtype.
    def host(a):
        return np.asarray(a.astype(jnp.float32) if a.dtype == jnp.bfloat16 else a)

    matrix = sp.csr_array((host(data), np.asarray(indices), np.asarray(indptr)), shape=shape)
    rows = np.repeat(np.arange(m), np.diff(np.asarray(indptr)))
    expected = {
        "matmul": matrix @ host(x),
        "transpose": matrix.T @ host(g),
        "sddmm": np.sum(host(g)[rows] * host(x)[np.asarray(indices)], axis=1),
    }
    actual = {
        "matmul": csr.csr_matmul(data, indices_j, indptr_j, x, **kwargs),
        "transpose": csr.csr_matmul_transpose(data, indices_j, indptr_j, g, **kwargs),
        "sddmm": csr.csr_sddmm(indices_j, indptr_j, g, x, **kwargs),
    }
    tol = tolerance(dtype)
    for name, want in expected.items():
        got = actual[name]
        assert got.dtype == dtype, name
        assert got.shape == want.shape, name
        scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
        np.testing.assert_allclose(host(got), want, rtol=tol, atol=tol * scale, err_msg=name)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize(
    "kind", ["uniform", "power_law", "empty_rows", "all_empty", "dense_row", "tall", "wide"]
)
def test_structures(kind, platform):
    rng = np.random.default_rng(0)
    data, indices, indptr, shape = make_matrix(kind, rng)
    _check_all_kernels(data, indices, indptr, shape, 5, jnp.float32, platform, SMALL_BLOCKS, rng)


# Every dtype, index dtype and k on the GPU kernels; on the TPU kernels, whose interpret mode
# issues one DMA per entry and is slow, each dtype and index dtype once.
DTYPE_CASES = [
    (dtype, index_dtype, k, "cuda")
    for dtype in (jnp.float32, jnp.bfloat16, jnp.float64)
    for index_dtype in (np.int32, np.int64)
    for k in (1, 6)
] + [
    (jnp.float32, np.int32, 1, "tpu"),
    (jnp.float32, np.int64, 6, "tpu"),
    (jnp.bfloat16, np.int32, 6, "tpu"),
]


DTYPE_CASE_IDS = [f"{jnp.dtype(d).name}-{np.dtype(i).name}-k{k}-{p}" for d, i, k, p in DTYPE_CASES]


@pytest.mark.parametrize(("dtype", "index_dtype", "k", "platform"), DTYPE_CASES, ids=DTYPE_CASE_IDS)
def test_dtypes(dtype, index_dtype, k, platform):
    if not csr.pallas_supports(dtype, platform):
        pytest.skip(f"{platform} kernels do not take {jnp.dtype(dtype).name}")
    rng = np.random.default_rng(1)
    data, indices, indptr, shape = make_matrix("power_law", rng, index_dtype)
    # Default blocks on GPU; small ones on TPU, whose interpret mode issues one DMA per entry.
    block_sizes = SMALL_BLOCKS if platform == "tpu" else None
    _check_all_kernels(data, indices, indptr, shape, k, dtype, platform, block_sizes, rng)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_repeated_columns_across_rows_under_jit(platform):
    # Every row uses column 0, so the transposed product sums many entries into one row.
    indptr = jnp.array([0, 2, 2, 5, 6], jnp.int32)
    indices = jnp.array([3, 0, 0, 2, 1, 0], jnp.int32)
    data = jnp.arange(1.0, 7.0, dtype=jnp.float32)
    g = jnp.arange(8.0, dtype=jnp.float32).reshape(4, 2)
    transpose = jax.jit(
        functools.partial(csr.csr_matmul_transpose, shape=(4, 4), interpret=True, platform=platform)
    )
    dense = np.zeros((4, 4), np.float32)
    rows = np.repeat(np.arange(4), np.diff(np.asarray(indptr)))
    dense[rows, np.asarray(indices)] = np.asarray(data)
    np.testing.assert_allclose(transpose(data, indices, indptr, g), dense.T @ np.asarray(g))


def test_pallas_supports():
    assert not csr.pallas_supports(jnp.complex64, "cpu")
    assert csr.pallas_supports(jnp.float16, "cpu")
    assert csr.pallas_supports(jnp.float64, "cuda")
    assert not csr.pallas_supports(jnp.complex64, "cuda")
    assert csr.pallas_supports(jnp.bfloat16, "tpu")
    assert not csr.pallas_supports(jnp.float64, "tpu")
    assert not csr.pallas_supports(jnp.int32, "cpu")
    assert not csr.pallas_supports(jnp.float32, "metal")


def test_block_sizes_checks():
    with pytest.raises(ValueError, match="block_nnz"):
        csr.BlockSizes(block_nnz=24, block_k=4, block_rows=8)
    with pytest.raises(ValueError, match="block_rows"):
        csr.BlockSizes(block_nnz=16, block_k=4, block_rows=4)
    assert csr.BlockSizes.get_default(3, "cuda").block_k == 4
    assert csr.BlockSizes.get_default(1000, "cuda").block_k == 64


def test_shape_errors():
    data = jnp.ones(3, jnp.float32)
    indices = jnp.array([0, 1, 2], jnp.int32)
    indptr = jnp.array([0, 1, 3], jnp.int32)
    x = jnp.ones((3, 2), jnp.float32)
    with pytest.raises(ValueError, match="indptr.shape"):
        csr.csr_matmul(data, indices, indptr, x, shape=(3, 3), interpret=True)
    with pytest.raises(ValueError, match="x.shape"):
        csr.csr_matmul(data, indices, indptr, x[:2], shape=(2, 3), interpret=True)
    with pytest.raises(ValueError, match="indices.dtype"):
        csr.csr_matmul(data, indices, indptr.astype(jnp.int64), x, shape=(2, 3), interpret=True)
    with pytest.raises(ValueError, match="x.dtype"):
        csr.csr_matmul(data, indices, indptr, x.astype(jnp.float64), shape=(2, 3), interpret=True)
    with pytest.raises(ValueError, match="platform"):
        csr.csr_matmul(data, indices, indptr, x, shape=(2, 3), platform="metal")


# ----------------------------------------------------------------------------------------
# Cross-lowering at a realistic size: lowering only, nothing runs.

BIG_M = BIG_N = 10**6
BIG_NNZ = 10**7
LOWERING_DEVICES = {"cuda": ("NVIDIA H100", 132), "tpu": ("TPU v5p", 1)}
CUSTOM_CALL_MARKERS = {"cuda": "__gpu$xla.gpu.triton", "tpu": "tpu_custom_call"}


def _lower(kernel, platform, k, dtype):
    struct = jax.ShapeDtypeStruct
    data = struct((BIG_NNZ,), dtype)
    indices = struct((BIG_NNZ,), jnp.int32)
    indptr = struct((BIG_M + 1,), jnp.int32)
    x, g = struct((BIG_N, k), dtype), struct((BIG_M, k), dtype)
    options = dict(shape=(BIG_M, BIG_N), platform=platform)
    function, args = {
        "matmul": (csr.csr_matmul, (data, indices, indptr, x)),
        "transpose": (csr.csr_matmul_transpose, (data, indices, indptr, g)),
        "sddmm": (csr.csr_sddmm, (indices, indptr, g, x)),
    }[kernel]
    device = jax.sharding.AbstractDevice(*LOWERING_DEVICES[platform], platform=platform)
    mesh = jax.sharding.AbstractMesh((1,), ("x",), abstract_device=device)
    with jax.sharding.use_abstract_mesh(mesh):
        traced = jax.jit(functools.partial(function, **options)).trace(*args)
        return traced.lower(lowering_platforms=(platform,)).as_text()


@pytest.mark.skipif(
    jax.__version_info__ < (0, 12), reason="cross-lowering for cuda/tpu needs JAX >= 0.12"
)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("k", [1, 128])
@pytest.mark.parametrize("kernel", ["matmul", "transpose", "sddmm"])
@pytest.mark.parametrize("platform", PLATFORMS)
def test_cross_lowering(platform, kernel, k, dtype):
    text = _lower(kernel, platform, k, dtype)
    assert CUSTOM_CALL_MARKERS[platform] in text
    assert ("csr_sddmm" if kernel == "sddmm" else "csr_matmul") in text
    # The result keeps the caller's dtype and shape.
    rows = {"matmul": BIG_M, "transpose": BIG_N, "sddmm": BIG_NNZ}[kernel]
    element = {jnp.float32: "f32", jnp.bfloat16: "bf16"}[dtype]
    result = f"tensor<{rows}x{k}x{element}>" if kernel != "sddmm" else f"tensor<{rows}x{element}>"
    assert f"-> ({result}" in text or f"-> {result}" in text
