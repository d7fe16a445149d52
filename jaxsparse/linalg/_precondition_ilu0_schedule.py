"""The symbolic half of ILU(0), on the host: the matrix's pattern and the level schedules
that let the factorization and the triangular solves run as `lax.fori_loop`s over levels.

A row's level is one more than the highest level among the rows it depends on (the columns
of its strictly lower entries for the factorization and the forward solve, of its strictly
upper entries for the backward solve), so the rows of one level are independent and are
processed together. Every array is padded: row `n` and positions `nnz`, `nnz + 1` are
scratch slots holding the values `0`, `0` and `1`, so padded work reads and writes nothing
that matters.

**Entries that stay zero are left out.** A stored position whose value is zero and that
no elimination update reaches keeps the value zero in the factors. Where the values are
concrete, the schedule leaves such entries out (the tables read padding, zero, there) and
the updates through them, so no row waits on them: a stencil stored as diagonals holds
zeros where its grid lines wrap (the 7-point stencil's offset -1 at the start of each
line), which would otherwise chain every row to the one before it, `n` levels instead of
`nx + ny + nz`. The factors are the same. Under `jit` the values are traced, and every
stored entry counts.
"""

import dataclasses
import functools

import numpy as np

from .._base import is_concrete
from .._csr import CSRMatrix
from .._dia import DIAMatrix
from .._dia_layout import valid_rows


@dataclasses.dataclass(frozen=True)
class Pattern:
    """A matrix's distinct stored positions, sorted by row then column, and how to gather
    their values: `values = zeros(nnz).at[target].add(data.ravel()[source])`."""

    n: int
    indptr: np.ndarray
    cols: np.ndarray
    source: np.ndarray
    target: np.ndarray


@functools.singledispatch
def matrix_pattern(A) -> Pattern:
    """The pattern of a square `DIAMatrix` (from its static offsets) or `CSRMatrix` (from
    its index arrays, which must be concrete)."""
    raise TypeError(f"`A` must be a DIAMatrix or CSRMatrix, got {type(A).__name__}.")


@matrix_pattern.register
def _dia_pattern(A: DIAMatrix) -> Pattern:
    n = A.shape[0]
    # Seeded with no entries, so a matrix without offsets has an empty pattern.
    rows, cols, source = ([np.zeros(0, np.int64)] for _ in range(3))
    for d, offset in enumerate(A.offsets):
        lo, hi = valid_rows(offset, A.shape)
        diagonal_rows = np.arange(lo, max(lo, hi))
        rows.append(diagonal_rows)
        cols.append(diagonal_rows + offset)
        source.append(d * n + diagonal_rows + offset)
    rows, cols, source = (np.concatenate(parts) for parts in (rows, cols, source))
    order = np.lexsort((cols, rows))
    rows, cols, source = rows[order], cols[order], source[order]
    return _pattern(n, rows, cols, source, np.arange(len(rows)))


@matrix_pattern.register
def _csr_pattern(A: CSRMatrix) -> Pattern:
    n = A.shape[0]
    if not is_concrete(A.indices, A.indptr):
        raise ValueError(
            "spilu0: a CSR matrix's pattern must be concrete (not traced under `jit`): "
            "build the preconditioner outside `jit` and pass it in."
        )
    indptr, indices = np.asarray(A.indptr), np.asarray(A.indices)
    stored_rows = np.repeat(np.arange(n), np.diff(indptr))
    keys, target = np.unique(stored_rows * np.int64(n) + indices, return_inverse=True)
    return _pattern(n, keys // n, keys % n, np.arange(len(indices)), target)


def _pattern(n: int, rows, cols, source, target) -> Pattern:
    indptr = np.searchsorted(rows, np.arange(n + 1)).astype(np.int64)
    return Pattern(n, indptr, cols.astype(np.int64), source, target.reshape(-1))


@dataclasses.dataclass(frozen=True)
class Schedule:
    """Index arrays (numpy, int32) driving the numeric factorization and the solves."""

    nnz: int
    diagonal: np.ndarray  # (n + 1,): position of each row's diagonal; row n: nnz + 1
    lower_positions: np.ndarray  # (n + 1, T): a row's strictly lower entries, padded nnz
    lower_cols: np.ndarray  # (n + 1, T): their columns, padded n
    upper_positions: np.ndarray  # (n + 1, T'): strictly upper entries, padded nnz
    upper_cols: np.ndarray
    forward_levels: np.ndarray  # (L, W): rows per level of the lower dependency, padded n
    backward_levels: np.ndarray  # (L', W'): rows per level of the upper dependency
    updates: np.ndarray  # (L, T, 3, U): per level and lower rank, (target, pivot, source)


def ilu0_schedule(pattern: Pattern, values: np.ndarray | None = None) -> Schedule:
    """The level schedules of `pattern` (see the module); `values` (on the pattern, when
    concrete) lets the levels skip entries that stay zero."""
    n, indptr, cols = pattern.n, pattern.indptr, pattern.cols
    nnz = len(cols)
    rows = np.repeat(np.arange(n), np.diff(indptr))
    is_diagonal = cols == rows
    if np.count_nonzero(is_diagonal) != n:
        missing = np.setdiff1d(np.arange(n), rows[is_diagonal])
        raise ValueError(
            f"spilu0: ILU(0) needs every diagonal entry in the pattern; row {missing[0]} has none."
        )
    diagonal = np.append(np.flatnonzero(is_diagonal), nnz + 1)
    lower_count = diagonal[:n] - indptr[:n]
    upper_count = indptr[1:] - diagonal[:n] - 1
    eliminations = _eliminations(pattern, rows, lower_count)
    # Per position (padding: nnz), whether it can hold a nonzero in the factors; those
    # that cannot leave the tables (padding reads zero) and the updates.
    can_be_nonzero = np.ones(nnz + 1, bool)
    if values is not None:
        can_be_nonzero[:nnz] = values != 0
        can_be_nonzero[eliminations[0]] = True
        targets, pivots, sources = eliminations
        kept = can_be_nonzero[pivots] & can_be_nonzero[sources]
        eliminations = (targets[kept], pivots[kept], sources[kept])
    lower_positions, lower_cols = _ell(indptr[:n], lower_count, cols, nnz, n, can_be_nonzero)
    upper_positions, upper_cols = _ell(diagonal[:n] + 1, upper_count, cols, nnz, n, can_be_nonzero)
    forward = _levels(lower_cols[:n], n, reverse=False)
    backward = _levels(upper_cols[:n], n, reverse=True)
    return Schedule(
        nnz=nnz,
        diagonal=diagonal.astype(np.int32),
        lower_positions=lower_positions,
        lower_cols=lower_cols,
        upper_positions=upper_positions,
        upper_cols=upper_cols,
        forward_levels=_group_rows(forward, n),
        backward_levels=_group_rows(backward, n),
        updates=_group_updates(eliminations, rows, indptr, lower_count, forward, nnz),
    )


def _ell(starts, counts, cols, nnz: int, n: int, kept):
    """Rows' runs of entries `[start, start + count)` as padded `(n + 1, width)` arrays;
    the positions not `kept` are padding too."""
    width = max(1, int(counts.max(initial=0)))
    rank = np.arange(width)
    positions = starts[:, None] + rank[None, :]
    present = rank[None, :] < counts[:, None]
    present &= kept[np.where(present, positions, nnz)]
    positions = np.where(present, positions, nnz)
    entry_cols = np.where(present, cols[np.minimum(positions, len(cols) - 1)], n)
    pad = np.full((1, width), nnz)
    return (
        np.concatenate([positions, pad]).astype(np.int32),
        np.concatenate([entry_cols, pad * 0 + n]).astype(np.int32),
    )


def _levels(dependency_cols: np.ndarray, n: int, *, reverse: bool) -> np.ndarray:
    """Each row's level: one more than the highest level among the rows it depends on."""
    level = [0] * (n + 1)
    level[n] = -1
    table = dependency_cols.tolist()
    for i in range(n - 1, -1, -1) if reverse else range(n):
        level[i] = 1 + max(level[j] for j in table[i])
    return np.asarray(level[:n], dtype=np.int64)


def _group_rows(level: np.ndarray, n: int) -> np.ndarray:
    """`(levels, width)` rows of each level, padded with the scratch row `n`; at least one
    level of one slot, as `_updates` has, so the sweeps index a non-empty table."""
    order = np.argsort(level, kind="stable")
    counts = np.bincount(level, minlength=1)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    grouped = np.full((len(counts), max(1, int(counts.max()))), n, dtype=np.int32)
    sorted_levels = level[order]
    grouped[sorted_levels, np.arange(n) - starts[sorted_levels]] = order
    return grouped


def _eliminations(pattern: Pattern, rows, lower_count):
    """The elimination's updates `a[q] -= a[p] * a[r]` as `(targets q, pivots p, sources
    r)`: for a strictly lower `p = (i, k)`, every `q = (i, j)` with `j > k` whose
    `r = (k, j)` is in the pattern."""
    n, indptr, cols = pattern.n, pattern.indptr, pattern.cols
    nnz = len(cols)
    rank = np.arange(nnz) - indptr[rows]
    pivots = np.flatnonzero(rank < lower_count[rows])
    following = indptr[rows[pivots] + 1] - pivots - 1
    pivot_of_pair = np.repeat(pivots, following)
    first = np.cumsum(following) - following
    targets = pivot_of_pair + 1 + np.arange(len(pivot_of_pair)) - np.repeat(first, following)
    keys = cols[pivot_of_pair] * np.int64(n) + cols[targets]
    pattern_keys = rows * np.int64(n) + cols
    found = np.minimum(np.searchsorted(pattern_keys, keys), nnz - 1)
    exists = pattern_keys[found] == keys
    return targets[exists], pivot_of_pair[exists], found[exists]


def _group_updates(eliminations, rows, indptr, lower_count, level, nnz: int) -> np.ndarray:
    """The `eliminations` grouped by (level of `i`, rank of `p` in its row), the order the
    factorization visits them: `(levels, lower width, 3, width)`, padded with `nnz`."""
    targets, pivots, sources = eliminations
    rank = pivots - indptr[rows[pivots]]
    lower_width = max(1, int(lower_count.max(initial=0)))
    levels = int(level.max(initial=0)) + 1
    stage = level[rows[pivots]] * lower_width + rank
    counts = np.bincount(stage, minlength=levels * lower_width)
    width = max(1, int(counts.max(initial=0)))
    order = np.argsort(stage, kind="stable")
    stage = stage[order]
    slot = np.arange(len(stage)) - (np.cumsum(counts) - counts)[stage]
    updates = np.full((levels * lower_width, 3, width), nnz, dtype=np.int32)
    for field, values in enumerate((targets, pivots, sources)):
        updates[stage, field, slot] = values[order]
    return updates.reshape(levels, lower_width, 3, width)
