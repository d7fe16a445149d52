"""The benchmark's test matrices, built on the host as scipy.sparse arrays (float32).

Stencils are built directly in scipy's DIA layout (`data[d, j] == A[j - offsets[d], j]`),
so even the largest ones cost a few numpy passes; their CSR twins come from `tocsr()`.
"""

import dataclasses
import functools

import numpy as np
import scipy.sparse

DTYPE = np.float32


@dataclasses.dataclass(frozen=True)
class Kind:
    """A family of matrices: its name, storage format and the sizes (rows) to build."""

    name: str
    fmt: str  # "dia" or "csr": the format jaxsparse is benchmarked in
    build: object  # rows -> scipy sparse array (approximately `rows` rows)
    sizes: tuple[int, ...]
    quick_sizes: tuple[int, ...]


def _stencil_dia(
    grid: tuple[int, ...], steps: list[tuple[int, ...]], rng
) -> scipy.sparse.dia_array:
    """A stencil on a `grid` (C order) with random positive weights and a dominant center."""
    n = int(np.prod(grid))
    strides = [int(np.prod(grid[a + 1 :])) for a in range(len(grid))]
    coords = np.indices(grid).reshape(len(grid), n)
    offsets, rows = [], []
    for step in steps:
        # Column j couples to row i = j - offset, the grid point at coords(j) - step.
        inside = np.ones(n, dtype=bool)
        for axis, s in enumerate(step):
            inside &= (coords[axis] - s >= 0) & (coords[axis] - s < grid[axis])
        offset = sum(s * st for s, st in zip(step, strides, strict=True))
        center = not any(step)
        values = (len(steps) if center else -1.0) * (1.0 + 0.1 * rng.random(n))
        offsets.append(offset)
        rows.append(np.where(inside, values, 0.0).astype(DTYPE))
    return scipy.sparse.dia_array((np.stack(rows), np.array(offsets)), shape=(n, n))


def _neighbour_steps(dim: int, full: bool) -> list[tuple[int, ...]]:
    if full:
        grids = np.indices((3,) * dim).reshape(dim, -1).T - 1
        return [tuple(int(v) for v in g) for g in grids]
    steps = [(0,) * dim]
    for axis in range(dim):
        for s in (-1, 1):
            step = [0] * dim
            step[axis] = s
            steps.append(tuple(step))
    return steps


def tridiagonal(rows: int, rng):
    return _stencil_dia((rows,), _neighbour_steps(1, full=False), rng)


def poisson2d(rows: int, rng):
    side = max(2, round(rows**0.5))
    return _stencil_dia((side, side), _neighbour_steps(2, full=False), rng)


def poisson3d(rows: int, rng):
    side = max(2, round(rows ** (1 / 3)))
    return _stencil_dia((side,) * 3, _neighbour_steps(3, full=False), rng)


def stencil27(rows: int, rng):
    side = max(2, round(rows ** (1 / 3)))
    return _stencil_dia((side,) * 3, _neighbour_steps(3, full=True), rng)


def _csr_from_lengths(lengths: np.ndarray, n: int, rng) -> scipy.sparse.csr_array:
    """Rows of the given lengths at uniform random columns (repeats summed by scipy)."""
    m = lengths.size
    rows = np.repeat(np.arange(m), lengths)
    cols = rng.integers(0, n, size=rows.size)
    values = rng.standard_normal(rows.size).astype(DTYPE)
    matrix = scipy.sparse.csr_array((values, (rows, cols)), shape=(m, n))
    matrix.sum_duplicates()
    return matrix


def random_uniform(rows: int, rng, per_row: int = 16):
    return _csr_from_lengths(np.full(rows, per_row), rows, rng)


def power_law(rows: int, rng):
    """Row lengths from a Pareto tail (mean ~16, a few rows of thousands), as in graphs."""
    lengths = np.floor(3.0 * (rng.pareto(1.3, rows) + 1.0)).astype(np.int64)
    return _csr_from_lengths(np.clip(lengths, 1, min(rows, 20_000)), rows, rng)


def hub_rows(rows: int, rng, hubs: int = 16):
    """Rows of 8 entries and `hubs` rows of a quarter of the columns each (at most 2^20
    entries), at random places: a graph with a few vertices linked to much of it."""
    lengths = np.full(rows, 8)
    lengths[rng.choice(rows, min(hubs, rows), replace=False)] = max(min(rows // 4, 2**20), 8)
    return _csr_from_lengths(lengths, rows, rng)


_STENCIL_SIZES = (1_000, 10_000, 100_000, 1_000_000, 4_000_000)
_SMALL_FIRST = (1_000, 10_000)

KINDS = (
    Kind("tridiagonal", "dia", tridiagonal, _STENCIL_SIZES, _SMALL_FIRST),
    Kind("poisson2d-5pt", "dia", poisson2d, _STENCIL_SIZES, _SMALL_FIRST),
    Kind("poisson3d-7pt", "dia", poisson3d, _STENCIL_SIZES, _SMALL_FIRST),
    Kind("stencil3d-27pt", "dia", stencil27, _STENCIL_SIZES[:4], _SMALL_FIRST),
    Kind("tridiagonal", "csr", tridiagonal, _STENCIL_SIZES, _SMALL_FIRST),
    Kind("poisson2d-5pt", "csr", poisson2d, _STENCIL_SIZES, _SMALL_FIRST),
    Kind("poisson3d-7pt", "csr", poisson3d, _STENCIL_SIZES, _SMALL_FIRST),
    Kind("stencil3d-27pt", "csr", stencil27, _STENCIL_SIZES[:4], _SMALL_FIRST),
    Kind(
        "random-8",
        "csr",
        functools.partial(random_uniform, per_row=8),
        _STENCIL_SIZES[:4],
        _SMALL_FIRST,
    ),
    Kind("random-16", "csr", random_uniform, _STENCIL_SIZES[:4], _SMALL_FIRST),
    Kind("power-law", "csr", power_law, _STENCIL_SIZES[:4], _SMALL_FIRST),
)


def build(kind: Kind, rows: int, seed: int = 0):
    """`(dia_or_None, csr)`: the matrix in scipy DIA (stencils only) and CSR form."""
    rng = np.random.default_rng(seed)
    matrix = kind.build(rows, rng)
    if isinstance(matrix, scipy.sparse.dia_array):
        csr = matrix.tocsr()
        csr.eliminate_zeros()
        return matrix, csr
    return None, matrix.tocsr()
