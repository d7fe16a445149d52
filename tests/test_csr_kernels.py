"""The CSR Pallas kernels, one module per family (`kernels/triton_csr.py`,
`kernels/mosaic_tpu_csr.py`): interpret mode against scipy over the registry's CSR
matrices, and cross-lowering for cuda and tpu."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from helpers import CSR_MATRICES, slow_unless, tolerance
from lowering import KERNEL_CALLS, NEEDS_CROSS_LOWERING, lower

from jaxsparse.kernels import mosaic_tpu_csr, triton_csr, xla_csr
from jaxsparse.kernels._bounds_check import out_of_bounds_reports
from jaxsparse.kernels._csr_common import nan_unless

# Each family's kernels and its platform; small blocks so the tiny test matrices still
# take several loop steps (and column blocks on Triton), and on Triton rows of more than 4
# entries are long rows.
FAMILIES = {
    "triton": (
        triton_csr,
        "cuda",
        triton_csr.BlockSizes(
            block_rows=4,
            lanes=2,
            row_steps=2,
            long_lanes=8,
            block_k=4,
            stream_entries=True,
            keep_operand=True,
        ),
        (triton_csr.csr_matmul_triton, triton_csr.csr_matmul_t_triton, triton_csr.csr_sddmm_triton),
    ),
    "mosaic_tpu": (
        mosaic_tpu_csr,
        "tpu",
        mosaic_tpu_csr.BlockSizes(block_nnz=16, block_rows=8),
        (
            mosaic_tpu_csr.csr_matmul_mosaic_tpu,
            mosaic_tpu_csr.csr_matmul_t_mosaic_tpu,
            mosaic_tpu_csr.csr_sddmm_mosaic_tpu,
        ),
    ),
}


def _random_dense(rng, shape, dtype):
    return jnp.asarray(rng.standard_normal(shape), jnp.float64).astype(dtype)


def _host(a):
    return np.asarray(a.astype(jnp.float32) if a.dtype == jnp.bfloat16 else a)


def _check_all_kernels(family, matrix, k, dtype, block_sizes, rng):
    """Product, transposed product and sampled product of `family` against scipy."""
    _, platform, _, (matmul, matmul_t, sddmm) = FAMILIES[family]
    m, n = matrix.shape
    data, indices, indptr = matrix.data.astype(dtype), matrix.indices, matrix.indptr
    x = _random_dense(rng, (n, k), dtype)
    g = _random_dense(rng, (m, k), dtype)
    options = dict(shape=(m, n), interpret=True, platform=platform, block_sizes=block_sizes)
    twin = sp.csr_array((_host(data), np.asarray(indices), np.asarray(indptr)), shape=(m, n))
    rows = np.repeat(np.arange(m), np.diff(np.asarray(indptr)))
    expected = {
        "matmul": twin @ _host(x),
        "matmul_t": twin.T @ _host(g),
        "sddmm": np.sum(_host(g)[rows] * _host(x)[np.asarray(indices)], axis=1),
    }

    def kernels(data, x, g, indices, indptr):  # one program, compiled once
        return {
            "matmul": matmul(data, x, indices, indptr, **options),
            "matmul_t": matmul_t(data, g, indices, indptr, **options),
            "sddmm": sddmm(g, x, indices, indptr, **options),
        }

    actual = jax.jit(kernels)(data, x, g, indices, indptr)
    tol = tolerance(dtype)
    for name, want in expected.items():
        got = actual[name]
        assert got.dtype == dtype, name
        assert got.shape == want.shape, name
        scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
        np.testing.assert_allclose(_host(got), want, rtol=tol, atol=tol * scale, err_msg=name)


# The fast suite keeps two structures per family (one with long rows, one with empty
# rows); the rest run in `make test-slow`.
_FAST_STRUCTURES = ("csr-power-law",)
STRUCTURE_CASES = [
    pytest.param(
        case,
        family,
        id=f"{case.name}-{family}",
        marks=slow_unless(case.name in _FAST_STRUCTURES),
    )
    for case in CSR_MATRICES
    for family in FAMILIES
]


@pytest.mark.parametrize(("case", "family"), STRUCTURE_CASES)
def test_structures(case, family):
    rng = np.random.default_rng(0)
    matrix, _ = case.make(rng, jnp.float32)
    _check_all_kernels(family, matrix, 5, jnp.float32, FAMILIES[family][2], rng)


# Every dtype with each index dtype on Triton (k = 1 and 6); on Mosaic TPU, whose interpret
# mode issues one DMA per entry and is slow, each dtype and index dtype once.
DTYPE_CASES = [
    (dtype, index_dtype, k, "triton")
    for dtype in (jnp.float32, jnp.bfloat16, jnp.float64)
    for index_dtype, k in ((np.int32, 1), (np.int64, 6))
] + [
    (jnp.float32, np.int32, 1, "mosaic_tpu"),
    (jnp.float32, np.int64, 6, "mosaic_tpu"),
    (jnp.bfloat16, np.int32, 6, "mosaic_tpu"),
]
DTYPE_CASE_IDS = [f"{jnp.dtype(d).name}-{np.dtype(i).name}-k{k}-{f}" for d, i, k, f in DTYPE_CASES]
POWER_LAW = next(case for case in CSR_MATRICES if case.structure == "power-law")


# Fast: float32 with int32 indices on each family; the rest run in `make test-slow`.
_FAST_DTYPES = {(jnp.float32, np.int32)}
DTYPE_PARAMS = [
    pytest.param(
        *case,
        id=case_id,
        marks=slow_unless((case[0], case[1]) in _FAST_DTYPES),
    )
    for case, case_id in zip(DTYPE_CASES, DTYPE_CASE_IDS, strict=True)
]


@pytest.mark.parametrize(("dtype", "index_dtype", "k", "family"), DTYPE_PARAMS)
def test_dtypes(dtype, index_dtype, k, family):
    module, platform, small_blocks, _ = FAMILIES[family]
    assert module.supports(dtype, platform)
    rng = np.random.default_rng(1)
    matrix, _ = POWER_LAW.make(rng, jnp.float32, index_dtype)
    # Default blocks on Triton; small ones on Mosaic TPU (one DMA per entry when interpreted).
    block_sizes = small_blocks if family == "mosaic_tpu" else None
    _check_all_kernels(family, matrix, k, dtype, block_sizes, rng)


# The fast suite keeps the whole tiles (8); the partial ones (6) run in `make test-slow`.
@pytest.mark.parametrize("k", [8, pytest.param(6, marks=pytest.mark.slow)])
def test_vector_loads_take_whole_column_tiles_only(k):
    """`vector_loads`: where the column tiles divide `k` (8 columns in tiles of 4) the
    columns go unclamped and unmasked; elsewhere (6) the switch leaves them as they are.
    Tiles of one column take them so without the switch. All three kernels match scipy
    either way, on power-law rows with long ones."""
    rng = np.random.default_rng(5)
    matrix, _ = POWER_LAW.make(rng, jnp.float32)
    blocks = dataclasses.replace(FAMILIES["triton"][2], vector_loads=True)
    m, n = matrix.shape
    tiles, _ = triton_csr._tiles(
        "cpu", True, blocks, shape=(m, n), nnz=matrix.indices.shape[0], k=k, batch=1
    )
    assert tiles.whole_column_tiles == (k == 8)
    one_column, _ = triton_csr._tiles(
        "cpu", True, None, shape=(m, n), nnz=matrix.indices.shape[0], k=1, batch=1
    )
    assert one_column.whole_column_tiles
    _check_all_kernels("triton", matrix, k, jnp.float32, blocks, rng)


@pytest.mark.parametrize("family", FAMILIES)
def test_repeated_columns_across_rows_under_jit(family):
    # Every row uses column 0, so the transposed product sums many entries into one row.
    _, platform, _, (_, matmul_t, _) = FAMILIES[family]
    indptr = jnp.array([0, 2, 2, 5, 6], jnp.int32)
    indices = jnp.array([3, 0, 0, 2, 1, 0], jnp.int32)
    data = jnp.arange(1.0, 7.0, dtype=jnp.float32)
    g = jnp.arange(8.0, dtype=jnp.float32).reshape(4, 2)
    transpose = jax.jit(
        functools.partial(matmul_t, shape=(4, 4), interpret=True, platform=platform)
    )
    dense = np.zeros((4, 4), np.float32)
    rows = np.repeat(np.arange(4), np.diff(np.asarray(indptr)))
    dense[rows, np.asarray(indices)] = np.asarray(data)
    np.testing.assert_allclose(transpose(data, g, indices, indptr), dense.T @ np.asarray(g))


def test_supports():
    assert not triton_csr.supports(jnp.complex64, "cpu")
    assert triton_csr.supports(jnp.float16, "cpu")
    assert triton_csr.supports(jnp.float64, "cuda")
    assert not triton_csr.supports(jnp.complex64, "cuda")
    assert not triton_csr.supports(jnp.int32, "cpu")
    assert not triton_csr.supports(jnp.float32, "tpu")
    assert mosaic_tpu_csr.supports(jnp.bfloat16, "tpu")
    assert not mosaic_tpu_csr.supports(jnp.float64, "tpu")
    assert not mosaic_tpu_csr.supports(jnp.float32, "cuda")


def test_block_sizes():
    with pytest.raises(ValueError, match="lanes"):
        triton_csr.BlockSizes(lanes=24)
    with pytest.raises(ValueError, match="row_steps"):
        triton_csr.BlockSizes(row_steps=0)
    with pytest.raises(ValueError, match="unroll"):
        triton_csr.BlockSizes(unroll=0)
    with pytest.raises(ValueError, match="chunk_steps"):
        triton_csr.BlockSizes(chunk_steps=-1)
    with pytest.raises(ValueError, match="num_warps"):
        triton_csr.BlockSizes(num_warps=6)
    with pytest.raises(ValueError, match="num_stages"):
        triton_csr.BlockSizes(num_stages=0)
    with pytest.raises(TypeError, match="keep_operand"):
        triton_csr.BlockSizes(keep_operand=1)
    with pytest.raises(ValueError, match="block_rows"):
        mosaic_tpu_csr.BlockSizes(block_rows=4)
    with pytest.raises(ValueError, match="block_nnz"):
        mosaic_tpu_csr.BlockSizes(block_nnz=4)
    assert triton_csr.BlockSizes.get_default(platform="cuda", num_cols=3).block_k == 4
    assert triton_csr.BlockSizes.get_default(platform="cuda", num_cols=1000).block_k == 64
    partial = triton_csr.BlockSizes(block_k=8, num_warps=4).filled(platform="cuda", num_cols=3)
    assert partial.block_k == 8 and partial.num_warps == 4 and partial.lanes is not None
    # A row's lanes follow half the mean row length; long rows start past 8 steps and 64
    # entries.
    for mean, lanes in ((0.5, 1), (1.0, 1), (5.0, 2), (7.99, 4), (11.8, 4), (300.0, 32)):
        blocks = triton_csr.BlockSizes.get_default(
            platform="cuda", num_cols=1, mean_row_length=mean
        )
        assert blocks.lanes == lanes and blocks.unroll == 1 and blocks.chunk_steps == 0
        assert blocks.lanes * blocks.row_steps >= max(64, 8 * lanes)
        assert 8 <= blocks.block_rows <= 128
        assert blocks.block_rows * blocks.lanes <= 1024
    # With column tiles of 64, one lane a row whatever the rows' length.
    for mean in (5.0, 11.8, 300.0):
        blocks = triton_csr.BlockSizes.get_default(
            platform="cuda", num_cols=64, mean_row_length=mean
        )
        assert (blocks.block_rows, blocks.lanes, blocks.block_k) == (16, 1, 64)
        assert blocks.lanes * blocks.row_steps >= 64
    for module, platform in ((triton_csr, "metal"), (mosaic_tpu_csr, "cuda")):
        with pytest.raises(ValueError, match="platform"):
            module.BlockSizes.get_default(platform=platform, num_cols=1)


@pytest.mark.parametrize("family", FAMILIES)
def test_shape_errors(family):
    _, platform, _, (matmul, _, _) = FAMILIES[family]
    data = jnp.ones(3, jnp.float32)
    indices = jnp.array([0, 1, 2], jnp.int32)
    indptr = jnp.array([0, 1, 3], jnp.int32)
    x = jnp.ones((3, 2), jnp.float32)
    run = functools.partial(matmul, interpret=True, platform=platform)
    with pytest.raises(ValueError, match="indptr.shape"):
        run(data, x, indices, indptr, shape=(3, 3))
    with pytest.raises(ValueError, match="x.shape"):
        run(data, x[:2], indices, indptr, shape=(2, 3))
    with pytest.raises(ValueError, match="indices.dtype"):
        run(data, x, indices, indptr.astype(jnp.int64), shape=(2, 3))
    with pytest.raises(ValueError, match="x.dtype"):
        run(data, x.astype(jnp.float64), indices, indptr, shape=(2, 3))
    with pytest.raises(ValueError, match="platform"):
        matmul(data, x, indices, indptr, shape=(2, 3), platform="metal")


# ----------------------------------------------------------------------------------------
# Cross-lowering at a realistic size: lowering only, nothing runs.

BIG_M = BIG_N = 10**6
BIG_NNZ = 10**7


def _lower(family, member, k, dtype):
    _, platform, _, (matmul, matmul_t, sddmm) = FAMILIES[family]
    struct = jax.ShapeDtypeStruct
    data = struct((BIG_NNZ,), dtype)
    indices = struct((BIG_NNZ,), jnp.int32)
    indptr = struct((BIG_M + 1,), jnp.int32)
    x, g = struct((BIG_N, k), dtype), struct((BIG_M, k), dtype)
    function, args = {
        "matmul": (matmul, (data, x, indices, indptr)),
        "matmul_t": (matmul_t, (data, g, indices, indptr)),
        "sddmm": (sddmm, (g, x, indices, indptr)),
    }[member]
    fn = functools.partial(function, shape=(BIG_M, BIG_N), platform=platform)
    return platform, lower(fn, args, platform)


@NEEDS_CROSS_LOWERING
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("k", [1, 128])
@pytest.mark.parametrize("member", ["matmul", "matmul_t", "sddmm"])
@pytest.mark.parametrize("family", FAMILIES)
def test_cross_lowering(family, member, k, dtype):
    platform, text = _lower(family, member, k, dtype)
    assert KERNEL_CALLS[platform] in text
    assert ("csr_sddmm" if member == "sddmm" else "csr_matmul") in text
    # The result keeps the caller's dtype and shape.
    rows = {"matmul": BIG_M, "matmul_t": BIG_N, "sddmm": BIG_NNZ}[member]
    element = {jnp.float32: "f32", jnp.bfloat16: "bf16"}[dtype]
    result = f"tensor<{rows}x{k}x{element}>" if member != "sddmm" else f"tensor<{rows}x{element}>"
    assert f"-> ({result}" in text or f"-> {result}" in text


# ----------------------------------------------------------------------------------------
# Invalid structures: NaN, never an out-of-bounds access (Triton; the module docstring).

# (name, indptr, indices, rows whose product is NaN) for a 4 x 5 matrix with 8 entries.
GOOD_INDPTR, GOOD_INDICES = [0, 2, 3, 6, 8], [0, 1, 2, 3, 4, 0, 1, 2]
INVALID_STRUCTURES = [
    ("column-past-the-end", GOOD_INDPTR, [0, 1, 9, 3, 4, 0, 1, 2], [1]),
    ("column-past-the-end-in-a-long-row", GOOD_INDPTR, [0, 1, 2, 3, 9, 0, 1, 2], [2]),
    ("negative-column", GOOD_INDPTR, [0, -1, 2, 3, 4, 0, 1, 2], [0]),
    ("huge-column", GOOD_INDPTR, [0, 1, 2, 3, 4, 0, 2**31 - 1, 2], [3]),
    ("decreasing-indptr", [0, 4, 3, 6, 8], GOOD_INDICES, [1]),
    ("indptr-past-nnz", [0, 2, 3, 6, 100], GOOD_INDICES, [3]),
    ("negative-indptr", [0, 2, -7, 6, 8], GOOD_INDICES, [1, 2]),
    ("indptr-not-from-zero", [1, 2, 3, 6, 8], GOOD_INDICES, [0]),
    ("indptr-short-of-nnz", [0, 2, 3, 5, 6], GOOD_INDICES, [3]),
]


# int64 columns past int32, which JAX's gathers would read as column 1 (x64 is on).
WIDE_STRUCTURES = [("column-past-int32", GOOD_INDPTR, [0, 1, 2, 3, 4, 0, 2**32 + 1, 2], [3])]


def _invalid_case(name):
    case = next(c for c in INVALID_STRUCTURES + WIDE_STRUCTURES if c[0] == name)
    _, indptr, indices, bad_rows = case
    dtype = jnp.int64 if case in WIDE_STRUCTURES else jnp.int32
    return jnp.array(indptr, dtype), jnp.array(indices, dtype), bad_rows


def _expected_rows(indptr, indices, x, bad_rows):
    """The product of the valid rows (all-ones values), NaN in `bad_rows`."""
    expected = np.zeros((4, x.shape[1]))
    for row in range(4):
        if row in bad_rows:
            expected[row] = np.nan
        else:
            expected[row] = np.asarray(x)[np.asarray(indices[indptr[row] : indptr[row + 1]])].sum(0)
    return expected


# A bad column in the fast suite (every kernel reads through it); the rest `slow`.
_INVALID_FAST = ("column-past-the-end",)


@pytest.mark.parametrize(
    "name",
    [pytest.param(c[0], marks=slow_unless(c[0] in _INVALID_FAST)) for c in INVALID_STRUCTURES],
)
def test_invalid_structures_give_nan_rows(name):
    indptr, indices, bad_rows = _invalid_case(name)
    data = jnp.ones(8, jnp.float32)
    x = jnp.asarray(np.random.default_rng(2).standard_normal((5, 3)), jnp.float32)
    g = jnp.ones((4, 3), jnp.float32)
    # Blocks of 2 rows, long rows past 2 entries: short and long rows meet the bad rows.
    blocks = triton_csr.BlockSizes(block_rows=2, lanes=1, row_steps=2)
    options = dict(shape=(4, 5), interpret=True, platform="cuda", block_sizes=blocks)
    # And long rows summed by chunks of two entries: the row of 3 from entry 3 starts
    # inside a chunk (slot 1) and ends inside the next (slot 0).
    by_chunks = dataclasses.replace(blocks, long_lanes=2, chunk_steps=1)
    chunked = {**options, "block_sizes": by_chunks}

    def every_kernel(data, x, g, indices, indptr):
        return (
            triton_csr.csr_matmul_triton(data, x, indices, indptr, **options),
            # One column a tile: a bad column's value is NaN instead of a flag.
            triton_csr.csr_matmul_triton(data, x[:, :1], indices, indptr, **options),
            triton_csr.csr_matmul_triton(data, x, indices, indptr, **chunked),
            triton_csr.csr_matmul_triton(data, x[:, :1], indices, indptr, **chunked),
            *_gradient_kernels(data, x, g, indices, indptr, options),
            triton_csr.csr_matmul_t_triton(data, g, indices, indptr, **options),
        )

    # One program for all (under `jit` as a user's would be), compiled once.
    with out_of_bounds_reports() as reports:
        results = jax.tree.map(np.asarray, jax.jit(every_kernel)(data, x, g, indices, indptr))
    got, one_column, got_by_chunks, one_column_by_chunks, *_ = results
    sampled, transposed, one_pass, sorted_t = results[4:]
    assert reports == []
    expected = _expected_rows(indptr, indices, x, bad_rows)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    np.testing.assert_allclose(one_column, expected[:, :1], rtol=1e-6)
    # By chunks: the same, but where `indptr` decreases the search may miss the chunks of
    # a valid row longer than a chunk, which then is NaN too (the module docstring).
    bounds = np.asarray(indptr)
    lengths = np.diff(bounds)
    valid = (bounds[:-1] >= 0) & (bounds[1:] <= 8) & (lengths >= 0)
    chunk = by_chunks.long_lanes * by_chunks.chunk_steps
    row_cap = blocks.lanes * blocks.row_steps
    may_miss = valid & (lengths > max(chunk, row_cap)) & (np.diff(bounds) < 0).any()
    for result, columns in ((got_by_chunks, 3), (one_column_by_chunks, 1)):
        np.testing.assert_allclose(result[~may_miss], expected[~may_miss, :columns], rtol=1e-6)
        missed = np.isnan(result[may_miss]).all(axis=1)
        np.testing.assert_allclose(
            result[may_miss][~missed], expected[may_miss][~missed, :columns], rtol=1e-6
        )
    # The sampled product: NaN at an entry with a bad column; everywhere for bad bounds.
    bad_columns = (np.asarray(indices) < 0) | (np.asarray(indices) >= 5)
    if bad_columns.any():
        np.testing.assert_array_equal(np.isnan(sampled), bad_columns)
    else:
        assert np.isnan(sampled).all()
    # The atomic transposed product: NaN everywhere (bad columns in short and long rows).
    assert np.isnan(transposed).all()
    # The gradient step in one pass: the sampled product's values and NaN, the transposed
    # product's NaN.
    np.testing.assert_allclose(np.asarray(one_pass[0]), sampled, rtol=1e-6)
    assert np.isnan(np.asarray(one_pass[1])).all()
    # So is the one on the sorted transposed structure (interpret mode, half precision).
    assert np.isnan(sorted_t).all()


def _gradient_kernels(data, x, g, indices, indptr, options):
    """The sampled product, the transposed product with atomics and the gradient step in
    one pass (interpret mode: inside `out_of_bounds_reports`)."""
    return (
        triton_csr.csr_sddmm_triton(g, x, indices, indptr, **options),
        _transposed_with_atomics(data, g, indices, indptr, options),
        triton_csr._pullback_in_one_pass(g, data, x, indices, indptr, **options),
    )


# The chunks' programs of the gradient kernels on every invalid structure: `slow`, which CI
# runs (the fast suite checks those programs on a valid structure, below).
@pytest.mark.slow
@pytest.mark.parametrize("name", [c[0] for c in INVALID_STRUCTURES])
def test_invalid_structures_give_nan_in_the_gradients_by_chunks(name):
    """`_check_gradients_by_chunks` in interpret mode, reading and writing nothing outside."""
    with out_of_bounds_reports() as reports:
        _check_gradients_by_chunks(name, interpret=True)
    assert reports == []


def _check_gradients_by_chunks(name, interpret):
    """The gradient kernels with the row of 3 entries taken by chunks of 2 (it starts
    inside one chunk and fills the next, so both slots are used): NaN at a sampled
    entry with a bad column, and everywhere for bad bounds, whichever program meets them
    (a bad column in that row is met by a chunk's program); the transposed products NaN
    everywhere."""
    indptr, indices, _ = _invalid_case(name)
    data = jnp.ones(8, jnp.float32)
    x = jnp.asarray(np.random.default_rng(2).standard_normal((5, 3)), jnp.float32)
    g = jnp.asarray(np.random.default_rng(3).standard_normal((4, 3)), jnp.float32)
    blocks = triton_csr.BlockSizes(block_rows=2, lanes=1, row_steps=2, long_lanes=2, chunk_steps=1)
    options = dict(shape=(4, 5), interpret=interpret, platform="cuda", block_sizes=blocks)
    kernels = jax.jit(functools.partial(_gradient_kernels, options=options))
    sampled, transposed, (one_pass_sampled, one_pass_transposed) = jax.tree.map(
        np.asarray, kernels(data, x, g, indices, indptr)
    )
    columns = np.asarray(indices)
    bad_columns = (columns < 0) | (columns >= 5)
    if bad_columns.any():  # the bounds are GOOD_INDPTR's
        rows = np.repeat(np.arange(4), np.diff(GOOD_INDPTR))
        inside = np.clip(columns, 0, 4)
        expected = np.where(
            bad_columns, np.nan, np.sum(np.asarray(g)[rows] * np.asarray(x)[inside], axis=1)
        )
        np.testing.assert_allclose(sampled, expected, rtol=1e-6)
    else:
        assert np.isnan(sampled).all()
    np.testing.assert_allclose(one_pass_sampled, sampled, rtol=1e-6)
    assert np.isnan(transposed).all() and np.isnan(one_pass_transposed).all()


@pytest.mark.parametrize("name", [c[0] for c in INVALID_STRUCTURES + WIDE_STRUCTURES])
def test_invalid_structures_on_the_xla_path_give_nan(name):
    """The portable XLA path: a bad column makes its row (and its sampled entry) NaN and
    all of the transposed product; bad bounds make every element NaN."""
    indptr, indices, bad_rows = _invalid_case(name)
    data, shape = jnp.ones(8, jnp.float32), (4, 5)
    x = jnp.asarray(np.random.default_rng(2).standard_normal((5, 3)), jnp.float32)
    g = jnp.ones((4, 3), jnp.float32)
    bad_columns = (np.asarray(indices) < 0) | (np.asarray(indices) >= 5)
    results = jax.jit(
        lambda data, x, g, indices, indptr: (
            xla_csr.csr_matmul_xla(data, x, indices, indptr, shape=shape),
            xla_csr.csr_sddmm_xla(g, x, indices, indptr, shape=shape),
            xla_csr.csr_matmul_t_xla(data, g, indices, indptr, shape=shape),
        )
    )(data, x, g, indices, indptr)
    got, sampled, transposed = (np.asarray(result) for result in results)
    if bad_columns.any():
        expected = _expected_rows(indptr, indices, x, bad_rows)
        np.testing.assert_allclose(got, expected, rtol=1e-6)
        np.testing.assert_array_equal(np.isnan(sampled), bad_columns)
    else:
        assert np.isnan(got).all() and np.isnan(sampled).all()
    assert np.isnan(transposed).all()


@pytest.mark.parametrize(
    "name",
    [pytest.param(c[0], marks=slow_unless(c[0] in _INVALID_FAST)) for c in INVALID_STRUCTURES],
)
def test_invalid_structures_on_the_mosaic_tpu_kernels_give_nan(name):
    """Every DMA position is clamped inside its array (the TPU interpreter raises on a
    read outside) and an invalid structure makes every element of a result NaN."""
    from jax.experimental.pallas import tpu as pltpu

    indptr, indices, _ = _invalid_case(name)
    x = jnp.asarray(np.random.default_rng(2).standard_normal((5, 3)), jnp.float32)
    data, g = jnp.ones(8, jnp.float32), jnp.ones((4, 3), jnp.float32)
    options = dict(shape=(4, 5), interpret=pltpu.InterpretParams(out_of_bounds_reads="raise"))
    results = (
        mosaic_tpu_csr.csr_matmul_mosaic_tpu(data, x, indices, indptr, **options),
        mosaic_tpu_csr.csr_sddmm_mosaic_tpu(g, x, indices, indptr, **options),
        mosaic_tpu_csr.csr_matmul_t_mosaic_tpu(data, g, indices, indptr, **options),
    )
    for result in results:
        assert np.isnan(np.asarray(result)).all()


def _transposed_with_atomics(data, g, indices, indptr, options):
    """The GPU's transposed product (atomic scatter kernels), run in interpret mode: only
    inside `out_of_bounds_reports`, whose `atomic_add` interpret mode can run."""
    kernel = triton_csr._matmul_t_rows_kernel
    shape = options["shape"]
    rest = {key: value for key, value in options.items() if key != "shape"}
    return triton_csr._product(kernel, "csr_matmul_t", data, g, indices, indptr, shape, **rest)


# k = 1's path (lanes summed after the loop) is the default's, which every kernel test runs.
@pytest.mark.parametrize("k", [pytest.param(1, marks=pytest.mark.slow), 40])
def test_long_rows_sum_their_lanes_after_the_loop_or_every_step(k):
    """A long row's partial sums: carried per lane and summed after its loop while the tile
    is small (k = 1), summed every step past `_LONG_TILE` values (16 lanes of 40 columns),
    both against scipy on rows of up to 200 entries between short and empty ones."""
    lengths = np.array([1, 0, 200, 3, 90, 2, 0, 150])
    m, n = lengths.size, 37
    rng = np.random.default_rng(4)
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    indices = rng.integers(0, n, indptr[-1])
    data, x = rng.standard_normal(indptr[-1]), rng.standard_normal((n, k))
    blocks = triton_csr.BlockSizes(block_rows=2, lanes=1, row_steps=2)
    tiles, _ = triton_csr._tiles("cpu", True, blocks, shape=(m, n), nnz=indptr[-1], k=k, batch=1)
    assert (tiles.long_lanes * tiles.block_k <= triton_csr._LONG_TILE) == (k == 1)
    got = triton_csr.csr_matmul_triton(
        jnp.asarray(data),
        jnp.asarray(x),
        jnp.asarray(indices, jnp.int32),
        jnp.asarray(indptr, jnp.int32),
        shape=(m, n),
        interpret=True,
        block_sizes=blocks,
    )
    expected = sp.csr_array((data, indices, indptr), shape=(m, n)) @ x
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-12, atol=1e-12)


def test_atomic_transposed_product_walks_several_long_rows_of_a_block():
    """The GPU's transposed product (atomic scatter) on blocks holding several long rows
    between short and empty ones (interpret mode adds the atomics' lanes one by one)."""
    lengths = np.array([1, 9, 0, 12, 2, 7, 5, 0])
    m, nnz = lengths.size, int(lengths.sum())
    rng = np.random.default_rng(3)
    indptr = jnp.asarray(np.concatenate([[0], np.cumsum(lengths)]), jnp.int32)
    indices = jnp.asarray(rng.permutation(nnz), jnp.int32)
    data = jnp.asarray(rng.standard_normal(nnz), jnp.float32)
    g = jnp.asarray(rng.standard_normal((m, 3)), jnp.float32)
    # Blocks of 4 rows, long past 4 entries: rows 1, 3 and 5 of two blocks are long.
    blocks = triton_csr.BlockSizes(block_rows=4, lanes=2, row_steps=2, long_lanes=4)
    options = dict(shape=(m, nnz), interpret=True, platform="cuda", block_sizes=blocks)
    with out_of_bounds_reports() as reports:
        got = _transposed_with_atomics(data, g, indices, indptr, options)
    assert reports == []
    twin = sp.csr_array((np.asarray(data), np.asarray(indices), np.asarray(indptr)), (m, nnz))
    np.testing.assert_allclose(np.asarray(got), twin.T @ np.asarray(g), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("unroll", [3, pytest.param(2, marks=pytest.mark.slow)])
def test_unrolled_loops_match_scipy_and_read_nothing_outside(unroll):
    """`unroll` steps a loop iteration, on power-law rows (long ones among them): the
    product, transposed and sampled products match scipy, and so does the GPU's atomic
    gradient step in one pass; in all of them the steps past a row's end in an iteration
    read and write nothing outside (no out-of-bounds lane). The product's loop bodies hold
    more masked accesses than with one step a loop iteration (the steps are copied)."""
    rng = np.random.default_rng(7)
    matrix, _ = POWER_LAW.make(rng, jnp.float32)
    blocks = dataclasses.replace(FAMILIES["triton"][2], unroll=unroll)
    with out_of_bounds_reports() as reports:
        _check_all_kernels("triton", matrix, 3, jnp.float32, blocks, rng)
    assert reports == []

    m, n = matrix.shape
    data = jnp.asarray(matrix.data, jnp.float32)
    indices, indptr = jnp.asarray(matrix.indices), jnp.asarray(matrix.indptr)
    g = jnp.asarray(rng.standard_normal((m, 3)), jnp.float32)
    x = jnp.asarray(rng.standard_normal((n, 3)), jnp.float32)
    options = dict(shape=(m, n), interpret=True, platform="cuda", block_sizes=blocks)
    with out_of_bounds_reports() as reports:
        d_data, d_x = triton_csr._pullback_in_one_pass(g, data, x, indices, indptr, **options)
    assert reports == []
    twin = sp.csr_array((np.asarray(data), np.asarray(indices), np.asarray(indptr)), (m, n))
    rows = np.repeat(np.arange(m), np.diff(np.asarray(indptr)))
    sampled = np.sum(np.asarray(g)[rows] * np.asarray(x)[np.asarray(indices)], axis=1)
    np.testing.assert_allclose(np.asarray(d_data), sampled, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(d_x), twin.T @ np.asarray(g), rtol=1e-5, atol=1e-5)

    def masked_accesses(unroll):
        product = functools.partial(
            triton_csr.csr_matmul_triton,
            **{**options, "block_sizes": dataclasses.replace(blocks, unroll=unroll)},
        )
        return str(jax.make_jaxpr(product)(data, x, indices, indptr)).count("mask=")

    assert masked_accesses(unroll) > masked_accesses(1)


# Rows of 20, 3, 0, 9, 17, 8, 1, 40, 0, 16, 2 and 33 entries, in chunks of 8 entries:
# the first row starts the matrix and the last ends it, row 3 starts inside a chunk and
# ends at the next one's start, where row 4 starts; rows 7 and 9 (with the empty row 8
# between) meet in chunk 12; a row of 8 entries is no longer than a chunk.
CHUNKED_LENGTHS = np.array([20, 3, 0, 9, 17, 8, 1, 40, 0, 16, 2, 33])
CHUNK_BLOCKS = triton_csr.BlockSizes(
    block_rows=4, lanes=1, row_steps=2, long_lanes=4, chunk_steps=2
)


def _expected_owners(indptr, chunk):
    """Each chunk's rows longer than a chunk: the one holding its first entry, the one
    starting inside it (-1: none), from the structure in numpy."""
    starts, lengths = indptr[:-1], np.diff(indptr)
    owners = []
    for first in range(0, indptr[-1], chunk):
        last = min(first + chunk, indptr[-1]) - 1
        holding = [np.searchsorted(indptr, entry, side="right") - 1 for entry in (first, last)]
        owners.append(
            [
                holding[0] if lengths[holding[0]] > chunk else -1,
                holding[1] if lengths[holding[1]] > chunk and starts[holding[1]] > first else -1,
            ]
        )
    return np.array(owners)


# (k, batch, rows of the search's steps, changes to `CHUNK_BLOCKS`, `_LONG_TILE`).
CHUNKED_CASES = [
    (1, None, 256, {}, None),
    # Column tiles of 2 (three k-blocks) and two steps a loop iteration.
    (5, None, 4, dict(block_k=2, unroll=2), None),
    # Blocks of 2 of 3 matrices, and partial sums summed every step (tiles past 16 values).
    pytest.param(3, 3, 4, dict(block_batch=2), 16, marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("k", "batch", "search_lanes", "changes", "long_tile"), CHUNKED_CASES)
def test_rows_longer_than_a_chunk_match_scipy_and_read_nothing_outside(
    k, batch, search_lanes, changes, long_tile, monkeypatch
):
    """The product with rows summed by chunks (`chunk_steps`): the chunk kernel finds each
    chunk's rows (by a search of 4 rows a step, three steps for these 12 rows, or one of
    256), the row blocks add them, and the product matches scipy, for one matrix and a
    batch, several k-blocks, loops of two steps an iteration and partial sums summed every
    step, reading and writing nothing outside."""
    monkeypatch.setattr(triton_csr, "_SEARCH_LANES", search_lanes)
    if long_tile:
        monkeypatch.setattr(triton_csr, "_LONG_TILE", long_tile)
    blocks = dataclasses.replace(CHUNK_BLOCKS, **changes)
    indptr = np.concatenate([[0], np.cumsum(CHUNKED_LENGTHS)]).astype(np.int32)
    m, n, nnz = CHUNKED_LENGTHS.size, 29, int(indptr[-1])
    rng = np.random.default_rng(11)
    indices = rng.integers(0, n, nnz).astype(np.int32)
    data = rng.standard_normal((batch or 1, nnz))
    x = rng.standard_normal((n, k))
    options = dict(shape=(m, n), interpret=True, platform="cuda", block_sizes=blocks)
    tiles, _ = triton_csr._tiles("cuda", True, blocks, shape=(m, n), nnz=nnz, k=k, batch=batch or 1)
    assert tiles.chunk == 8
    assert triton_csr._lanes_after_loop(tiles) == (long_tile is None)
    values = jnp.asarray(data if batch else data[0])
    structure = (jnp.asarray(indices), jnp.asarray(indptr))
    with out_of_bounds_reports() as reports:
        got = triton_csr.csr_matmul_triton(values, jnp.asarray(x), *structure, **options)
        got = np.asarray(got)
        operands = (structure[1], structure[0], jnp.asarray(data), jnp.asarray(x))
        _, owners = triton_csr._chunked(operands, tiles, True, (True, blocks, "test"))
        owners = np.asarray(owners)
    assert reports == []
    np.testing.assert_array_equal(owners, _expected_owners(indptr, tiles.chunk))
    assert (owners >= 0).any(axis=0).all()  # both slots are used
    for member, values_of in enumerate(data):
        twin = sp.csr_array((values_of, indices, indptr), shape=(m, n))
        np.testing.assert_allclose(got[member] if batch else got, twin @ x, rtol=1e-12, atol=1e-12)


# (k, batch, changes to `CHUNK_BLOCKS`): one matrix with one column tile (the one pass
# applies); a batch in blocks of 2 with column tiles of 2 and two steps an iteration; and
# short rows of up to 16 entries, so the rows of 9 and 16 entries, short in the product,
# are taken by chunks here.
CHUNKED_GRADIENT_CASES = [
    (3, None, {}),
    pytest.param(5, 3, dict(block_batch=2, block_k=2, unroll=2), marks=pytest.mark.slow),
    pytest.param(3, None, dict(lanes=4, row_steps=4), marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("k", "batch", "changes"), CHUNKED_GRADIENT_CASES)
def test_gradients_of_rows_longer_than_a_chunk_match_scipy_and_read_nothing_outside(
    k, batch, changes
):
    """The sampled product, the transposed product with atomics and the gradient step in
    one pass, with rows longer than a chunk taken by the chunks' programs and skipped by
    the row blocks (`chunk_steps`): every entry counted once, as scipy's, and nothing read
    or written outside (interpret mode adds the atomics' lanes one by one)."""
    blocks = dataclasses.replace(CHUNK_BLOCKS, **changes)
    indptr = np.concatenate([[0], np.cumsum(CHUNKED_LENGTHS)]).astype(np.int32)
    m, n, nnz = CHUNKED_LENGTHS.size, 29, int(indptr[-1])
    rng = np.random.default_rng(12)
    indices = rng.integers(0, n, nnz).astype(np.int32)
    lead = (batch,) if batch else ()
    data = jnp.asarray(rng.standard_normal((*lead, nnz)), jnp.float32)
    g = jnp.asarray(rng.standard_normal((*lead, m, k)), jnp.float32)
    x = jnp.asarray(rng.standard_normal((*lead, n, k)), jnp.float32)
    structure = (jnp.asarray(indices), jnp.asarray(indptr))
    options = dict(shape=(m, n), interpret=True, platform="cuda", block_sizes=blocks)
    tiles, _ = triton_csr._tiles("cuda", True, blocks, shape=(m, n), nnz=nnz, k=k, batch=batch or 1)
    assert tiles.chunk == 8 and tiles.chunks == 19

    def gradients(data, g, x, indices, indptr):
        found = {
            "sampled": triton_csr.csr_sddmm_triton(g, x, indices, indptr, **options),
            "transposed": _transposed_with_atomics(data, g, indices, indptr, options),
        }
        if not batch:
            found["one pass"] = triton_csr._pullback_in_one_pass(
                g, data, x, indices, indptr, **options
            )
        return found

    with out_of_bounds_reports() as reports:
        got = jax.tree.map(np.asarray, jax.jit(gradients)(data, g, x, *structure))
    assert reports == []
    rows = np.repeat(np.arange(m), CHUNKED_LENGTHS)
    stacked = [np.asarray(a) if batch else np.asarray(a)[None] for a in (data, g, x)]
    for member, (values, g_of, x_of) in enumerate(zip(*stacked, strict=True)):
        twin = sp.csr_array((values, indices, indptr), shape=(m, n))
        sampled = np.sum(g_of[rows] * x_of[indices], axis=1)
        transposed = twin.T @ g_of
        results = [(got["sampled"], sampled), (got["transposed"], transposed)]
        if not batch:
            results += list(zip(got["one pass"], (sampled, transposed), strict=True))
        for result, expected in results:
            found = result[member] if batch else result
            np.testing.assert_allclose(found, expected, rtol=1e-5, atol=1e-5)


# One column takes the same code as five: `slow`, which CI runs.
@pytest.mark.parametrize("k", [pytest.param(1, marks=pytest.mark.slow), 5])
def test_gradient_step_in_one_pass_matches_scipy(k):
    """The GPU's gradient step of `A @ x` in the values and `x` in one pass (atomic
    scatter of `A.T @ g`, sampled product beside it) on blocks with long, short and empty
    rows whose columns repeat from row to row, so lanes add into the same rows of `A.T @
    g` (interpret mode adds the atomics' lanes one by one)."""
    lengths = np.array([1, 9, 0, 12, 2, 7, 5, 0, 3])
    m, n, nnz = lengths.size, 13, int(lengths.sum())
    rng = np.random.default_rng(4)
    indptr = jnp.asarray(np.concatenate([[0], np.cumsum(lengths)]), jnp.int32)
    columns = [np.sort(rng.choice(n, length, replace=False)) for length in lengths]
    indices = jnp.asarray(np.concatenate(columns), jnp.int32)
    data = jnp.asarray(rng.standard_normal(nnz), jnp.float32)
    g = jnp.asarray(rng.standard_normal((m, k)), jnp.float32)
    x = jnp.asarray(rng.standard_normal((n, k)), jnp.float32)
    # Blocks of 4 rows, long past 4 entries: rows 1, 3 and 5 of two blocks are long.
    blocks = triton_csr.BlockSizes(block_rows=4, lanes=2, row_steps=2, long_lanes=4)
    options = dict(shape=(m, n), interpret=True, platform="cuda", block_sizes=blocks)
    with out_of_bounds_reports() as reports:
        d_data, d_x = triton_csr._pullback_in_one_pass(g, data, x, indices, indptr, **options)
    assert reports == []
    twin = sp.csr_array((np.asarray(data), np.asarray(indices), np.asarray(indptr)), (m, n))
    rows = np.repeat(np.arange(m), lengths)
    sampled = np.sum(np.asarray(g)[rows] * np.asarray(x)[np.asarray(indices)], axis=1)
    np.testing.assert_allclose(np.asarray(d_data), sampled, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(d_x), twin.T @ np.asarray(g), rtol=1e-6, atol=1e-6)


def test_half_precision_scatters_into_float32_rounded_once():
    """The GPU's transposed product and gradient step in one pass in bfloat16 (interpret
    mode adds the atomics' lanes one by one): each row of `A.T @ g` sums about 40 entries'
    terms in float32 and is rounded to bfloat16 once, so it is within an ulp or two of
    the exact sum rounded (bfloat16 partial sums would be off by several)."""
    lengths = np.array([3, 9, 3, 3, 0, 12, 3, 3] * 8)
    m, n, nnz = lengths.size, 8, int(lengths.sum())
    rng = np.random.default_rng(8)
    indptr = jnp.asarray(np.concatenate([[0], np.cumsum(lengths)]), jnp.int32)
    indices = jnp.asarray(rng.integers(0, n, nnz), jnp.int32)
    data, g, x = (
        jnp.asarray(rng.uniform(0.5, 1.5, shape), jnp.bfloat16) for shape in (nnz, (m, 4), (n, 4))
    )
    # Blocks of 4 rows, long past 4 entries: the rows of 9 and 12 entries are long.
    blocks = triton_csr.BlockSizes(block_rows=4, lanes=2, row_steps=2, long_lanes=4)
    options = dict(shape=(m, n), interpret=True, platform="cuda", block_sizes=blocks)
    with out_of_bounds_reports() as reports:
        transposed = _transposed_with_atomics(data, g, indices, indptr, options)
        _, one_pass = triton_csr._pullback_in_one_pass(g, data, x, indices, indptr, **options)
    assert reports == []
    as64 = [np.asarray(a, np.float64) for a in (data, indices, indptr, g)]
    exact = sp.csr_array(tuple(as64[:3]), shape=(m, n)).T @ as64[3]
    rounded = np.asarray(exact.astype(jnp.bfloat16), np.float64)
    for got in (transposed, one_pass):
        assert got.dtype == jnp.bfloat16
        np.testing.assert_allclose(np.asarray(got, np.float64), rounded, rtol=2**-7)


# Ten seconds of interpret-mode compiles for the fallbacks' plumbing: `slow`, which CI runs.
@pytest.mark.slow
def test_gradient_step_takes_the_two_kernels_where_one_pass_does_not_apply():
    """Interpret mode (no atomics), a batch and more than 64 columns: the sampled product
    and the transposed product, as they are on their own."""
    rng = np.random.default_rng(6)
    twin = sp.random_array((6, 5), density=0.5, format="csr", rng=rng, dtype=np.float32)
    structure = (jnp.asarray(twin.indices, jnp.int32), jnp.asarray(twin.indptr, jnp.int32))
    options = dict(shape=twin.shape, interpret=True, platform="cuda")
    for lead, k in (((), 3), ((2,), 3), ((), 70)):
        data = jnp.asarray(rng.standard_normal((*lead, twin.nnz)), jnp.float32)
        g = jnp.asarray(rng.standard_normal((*lead, 6, k)), jnp.float32)
        x = jnp.asarray(rng.standard_normal((*lead, 5, k)), jnp.float32)
        got = triton_csr.csr_matmul_pullback_triton(g, data, x, *structure, **options)
        want = (
            triton_csr.csr_sddmm_triton(g, x, *structure, **options),
            triton_csr.csr_matmul_t_triton(data, g, *structure, **options),
        )
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # The one pass itself refuses columns past one column tile.
    narrow = triton_csr.BlockSizes(block_k=2)
    data, g, x = jnp.ones(twin.nnz), jnp.ones((6, 3)), jnp.ones((5, 3))
    with pytest.raises(ValueError, match="one column tile"):
        triton_csr._pullback_in_one_pass(g, data, x, *structure, **options, block_sizes=narrow)


@pytest.mark.parametrize("shape", [(4, 0), (0, 5)])
def test_entries_in_an_empty_dimension_give_nan(shape):
    m, n = shape
    indices, indptr = jnp.zeros(3, jnp.int32), jnp.array([0] + [3] * m, jnp.int32)
    data, x, g = jnp.ones(3), jnp.ones((n, 2)), jnp.ones((m, 2))
    options = dict(shape=shape, interpret=True, platform="cuda")
    with out_of_bounds_reports() as reports:
        results = (
            triton_csr.csr_matmul_triton(data, x, indices, indptr, **options),
            triton_csr.csr_sddmm_triton(g, x, indices, indptr, **options),
            _transposed_with_atomics(data, g, indices, indptr, {**options, "shape": shape}),
        )
    assert reports == []
    for result, rows in zip(results, (m, 3, n), strict=True):
        assert result.shape[0] == rows and np.isnan(np.asarray(result)).all()


FAMILY_PRODUCTS = {
    "xla": (xla_csr.csr_matmul_xla, xla_csr.csr_sddmm_xla, {}),
    "triton": (
        triton_csr.csr_matmul_triton,
        triton_csr.csr_sddmm_triton,
        dict(interpret=True, platform="cuda"),
    ),
    "mosaic-tpu": (
        mosaic_tpu_csr.csr_matmul_mosaic_tpu,
        mosaic_tpu_csr.csr_sddmm_mosaic_tpu,
        dict(interpret=True),
    ),
}


@pytest.mark.parametrize("family", list(FAMILY_PRODUCTS))
def test_degenerate_invalid_structures_give_nan_on_every_family(family):
    """What the kernels never launch for still answers NaN: no entries under a bad index
    pointer, and entries in a matrix with no columns."""
    product, sampled, options = FAMILY_PRODUCTS[family]
    no_entries, bad_indptr = jnp.zeros(0), jnp.array([0, 1, 0, 0], jnp.int32)
    empty = product(
        no_entries, jnp.ones((4, 2)), bad_indptr[:0], bad_indptr, shape=(3, 4), **options
    )
    assert empty.shape == (3, 2) and np.isnan(np.asarray(empty)).all()
    indices, indptr = jnp.zeros(2, jnp.int32), jnp.array([0, 1, 2, 2], jnp.int32)
    no_columns = (jnp.ones(2), jnp.ones((0, 2)), indices, indptr)
    assert np.isnan(np.asarray(product(*no_columns, shape=(3, 0), **options))).all()
    g, x = jnp.ones((3, 2)), jnp.ones((0, 2))
    assert np.isnan(np.asarray(sampled(g, x, indices, indptr, shape=(3, 0), **options))).all()


def test_out_of_bounds_reports_count_unmasked_lanes_outside():
    from jax.experimental import pallas as pl

    from jaxsparse.kernels import _bounds_check

    def kernel(x_ref, index_ref, out_ref):
        index = index_ref[...]
        out_ref[...] = _bounds_check.load(x_ref, (index,), mask=index != 7, other=0)

    gather = pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((4,), jnp.float32), interpret=True
    )
    x = jnp.arange(6.0, dtype=jnp.float32)
    with out_of_bounds_reports() as reports:
        jax.block_until_ready(gather(x, jnp.array([0, 9, 7, -1], jnp.int32)))
    assert reports == [("load", (6,), 2)]  # 9 and -1; 7 is masked
    with out_of_bounds_reports() as reports:
        np.testing.assert_array_equal(gather(x, jnp.array([0, 5, 7, 2], jnp.int32)), [0, 5, 0, 2])
    assert reports == []


@pytest.mark.skipif(
    jax.default_backend() != "gpu",
    reason="runs the Triton kernels on a GPU (make gpu-check); the CPU's native kernels "
    "raise for these structures instead (tests/test_errors.py)",
)
@pytest.mark.parametrize("name", [c[0] for c in INVALID_STRUCTURES])
def test_invalid_structures_on_the_gpu_give_nan_rows(name):
    import jaxsparse as js

    indptr, indices, bad_rows = _invalid_case(name)
    x = jnp.asarray(np.random.default_rng(2).standard_normal((5, 3)), jnp.float32)

    @jax.jit
    def product(data, indices, indptr, x):
        return js.CSRMatrix(data, indices, indptr, shape=(4, 5)) @ x

    got = np.asarray(product(jnp.ones(8, jnp.float32), indices, indptr, x))
    np.testing.assert_allclose(got, _expected_rows(indptr, indices, x, bad_rows), rtol=1e-5)
    # The gradient kernels with a row taken by chunks, on the device (atomics included).
    _check_gradients_by_chunks(name, interpret=False)
    # The device is still usable afterwards.
    np.testing.assert_allclose(np.asarray(jnp.ones(3) + 1), 2.0)


def _rows_of_0_to_3000(medium: int):
    """A scipy CSR matrix of 4000 columns: 500 rows of 0 to 11 entries and rows of 3000,
    700, 0, `medium`, 129 and 2000, shuffled (sorted columns, float64 values); its row
    lengths, and the generator that drew it, for the operands."""
    rng = np.random.default_rng(5)
    lengths = np.concatenate([rng.integers(0, 12, 500), [3000, 700, 0, medium, 129, 2000]])
    rng.shuffle(lengths)
    m, n = lengths.size, 4000
    columns = [np.sort(rng.choice(n, length, replace=False)) for length in lengths]
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    indices = np.concatenate(columns).astype(np.int32)
    twin = sp.csr_array((rng.standard_normal(indptr[-1]), indices, indptr), shape=(m, n))
    return twin, lengths, rng


@pytest.mark.skipif(
    jax.default_backend() != "gpu",
    reason="runs the Triton kernels on a GPU (make gpu-check); interpret mode checks them "
    "on a CPU (test_rows_longer_than_a_chunk_*, test_gradients_of_rows_longer_than_a_chunk_*)",
)
@pytest.mark.parametrize("k", [1, 8, 80])
def test_rows_taken_by_chunks_on_the_gpu_match_scipy(k):
    """Rows of 0 to 3000 entries, those past 32 entries taken by chunks of 32
    (`chunk_steps=2`), through the Triton kernels on the GPU: the product, the sampled and
    transposed (atomic) products, and the gradient step (in one pass up to 64 columns,
    else the two kernels)."""
    twin, lengths, rng = _rows_of_0_to_3000(33)
    twin = twin.astype(np.float32)
    (m, n), indices, indptr = twin.shape, twin.indices, twin.indptr
    x, g = rng.standard_normal((n, k)), rng.standard_normal((m, k))
    blocks = triton_csr.BlockSizes(long_lanes=16, chunk_steps=2)
    options = dict(shape=(m, n), block_sizes=blocks)
    structure = (jnp.asarray(indices), jnp.asarray(indptr))
    data, x32, g32 = (jnp.asarray(a, jnp.float32) for a in (twin.data, x, g))

    @jax.jit
    def kernels(data, x, g, indices, indptr):
        return (
            triton_csr.csr_matmul_triton(data, x, indices, indptr, **options),
            triton_csr.csr_sddmm_triton(g, x, indices, indptr, **options),
            triton_csr.csr_matmul_t_triton(data, g, indices, indptr, **options),
            triton_csr.csr_matmul_pullback_triton(g, data, x, indices, indptr, **options),
        )

    product, sampled, transposed, (d_data, d_x) = kernels(data, x32, g32, *structure)
    rows = np.repeat(np.arange(m), lengths)
    expected_sampled = np.sum(g[rows] * x[indices], 1)
    tol = tolerance(jnp.float32)
    for got, expected in (
        (product, twin @ x),
        (sampled, expected_sampled),
        (transposed, twin.T @ g),
        (d_data, expected_sampled),
        (d_x, twin.T @ g),
    ):
        np.testing.assert_allclose(np.asarray(got), expected, rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("k", [1, 8])
def test_long_and_short_rows_on_the_default_device(k):
    """Rows of 0 to 3000 entries through `js.matmul` and its gradient with the default
    tiles: on a GPU the Triton kernels (short rows by blocks, long rows one at a time),
    elsewhere what `"auto"` runs there."""
    import jaxsparse as js

    twin, lengths, rng = _rows_of_0_to_3000(65)
    (m, n), indices = twin.shape, twin.indices
    x = rng.standard_normal((n, k))
    g = rng.standard_normal((m, k))
    matrix = js.CSRMatrix.from_scipy(twin.astype(np.float32))
    x32, g32 = jnp.asarray(x, jnp.float32), jnp.asarray(g, jnp.float32)

    def loss(data, x):
        return jnp.sum(js.matmul(matrix.with_data(data), x) * g32)

    y = jax.jit(js.matmul)(matrix, x32)
    d_data, d_x = jax.jit(jax.grad(loss, argnums=(0, 1)))(matrix.data, x32)
    tol = tolerance(jnp.float32)
    np.testing.assert_allclose(y, twin @ x, rtol=tol, atol=tol * 10)
    np.testing.assert_allclose(d_x, twin.T @ g, rtol=tol, atol=tol * 10)
    rows = np.repeat(np.arange(m), lengths)
    np.testing.assert_allclose(d_data, np.sum(g[rows] * x[indices], 1), rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float64, jnp.complex64])
def test_nan_unless_keeps_values_bit_for_bit_and_poisons_every_part(dtype):
    """`nan_unless` (the answer to an invalid structure) leaves a valid result's bits alone,
    signed zeros and infinities included, and makes every element NaN, both parts of a
    complex one, under `jit` too."""
    real = np.array([0.0, -0.0, np.inf, -np.inf, 1.5, -3.25, np.nan])
    both = np.empty(real.shape, np.complex128)
    both.real, both.imag = real, real[::-1]
    values = jnp.asarray(both if dtype == jnp.complex64 else real, dtype)
    function = jax.jit(nan_unless)
    for kept in (nan_unless(True, values), function(True, values)):
        assert kept.dtype == values.dtype
        np.testing.assert_array_equal(
            np.asarray(kept).view(np.uint8), np.asarray(values).view(np.uint8)
        )
    for poisoned in (nan_unless(False, values), function(jnp.asarray(False), values)):
        parts = (poisoned.real, poisoned.imag) if dtype == jnp.complex64 else (poisoned,)
        assert all(np.isnan(np.asarray(part, np.float64)).all() for part in parts)
    booleans = jnp.asarray([True, False])
    np.testing.assert_array_equal(nan_unless(True, booleans), booleans)
