"""Triton (GPU) Pallas kernels for CSR matrices: product, transposed product, SDDMM.

`A` is `(m, n)` with `data` `(nnz,)`, `indices` `(nnz,)` (the column of each entry) and
`indptr` `(m + 1,)`; row `i` holds the entries `p` in `[indptr[i], indptr[i + 1])`.

**Row blocks; long rows walked whole or by chunks.** What the structure looks like is not known
when the program is traced (under `jit` it is data), so every program handles any rows.
One program per block of `block_rows` consecutive rows (and block of `block_k` columns of
the dense operand, and block of batch members):

1. *Short rows.* Each loop step takes `lanes` entries of every row of the block at once,
   a `(block_rows, lanes)` tile of gathers, until the block's longest short row is done.
   `lanes` follows the mean row length `nnz / m`, which is static, so short rows fill the
   lanes instead of one row holding a whole program (one lane with 64 columns a tile).
2. *Long rows.* Rows longer than `row_cap = lanes * row_steps` entries are left out of
   that loop, so one long row does not make the block's short rows take its steps. The
   program then walks its long rows one after another, `long_lanes` entries per step.
   Long rows are spread over the blocks' many programs, which the GPU schedules as they
   come, and a block with none pays one count.
3. *Rows longer than a chunk* (`BlockSizes.chunk_steps`). The entries are cut in chunks of
   `long_lanes * chunk_steps`, one program each, which finds the (at most two) rows longer
   than a chunk that meet its chunk by a search of `indptr` (`_chunk_rows`), so one row of
   millions of entries takes as many programs as it has chunks. In the product a first
   kernel sums each chunk's entries of those rows, and the row-block program adds a long
   row's chunk sums instead of walking its entries (a row longer than a chunk but not
   than `row_cap` stays in the short rows' loop); a matrix with no such row pays one
   launch whose programs search and write zero sums (two rows of `k` values a chunk and
   batch member). The sampled and transposed products, whose entries need no sum across
   programs, run the chunks' programs in the row blocks' launch, after them, and the row
   blocks skip every row longer than a chunk; with no such row those programs search,
   gather a row of `g` a slot, and walk no entry.

Each row is summed by one program (or chunks, by their programs, then one program) in a
fixed order, so results are the same bits on every run (no atomics).

**Invalid structures give NaN, never an out-of-bounds access.** Every index is checked
before it is used, so nothing outside the arrays is read or written (every access goes
through `_bounds_check`, whose interpret-mode reports the tests require to be empty). In
the product, a row whose `indptr` bounds are decreasing or outside `[0, nnz]` (or
`indptr[0] != 0`, `indptr[m] != nnz`), or that holds a column outside `[0, n)`, gets NaN
in every column of its result; so does a row longer than a chunk whose chunks the
search did not find (only where `indptr` decreases somewhere). In the sampled product an
entry with a column outside `[0, n)` gets NaN, and invalid bounds anywhere make every
entry NaN (which entries such a row claims is not defined). The transposed product with
atomics is NaN everywhere for invalid bounds or a column outside. For these whole-result
cases each program writes a flag, and a second kernel writes NaN over the
result where any flag is set (a launch whose programs end at once for a valid
structure). Entries in a matrix with no
rows or no columns make every element of a result NaN. The containers' `check()` reports
the same problems as an error, off the hot path.

**Transposed product `A.T @ g`** (the operand's gradient). On a GPU: the same row blocks,
each entry adding `data[p] * g[row(p)]` to `out[col]` with an atomic addition: one pass,
but the order of the additions, and so the last bits, may vary from run to run. Half
precision adds into a float32 result, rounded once at the end, as every kernel
accumulates it (`_precision.py`). Otherwise (interpret mode, whose Pallas emulation has no
masked atomics, or `JAXSPARSE_DETERMINISTIC=1`): the transposed structure is built in XLA
(`_csr_layout.transposed_structure`, a stable sort, `O(nnz log nnz)` per call) and fed to
the product: deterministic.

**SDDMM** (`out[p] = sum_c g[row(p), c] * x[indices[p], c]`, the gradient in the values)
walks the same row blocks and long rows, so it needs no per-entry row ids: each row's
`g` row is loaded once per step and each entry's `x` row is gathered.

**Gradient step in one pass** (`csr_matmul_pullback_triton`: the gradients of `A @ x` in
the values and in `x` together, `_primitive.py`'s `pullback`). Where the transposed
product scatters with atomics, for one matrix with at most 64 columns: one walk of the row
blocks does both, each entry gathering its `x` row for the sampled product and adding
into its `A.T @ g` row, so the entries, their columns and `g`'s rows are read once, not
twice. Elsewhere the two kernels above.

**Bytes per product** (`v`, `i`: bytes per value and per index): `nnz * (v + i) +
(m + 1) * i + nnz * k * v` (gathered rows of `x`; at most `n * k * v` from memory when
the cache holds `x`) `+ m * k * v`.

**Batches** (`_primitive.py`, "Batches": values `(B, nnz)`, dense operands `(B, rows, k)`
or shared). A third grid axis takes blocks of `block_batch` batch members: the structure
and a shared operand are read once per block of matrices. One matrix is a batch of one.

All kernels accumulate bfloat16 and float16 in float32 and cast the result back. The
same kernels run in Pallas interpret mode on a CPU (`platform="cpu"`).
"""

import dataclasses
import functools
import os

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from . import _pallas
from ._bounds_check import atomic_add, load, store
from ._csr_common import (
    check_dense,
    check_sddmm,
    check_structure,
    matmul_t_by_transposed_structure,
    nan_if_invalid,
)
from ._precision import accumulation_dtype

_PLATFORMS = ("cuda", "rocm", _pallas.INTERPRET_PLATFORM)
DETERMINISTIC_ENV_VAR = "JAXSPARSE_DETERMINISTIC"


def supports(dtype, platform: str) -> bool:
    """Whether the Triton kernels take `dtype` on `platform`.

    - `"cuda"`, `"rocm"`: float16, bfloat16, float32, float64. Triton has no complex type.
    - `"cpu"` (interpret mode): every real floating dtype. Complex returns False: interpret
      mode cannot allocate a complex output (its uninitialized-value fill raises
      `NotImplementedError`).
    - any other platform: False.
    """
    dtype = jnp.dtype(dtype)
    if platform not in _PLATFORMS:
        return False
    return jnp.issubdtype(dtype, jnp.floating)


# Values per loop step of a program: the short-row tile is `block_batch * block_rows *
# lanes * block_k`, the long-row tile `block_batch * long_lanes * block_k`. Short-row
# tiles past 1024 values, or past 128 rows, take so many registers a thread that too few
# warps fit on an SM to hide the gathers' latency; long-row tiles of 512 values beat
# 2048 (the tile sweeps in benchmarks/results/gpu-2026-11-27-h200.txt and
# gpu-2026-11-27-h100.txt).
_ROWS_TILE = 1024
_MAX_BLOCK_ROWS = 128
_MIN_BLOCK_ROWS = 8
_LONG_TILE = 512
# Columns of the dense operand per program, at most (more take further column tiles).
_MAX_BLOCK_K = 64
# From this many operand columns a tile, one lane a row: each entry already gathers a
# whole line of `x`, and more lanes only add a reduction across them (the k = 64 sweep in
# benchmarks/results/gpu-2026-11-27-h200-evening.txt).
_ONE_LANE_COLUMNS = 64
# Programs of the kernel that writes NaN over a result for an invalid structure.
_POISON_PROGRAMS = 1024
# Rows a step of the search for the row holding an entry: one vector load a step.
_SEARCH_LANES = 256


@dataclasses.dataclass(frozen=True)
class BlockSizes(_pallas.BlockSizes):
    """Block sizes and Triton knobs of the CSR kernels.

    - `block_rows`: rows per program; a power of 2.
    - `lanes`: entries of each short row per loop step; a power of 2.
    - `row_steps`: loop steps a short row may take; longer rows (more than
      `lanes * row_steps` entries) are long rows, walked one at a time.
    - `long_lanes`: entries of a long row per loop step; a power of 2.
    - `unroll`: loop steps per iteration of the loops over entries: their loads issue
      before their products are used, so the latencies of that many steps overlap; the
      last iteration's steps past a row's end are masked (instructions, no loads).
    - `chunk_steps`: rows longer than a chunk of `long_lanes * chunk_steps` entries (in
      the product, those also longer than `lanes * row_steps`) are taken by chunks, one
      program each, so that one long row takes many programs (the module docstring); 0:
      no chunks.
    - `block_k`: columns of the dense operand per program (product) or per loop step
      (SDDMM); a power of 2.
    - `block_batch`: batch members per program (batched calls); a power of 2.
    - `num_warps`, `num_stages`: Triton's warps per program and software-pipelining stages
      (`None` leaves Triton's own defaults).
    - `stream_entries`: load the entries (indices and values, read once) with Triton's
      `evict_first` policy. A row's later steps read the rest of the lines its first
      step loaded, so on short rows this fetches lines again.
    - `keep_operand`: gather the dense operand's rows (read again by other rows) with the
      `evict_last` policy.
    - `vector_loads`: where the column tiles divide `k`, columns neither clamped nor
      masked (tiles of one column always are), so that Triton loads each gathered row's
      columns as vectors (128-bit loads); it then converts the entries' layout into the
      vectors' every step, through shared memory
      (benchmarks/results/gpu-csr-sass-2026-11-28.txt).

    `None` tile fields are filled by `get_default` from the platform, the number of
    columns `k`, the batch and the mean row length.
    """

    block_rows: int | None = _pallas.tile()
    lanes: int | None = _pallas.tile()
    row_steps: int | None = _pallas.tile(power_of_two=False)
    long_lanes: int | None = _pallas.tile()
    unroll: int | None = _pallas.tile(power_of_two=False)
    chunk_steps: int | None = _pallas.tile(minimum=0, power_of_two=False)
    block_k: int | None = _pallas.tile()
    block_batch: int | None = _pallas.tile()
    num_warps: int | None = _pallas.tile()
    num_stages: int | None = _pallas.tile(power_of_two=False)
    stream_entries: bool | None = _pallas.switch()
    keep_operand: bool | None = _pallas.switch()
    vector_loads: bool | None = _pallas.switch()

    @classmethod
    def get_default(
        cls, *, platform: str, num_cols: int, batch: int = 1, mean_row_length: float = 8.0
    ) -> "BlockSizes":
        """Defaults for a dense operand with `num_cols` columns on `platform`, `batch`
        matrices, and rows of `mean_row_length` entries on average (`nnz / m`).

        A row's lanes are the largest power of 2 up to half its mean length (rounded), so
        most rows take two or three steps, and one lane with column tiles of 64; a row
        counts as long past 8 steps and at least 64 entries. The row-block tile stays near
        1024 values, with 8 to 128 rows. Cache hints and vector loads stay off (the tile
        sweep, `benchmarks/gpu_csr_tiles.py`, compares them).
        """
        _pallas.check_platform(platform, _PLATFORMS)
        block_k = min(pl.next_power_of_2(max(num_cols, 1)), _MAX_BLOCK_K)
        block_batch = min(pl.next_power_of_2(max(batch, 1)), 8)
        lanes = min(1 << max(round(mean_row_length / 2), 1).bit_length() - 1, 32)
        if block_k >= _ONE_LANE_COLUMNS:
            lanes = 1
        rows_budget = _ROWS_TILE // (block_k * block_batch * lanes)
        block_rows = min(max(rows_budget, 1), _MAX_BLOCK_ROWS)
        if block_rows < _MIN_BLOCK_ROWS:  # keep blocks of a few rows: fewer lanes instead
            block_rows = _MIN_BLOCK_ROWS
            lanes = max(_ROWS_TILE // (block_k * block_batch * block_rows), 1)
        return cls(
            block_rows=block_rows,
            lanes=lanes,
            row_steps=max(8, 64 // lanes),
            long_lanes=max(_LONG_TILE // (block_k * block_batch), 16),
            unroll=1,
            chunk_steps=0,
            block_k=block_k,
            block_batch=block_batch,
            stream_entries=False,
            keep_operand=False,
            vector_loads=False,
        )

    def filled(
        self, *, platform: str, num_cols: int, batch: int = 1, mean_row_length: float = 8.0
    ) -> "BlockSizes":
        """These block sizes with `None` tiles taken from `get_default`."""
        return self.filled_from(
            self.get_default(
                platform=platform, num_cols=num_cols, batch=batch, mean_row_length=mean_row_length
            )
        )


def _compiler_params(block_sizes: BlockSizes):
    return plgpu.CompilerParams(num_warps=block_sizes.num_warps, num_stages=block_sizes.num_stages)


@dataclasses.dataclass(frozen=True)
class _Tiles:
    """The static sizes every kernel body needs."""

    m: int
    n: int
    nnz: int
    k: int
    batch: int
    block_rows: int
    lanes: int
    row_cap: int
    long_lanes: int
    unroll: int
    chunk: int  # entries a chunk where rows longer than that are chunked, else 0
    block_k: int
    block_batch: int
    stream_entries: bool
    keep_operand: bool
    whole_column_tiles: bool

    @property
    def row_blocks(self) -> int:
        """Programs of a row-block launch along its first grid axis."""
        return pl.cdiv(self.m, self.block_rows)

    @property
    def chunks(self) -> int:
        """Chunks of entries (`chunk`), 0 without chunks."""
        return pl.cdiv(self.nnz, self.chunk) if self.chunk else 0

    @property
    def read_once(self) -> str | None:
        """The eviction policy of the entries' loads (`BlockSizes.stream_entries`)."""
        return "evict_first" if self.stream_entries else None

    @property
    def read_again(self) -> str | None:
        """The eviction policy of the dense operand's gathers (`BlockSizes.keep_operand`)."""
        return "evict_last" if self.keep_operand else None


def _k_columns(tiles: _Tiles, k_block):
    """The operand columns of k-block `k_block`: clamped (for loads), their mask, and
    unclamped (for stores). With `whole_column_tiles` every column is inside: no clamp and
    a constant mask, so Triton sees each gathered row's columns as contiguous (a clamp or
    a mask that varies along them makes every load scalar) and every load's mask is the
    entries' alone."""
    cols = k_block * tiles.block_k + jnp.arange(tiles.block_k, dtype=jnp.int32)
    if tiles.whole_column_tiles:
        return cols, jnp.ones(cols.shape, bool), cols
    return jnp.minimum(cols, tiles.k - 1), cols < tiles.k, cols


def _members(tiles: _Tiles):
    """This program's batch members: clamped (for loads), their mask, unclamped (stores).
    Where the blocks of members divide the batch (always for one matrix), every member
    exists: the mask is a constant, which the loads' masks then do not compute."""
    out = pl.program_id(2) * tiles.block_batch + jnp.arange(tiles.block_batch, dtype=jnp.int32)
    if tiles.batch % tiles.block_batch == 0:
        return out, jnp.ones(out.shape, bool), out
    return jnp.minimum(out, tiles.batch - 1), out < tiles.batch, out


def _block_rows(indptr_ref, tiles: _Tiles, block):
    """Rows of `block`: their ids (unclamped, for stores), mask, starts and lengths, and
    whether each row's bounds are invalid (a bad row gets length 0 here; its result is
    NaN)."""
    index_dtype = indptr_ref.dtype
    out_rows = block.astype(index_dtype) * tiles.block_rows
    out_rows += jnp.arange(tiles.block_rows, dtype=index_dtype)
    row_mask = out_rows < tiles.m
    rows = jnp.minimum(out_rows, tiles.m - 1)
    starts = load(indptr_ref, (rows,), mask=row_mask, other=0)
    ends = load(indptr_ref, (rows + 1,), mask=row_mask, other=0)
    bad = (starts < 0) | (ends > tiles.nnz) | (ends < starts)
    bad |= (out_rows == 0) & (starts != 0)
    bad |= (out_rows == tiles.m - 1) & (ends != tiles.nnz)
    bad &= row_mask
    return out_rows, row_mask, starts, jnp.where(bad, 0, ends - starts), bad


def _gather(
    ref, batched: bool, members, member_mask, entries, entry_mask, k_cols, k_mask, policy=None
):
    """`ref[(member,) entry, k_col]` for `entries` of shape `S`: `(block_batch, *S,
    block_k)` if `batched`, else `(1, *S, block_k)`; masked lanes read nothing. `policy`:
    the loads' eviction policy."""
    entries, entry_mask = entries[..., None], entry_mask[..., None]
    k_cols = k_cols.reshape((1,) * (entries.ndim - 1) + (-1,))
    k_mask = k_mask.reshape(k_cols.shape)
    if not batched:
        mask = entry_mask & k_mask
        return load(ref, (entries, k_cols), mask=mask, other=0, eviction_policy=policy)[None]
    lead = (-1,) + (1,) * entries.ndim
    members, member_mask = members.reshape(lead), member_mask.reshape(lead)
    mask = member_mask & entry_mask[None] & k_mask[None]
    index = (members, entries[None], k_cols[None])
    return load(ref, index, mask=mask, other=0, eviction_policy=policy)


def _entries(indices_ref, tiles: _Tiles, positions, mask):
    """`positions`, the columns of the entries there (masked lanes read nothing and get
    column 0), and which of the unmasked ones lie outside `[0, n)`. Neither the masked
    positions nor the outside columns are replaced: a load or store at them takes a mask
    without those lanes (`mask & ~outside` for the columns), which costs nothing, where a
    select before each address costs instructions every lane and every step."""
    cols = load(indices_ref, (positions,), mask=mask, other=0, eviction_policy=tiles.read_once)
    return positions, cols, mask & ((cols < 0) | (cols >= tiles.n))


def _step_entries(indices_ref, tiles: _Tiles, starts, lengths, lane, lanes: int, s):
    """Step `s` over rows (or one row: scalar `starts`, `lengths`), `lanes` entries of each
    (`lane` their ranks): the lanes' mask, then `_entries` of their positions."""
    offset = s.astype(starts.dtype) * lanes + lane
    mask = offset < lengths[..., None]
    return mask, *_entries(indices_ref, tiles, starts[..., None] + offset, mask)


def _entry_values(data_ref, tiles: _Tiles, members, member_mask, positions, mask):
    """`data[member, positions]` for the batch members, `(block_batch, *positions.shape)`;
    masked lanes read nothing."""
    lead = (-1,) + (1,) * positions.ndim
    mask = member_mask.reshape(lead) & mask[None]
    index = (members.reshape(lead), positions[None])
    return load(data_ref, index, mask=mask, other=0, eviction_policy=tiles.read_once)


def _distinct(positions, mask, tiles: _Tiles):
    """Store addresses: `positions`, and past `nnz` a distinct one for each masked lane.
    A masked lane writes nothing on a GPU, but interpret mode's masked store needs lanes
    that share no address."""
    lane = jnp.arange(mask.size, dtype=positions.dtype).reshape(mask.shape)
    return jnp.where(mask, positions, tiles.nnz + lane)


def _poisoned(values, bad):
    """`values` with NaN where `bad` (broadcast over the trailing axes)."""
    return jnp.where(bad, jnp.nan, values)


def _over_entries(unroll: int, length, lanes: int, step, init):
    """Runs `carry = step(s, carry)` from `init` for the steps `s` that cover `length`
    entries, `lanes` entries a step, and returns the carry. A loop iteration runs `unroll`
    steps, whose loads issue before any of their products are used, so their latencies
    overlap; the steps past the last (in the last iteration) have every lane masked: they
    touch nothing and add zeros."""
    steps = (length + lanes - 1) // lanes
    iterations = ((steps + unroll - 1) // unroll).astype(jnp.int32)

    def iteration(i, carry):
        for u in range(unroll):
            carry = step(i * unroll + u, carry)
        return carry

    return lax.fori_loop(0, iterations, iteration, init)


def _each_long_row(indptr_ref, tiles: _Tiles, block, lengths, body, init):
    """Runs `carry = body(row, start, length, carry)` from `init` for each row of `block`
    longer than `row_cap` (by `lengths`: an invalid row's is 0), in order, and returns the
    carry: after its short rows, a row-block program walks its long rows one at a time,
    `long_lanes` entries per step. Finding the next long row takes one reduction over the
    block; its bounds are read from `indptr` (a valid row's, cached) rather than reduced
    out of the block's."""
    rank = jnp.arange(tiles.block_rows, dtype=jnp.int32)
    is_long = lengths > tiles.row_cap

    def one_row(_, state):
        previous, carry = state
        row = jnp.min(jnp.where(is_long & (rank > previous), rank, tiles.block_rows))
        # A long row is a valid row of the matrix (`at < m`), so both loads are inside.
        at = (block * tiles.block_rows + row).astype(indptr_ref.dtype)
        start = load(indptr_ref, (at,), mask=at < tiles.m, other=0)
        end = load(indptr_ref, (at + 1,), mask=at < tiles.m, other=0)
        return row, body(at, start, end - start, carry)

    count = jnp.sum(is_long.astype(jnp.int32))
    return lax.fori_loop(0, count, one_row, (jnp.int32(-1), init))[1]


# ---------------------------------------------------------------------------------------
# Product `A @ x`


def _product_terms(data_ref, x_ref, tiles: _Tiles, shared, k_block):
    """`products(positions, mask, cols, outside)`: the entries' values times their rows
    of `x` (k-block `k_block`, this program's batch members), `(block_batch, *positions.shape,
    block_k)` in the accumulation dtype, and the lanes whose column is outside, for the
    loops to carry and reduce.

    With one column a tile, such an entry's value is NaN instead (no flags: a reduction
    less per long row) and its gather is masked (no select before a scalar address); with
    more, flags and a clamped column cost fewer instructions and barriers
    (benchmarks/results/gpu-csr-sass-2026-11-28.txt)."""
    k_cols, k_mask, _ = _k_columns(tiles, k_block)
    members, member_mask, _ = _members(tiles)
    acc_dtype = accumulation_dtype(x_ref.dtype)

    def products(positions, mask, cols, outside):
        vals = _entry_values(data_ref, tiles, members, member_mask, positions, mask)
        vals = vals.astype(acc_dtype)
        if tiles.block_k == 1:
            gather_mask = mask & ~outside
            vals, outside = _poisoned(vals, outside[None]), jnp.zeros_like(outside)
        else:
            cols, gather_mask = jnp.where(outside, 0, cols), mask
        x_rows = _gather(
            x_ref,
            not shared,
            members,
            member_mask,
            cols,
            gather_mask,
            k_cols,
            k_mask,
            tiles.read_again,
        )
        return vals[..., None] * x_rows.astype(acc_dtype), outside

    return products


def _lanes_after_loop(tiles: _Tiles) -> bool:
    """Whether `_lane_sums` carries its values per lane and sums the lanes once after the
    loop: while that tile stays within `_LONG_TILE` values. A larger one (16 lanes of wide
    or batched operands) would take registers, and occupancy, from every program, so it
    is summed every step."""
    return tiles.block_batch * tiles.long_lanes * tiles.block_k <= _LONG_TILE


def _lane_sums(tiles: _Tiles, count, dtype, terms):
    """Sums `terms(s)`, `(values, flags)` of shapes `(block_batch, long_lanes, block_k)` and
    `(long_lanes,)`, over the steps `s` that cover `count` items `long_lanes` a step (one
    row's entries, or its chunks; `_lanes_after_loop`): `(block_batch, block_k)` in
    `dtype`, and whether any flag was set."""
    tile = (tiles.block_batch, tiles.long_lanes, tiles.block_k)
    lanes_after_loop = _lanes_after_loop(tiles)

    def step(s, carry):
        acc, seen = carry
        values, flags = terms(s)
        return acc + (values if lanes_after_loop else jnp.sum(values, axis=1)), seen | flags

    acc_shape = tile if lanes_after_loop else (tile[0], tile[2])
    init = (jnp.zeros(acc_shape, dtype), jnp.zeros(tile[1:2], bool))
    acc, seen = _over_entries(tiles.unroll, count, tiles.long_lanes, step, init)
    total = jnp.sum(acc, axis=1) if lanes_after_loop else acc
    return total, jnp.max(seen.astype(jnp.int32)) > 0


def _row_sum(indices_ref, tiles: _Tiles, products, start, length, acc_dtype):
    """The sum of `products` over the `length` entries from `start` (scalars), `long_lanes`
    entries a step (`_lane_sums`): `(block_batch, block_k)`, and whether a column among
    them was outside."""
    lane = jnp.arange(tiles.long_lanes, dtype=start.dtype)

    def terms(s):
        mask, positions, cols, outside = _step_entries(
            indices_ref, tiles, start, length, lane, tiles.long_lanes, s
        )
        return products(positions, mask, cols, outside)

    return _lane_sums(tiles, length, acc_dtype, terms)


def _matmul_rows_kernel(indptr_ref, indices_ref, data_ref, x_ref, *refs, tiles, shared):
    """Rows block `program_id(0)`, k-block `program_id(1)`, batch block `program_id(2)`:
    `data` `(batch, nnz)`, `x` `(n, k)` if `shared` else `(batch, n, k)`, `out`
    `(batch, m, k)`. With chunks (`tiles.chunk`), `refs` are the chunk kernel's partial
    sums and owners, then `out`: rows longer than a chunk add their chunks' sums."""
    *chunk_refs, out_ref = refs
    block = pl.program_id(0)
    _, k_mask, out_k = _k_columns(tiles, pl.program_id(1))
    _, member_mask, out_members = _members(tiles)
    out_rows, row_mask, starts, lengths, bad_rows = _block_rows(indptr_ref, tiles, block)
    is_long = lengths > tiles.row_cap
    short = jnp.where(is_long, 0, lengths)
    lane = jnp.arange(tiles.lanes, dtype=starts.dtype)[None, :]
    acc_dtype = accumulation_dtype(out_ref.dtype)
    products = _product_terms(data_ref, x_ref, tiles, shared, pl.program_id(1))
    if tiles.chunk:
        chunk_sums = _chunk_summer(*chunk_refs, tiles, pl.program_id(1))

    # The loops add each step's tile into a tile of partial sums, one per lane, and sum
    # the lanes once after the loop: a sum over lanes every step would move each row's sum
    # into the accumulator's layout through shared memory, two barriers a step.
    def step(s, carry):
        acc, outside_seen = carry
        mask, positions, cols, outside = _step_entries(
            indices_ref, tiles, starts, short, lane, tiles.lanes, s
        )
        step_products, outside = products(positions, mask, cols, outside)
        return acc + step_products, outside_seen | outside

    tile = (tiles.block_batch, tiles.block_rows, tiles.lanes, tiles.block_k)
    init = (jnp.zeros(tile, acc_dtype), jnp.zeros(tile[1:3], bool))
    acc, outside_seen = _over_entries(tiles.unroll, jnp.max(short), tiles.lanes, step, init)
    acc = jnp.sum(acc, axis=2)
    bad = bad_rows | (jnp.max(outside_seen.astype(jnp.int32), 1) > 0)
    # Not the long rows: their own stores below come from other threads, unordered with these.
    store(
        out_ref,
        (out_members[:, None, None], out_rows[None, :, None], out_k[None, None, :]),
        _poisoned(acc, bad[None, :, None]).astype(out_ref.dtype),
        mask=member_mask[:, None, None] & (row_mask & ~is_long)[None, :, None] & k_mask,
    )

    def long_row(row, start, length, carry):
        def walked():
            return _row_sum(indices_ref, tiles, products, start, length, acc_dtype)

        if tiles.chunk:  # a row longer than a chunk adds its chunks' sums instead
            total, bad = lax.cond(
                length > tiles.chunk, lambda: chunk_sums(row, start, length), walked
            )
        else:
            total, bad = walked()
        store(
            out_ref,
            (out_members[:, None], row, out_k[None, :]),
            _poisoned(total, bad).astype(out_ref.dtype),
            mask=member_mask[:, None] & k_mask[None, :],
        )
        return carry

    _each_long_row(indptr_ref, tiles, block, lengths, long_row, None)


# ---------------------------------------------------------------------------------------
# Rows longer than a chunk: their entries summed by chunks, over many programs


def _row_of_entry(indptr_ref, tiles: _Tiles, entry):
    """The row holding entry `entry` (a scalar in `[0, nnz)`): the last row `r < m` with
    `indptr[r] <= entry`. A search over `_SEARCH_LANES` rows a step (three steps for 2^22
    rows), each a vector load; any `indptr` gives a row in `[0, m)`, though for a
    decreasing one not necessarily one holding the entry."""
    index_dtype = indptr_ref.dtype
    lanes = jnp.arange(_SEARCH_LANES, dtype=index_dtype)
    row, span = jnp.zeros((), index_dtype), tiles.m
    while span > 1:  # the candidates are the `span` rows from `row`; `span` is static
        stride = pl.cdiv(span, _SEARCH_LANES)
        probes = row + lanes * stride
        inside = probes < tiles.m
        below = inside & (load(indptr_ref, (probes,), mask=inside, other=0) <= entry)
        count = jnp.sum(below.astype(jnp.int32))
        row += jnp.maximum(count - 1, 0).astype(index_dtype) * stride
        span = stride
    return row


def _chunk_rows(indptr_ref, tiles: _Tiles, chunk_index):
    """The rows longer than a chunk that meet chunk `chunk_index` (entries `[c * chunk,
    (c + 1) * chunk)`, an `indptr`-typed scalar), one per slot: `(row, lo, length, owned)`,
    the row (in `[0, m)`), the first of its entries in the chunk and how many (0 where the
    slot has no such row), and whether it has one.

    A row longer than a chunk that meets the chunk either holds its first entry (slot 0)
    or starts inside it (slot 1); at most one row does each, since a row starting inside
    and not ending there is the one holding its last entry. So each slot is found by one
    search of `indptr`, and a row's chunks are `[start // chunk, (end - 1) // chunk]`,
    slot 1 in the first where `start` is not a multiple of `chunk`. A row whose bounds
    are invalid is no slot's owner."""
    first = chunk_index * tiles.chunk
    end = first + jnp.minimum(tiles.nnz - first, tiles.chunk)
    found = []
    for slot, entry in enumerate((first, end - 1)):
        row = _row_of_entry(indptr_ref, tiles, entry)
        start = load(indptr_ref, (row,), mask=row < tiles.m, other=0)
        stop = load(indptr_ref, (row + 1,), mask=row < tiles.m, other=0)
        owned = (start >= 0) & (stop <= tiles.nnz) & (stop - start > tiles.chunk)
        if slot == 0:
            owned &= (start <= first) & (first < stop)
            # `first` for an owned row, but not known aligned when traced: from an aligned
            # start Triton loads 4 entries a thread and moves them through shared memory
            # every step (benchmarks/results/gpu-csr-chunks-sass-2026-11-28.txt).
            lo, hi = jnp.maximum(first, start), jnp.minimum(stop, end)
        else:  # a row longer than a chunk starting inside it reaches past its end
            owned &= (first < start) & (start < end)
            lo, hi = start, end
        found.append((row, lo, jnp.where(owned, hi - lo, 0), owned))
    return found


def _unchunked(tiles: _Tiles, lengths):
    """`lengths` with the rows longer than a chunk at 0: the row blocks of the sampled and
    transposed products leave those rows' entries to the chunks' programs."""
    return jnp.where(lengths > tiles.chunk, 0, lengths) if tiles.chunk else lengths


def _row_block_or_chunk(indptr_ref, tiles: _Tiles, row_block, chunk):
    """Runs `row_block()` in a program of the row blocks; with chunks, in the programs
    after them (the sampled and transposed products' launches), `chunk(rows)` with the
    `_chunk_rows` of the program's chunk; the launch then has `tiles.chunks` programs
    after the row blocks (`_launch(chunk_programs=True)`), or those rows are left out.
    Neither returns a value: Triton's lowering of a branch cannot yield a constant, so
    each writes its own results."""
    if not tiles.chunk:
        row_block()
        return
    program = pl.program_id(0)
    chunk_index = (program - tiles.row_blocks).astype(indptr_ref.dtype)
    pl.when(program < tiles.row_blocks)(row_block)
    pl.when(program >= tiles.row_blocks)(lambda: chunk(_chunk_rows(indptr_ref, tiles, chunk_index)))


def _matmul_chunks_kernel(
    indptr_ref, indices_ref, data_ref, x_ref, partials_ref, owners_ref, *, tiles, shared
):
    """Chunk `c = program_id(0)`, k-block `program_id(1)`, batch block `program_id(2)`: the
    sums of the chunk's entries in the rows longer than a chunk (`_chunk_rows`), `partials`
    `(batch, chunks, 2, k)`, and those rows, `owners` `(chunks, 2)` (-1: none)."""
    chunk_index = pl.program_id(0).astype(indptr_ref.dtype)
    products = _product_terms(data_ref, x_ref, tiles, shared, pl.program_id(1))
    _, k_mask, out_k = _k_columns(tiles, pl.program_id(1))
    _, member_mask, out_members = _members(tiles)
    for slot, (row, lo, length, owned) in enumerate(_chunk_rows(indptr_ref, tiles, chunk_index)):
        total, bad = _row_sum(indices_ref, tiles, products, lo, length, partials_ref.dtype)
        store(
            partials_ref,
            (out_members[:, None], chunk_index, slot, out_k[None, :]),
            _poisoned(total, bad),
            mask=member_mask[:, None] & k_mask[None, :],
        )
        position = (chunk_index, jnp.asarray(slot, chunk_index.dtype))
        store(owners_ref, position, jnp.where(owned, row, -1), mask=row < tiles.m)


def _chunk_summer(partials_ref, owners_ref, tiles: _Tiles, k_block):
    """`chunk_sums(row, start, length)`: the sum of row `row`, longer than a chunk, from the
    partial sums of its chunks, `long_lanes` chunks a step (`_lane_sums`), in a fixed
    order: `(block_batch, block_k)` for k-block `k_block`, and whether a chunk's slot is
    not this row's (the chunk kernel's search is exact only for a nondecreasing
    `indptr`)."""
    k_cols, k_mask, _ = _k_columns(tiles, k_block)
    members, member_mask, _ = _members(tiles)

    def chunk_sums(row, start, length):
        first = start // tiles.chunk
        count = (start + length - 1) // tiles.chunk - first + 1
        lane = jnp.arange(tiles.long_lanes, dtype=start.dtype)

        def terms(s):
            offset = s.astype(start.dtype) * tiles.long_lanes + lane
            mask = offset < count
            chunks = first + offset
            slots = (start > chunks * tiles.chunk).astype(chunks.dtype)
            owners = load(owners_ref, (chunks, slots), mask=mask, other=row)
            sums = load(
                partials_ref,
                (
                    members[:, None, None],
                    chunks[None, :, None],
                    slots[None, :, None],
                    k_cols[None, None, :],
                ),
                mask=member_mask[:, None, None] & mask[None, :, None] & k_mask[None, None, :],
                other=0,
            )
            return sums, owners != row

        return _lane_sums(tiles, count, partials_ref.dtype, terms)

    return chunk_sums


# ---------------------------------------------------------------------------------------
# Transposed product `A.T @ g`, scattered with atomic additions


def _walk_with_g_rows(
    indptr_ref, indices_ref, g_ref, tiles: _Tiles, batched, k_block, visit, bad_ref, flag
):
    """The walk of the scattering kernels over rows block `program_id(0)`: each step's
    entries of the short rows, then of each long row, with the rows of `g` they belong to
    (`(block_batch, rows, 1, block_k)` in the accumulation dtype, k-block `k_block`;
    `batched`: `g` has the batch axis); with chunks, the programs after the row blocks walk
    a chunk's entries of the rows longer than a chunk instead (`_row_block_or_chunk`).
    `visit(positions, mask, cols, outside, g_rows)` does a step's work; at the end
    `bad_ref[program_id(0)]` gets `flag(bad_columns, bad_bounds)`, each 1 if a column, or
    a row's bounds, were invalid in the block (a chunk's program flags its columns only:
    its rows' bounds are their blocks'), else 0.

    Which lanes met a column outside is carried as a tile and reduced once after each loop:
    a reduction over the block every step costs shared memory and barriers every step."""
    k_cols, k_mask, _ = _k_columns(tiles, k_block)
    members, member_mask, _ = _members(tiles)
    block = pl.program_id(0)  # outside `lax.cond`'s branches, where interpret mode lacks it
    acc_dtype = accumulation_dtype(g_ref.dtype)

    def g_rows_of(rows, mask):
        g_rows = _gather(g_ref, batched, members, member_mask, rows, mask, k_cols, k_mask)
        return g_rows.astype(acc_dtype)[:, :, None, :]

    def long_row(row, start, length, bad):
        lane = jnp.arange(tiles.long_lanes, dtype=start.dtype)[None, :]
        row_ids = jnp.full((1,), row, jnp.int32)
        g_row = g_rows_of(row_ids, row_ids >= 0)

        def step(s, seen):
            mask, positions, cols, outside = _step_entries(
                indices_ref, tiles, start[None], length[None], lane, tiles.long_lanes, s
            )
            visit(positions, mask, cols, outside, g_row)
            return seen | outside

        seen = jnp.zeros((1, tiles.long_lanes), bool)
        return bad | _any_lane(_over_entries(tiles.unroll, length, tiles.long_lanes, step, seen))

    def row_block():
        out_rows, row_mask, starts, lengths, bad_rows = _block_rows(indptr_ref, tiles, block)
        lengths = _unchunked(tiles, lengths)
        short = jnp.where(lengths > tiles.row_cap, 0, lengths)
        g_rows = g_rows_of(jnp.minimum(out_rows, tiles.m - 1), row_mask)
        lane = jnp.arange(tiles.lanes, dtype=starts.dtype)[None, :]

        def step(s, seen):
            mask, positions, cols, outside = _step_entries(
                indices_ref, tiles, starts, short, lane, tiles.lanes, s
            )
            visit(positions, mask, cols, outside, g_rows)
            return seen | outside

        seen = jnp.zeros((tiles.block_rows, tiles.lanes), bool)
        bad = _any_lane(_over_entries(tiles.unroll, jnp.max(short), tiles.lanes, step, seen))
        bad = _each_long_row(indptr_ref, tiles, block, lengths, long_row, bad)
        bad_ref[block] = flag(bad, jnp.max(bad_rows.astype(jnp.int32)))

    def chunk(rows):
        bad = jnp.zeros((), jnp.int32)
        for row, lo, length, _ in rows:
            bad = long_row(row, lo, length, bad)
        bad_ref[block] = flag(bad, 0)

    _row_block_or_chunk(indptr_ref, tiles, row_block, chunk)


def _any_lane(flags):
    """1 if any element of the 2-D tile `flags` is set, else 0 (int32). One axis at a time:
    JAX 0.12's Triton lowering of a reduction over two axes gives its intermediate the
    input's sharding and fails under a mesh."""
    return jnp.max(jnp.max(flags.astype(jnp.int32), axis=1))


def _scatterer(data_ref, out_ref, tiles: _Tiles, k_block):
    """`scatter(positions, mask, cols, outside, g_rows)`: adds the entries' products with
    `g_rows` to `out` at their columns (not at those `outside`), k-block `k_block`,
    atomically."""
    _, k_mask, out_k = _k_columns(tiles, k_block)
    members, member_mask, out_members = _members(tiles)

    def scatter(positions, mask, cols, outside, g_rows):
        vals = _entry_values(data_ref, tiles, members, member_mask, positions, mask)
        atomic_add(
            out_ref,
            (out_members[:, None, None, None], cols[None, ..., None], out_k[None, None, None]),
            (vals.astype(g_rows.dtype)[..., None] * g_rows).astype(out_ref.dtype),
            mask=member_mask[:, None, None, None]
            & (mask & ~outside)[None, ..., None]
            & k_mask[None, None, None],
        )

    return scatter


def _matmul_t_rows_kernel(
    indptr_ref, indices_ref, data_ref, g_ref, _, out_ref, bad_ref, *, tiles: _Tiles, shared
):
    """Rows block `program_id(0)` of `A` (or a chunk: `_walk_with_g_rows`), k-block
    `program_id(1)`, batch block `program_id(2)`: adds `data[p] * g[row(p)]` to
    `out[indices[p]]` for the block's rows; `out` `(batch, n, k)` starts at zero.
    `bad_ref[program]` is 1 if a row's bounds or a column were invalid (the poisoning
    kernel then makes all of `out` NaN), else 0."""
    scatter = _scatterer(data_ref, out_ref, tiles, pl.program_id(1))
    _walk_with_g_rows(
        indptr_ref,
        indices_ref,
        g_ref,
        tiles,
        not shared,
        pl.program_id(1),
        scatter,
        bad_ref,
        lambda bad_columns, bad_bounds: bad_columns | bad_bounds,
    )


def _matmul_t_poison_kernel(invalid_ref, _, out_ref, *, tiles: _Tiles, programs: int):
    """NaN over all of `out` (`(batch, n, k)`, the row-block kernel's output) where
    `invalid_ref[0]` says a bound or a column was invalid: where such entries belong is
    not defined. Program `program_id(0)` of `programs` takes a share of the rows."""
    _, k_mask, out_k = _k_columns(tiles, pl.program_id(1))
    _, member_mask, out_members = _members(tiles)
    share = pl.cdiv(tiles.n, programs)
    first = pl.program_id(0) * share
    lane = jnp.arange(tiles.long_lanes, dtype=jnp.int32)

    def poison(s, _):
        offset = s * tiles.long_lanes + lane
        rows = first + offset
        mask = (offset < share) & (rows < tiles.n)
        nans = jnp.full(
            (tiles.block_batch, tiles.long_lanes, tiles.block_k), jnp.nan, out_ref.dtype
        )
        store(
            out_ref,
            (out_members[:, None, None], rows[None, :, None], out_k[None, None]),
            nans,
            mask=member_mask[:, None, None] & mask[None, :, None] & k_mask[None, None],
        )

    steps = (invalid_ref[0] > 0).astype(jnp.int32) * pl.cdiv(share, tiles.long_lanes)
    lax.fori_loop(0, steps, poison, None)


# ---------------------------------------------------------------------------------------
# Sampled product `out[p] = g[row(p)] . x[indices[p]]`


def _sddmm_rows_kernel(
    indptr_ref, indices_ref, g_ref, x_ref, out_ref, bad_ref, *, tiles: _Tiles, batched
):
    """Rows block `program_id(0)` (with chunks, the programs after the row blocks take a
    chunk each: `_row_block_or_chunk`), batch block `program_id(2)` (`program_id(1)` is 0):
    `g` and `x` are `(rows, k)` (shared) or `(batch, rows, k)` per `batched`, `out`
    `(batch, nnz)`; `bad_ref[program]` is 1 if a row's bounds were invalid, else 0."""
    members, member_mask, out_members = _members(tiles)
    block = pl.program_id(0)  # outside `lax.cond`'s branches, where interpret mode lacks it
    acc_dtype = accumulation_dtype(out_ref.dtype)

    k_blocks = pl.cdiv(tiles.k, tiles.block_k)

    def g_rows_for(rows, row_mask):
        """`kb -> ` the rows of `g` (one per leading index of the entries) in k-block `kb`,
        `(block_batch, rows, 1, block_k)`. With one k-block they are gathered here, once
        for every step over the entries, not again each step."""

        def gather(kb):
            k_cols, k_mask, _ = _k_columns(tiles, kb)
            g_rows = _gather(
                g_ref, batched[0], members, member_mask, rows, row_mask, k_cols, k_mask
            )
            return g_rows.astype(acc_dtype)[:, :, None, :]

        if k_blocks > 1:
            return gather
        once = gather(0)
        return lambda kb: once

    def sample(g_rows_at, positions, mask, cols, outside):
        """Writes the entries' sampled products, their rows of `g` (`g_rows_at`) against
        the gathered rows of `x` at `cols`."""

        def k_step(kb, acc):
            k_cols, k_mask, _ = _k_columns(tiles, kb)
            x_rows = _gather(
                x_ref,
                batched[1],
                members,
                member_mask,
                cols,
                mask & ~outside,
                k_cols,
                k_mask,
                tiles.read_again,
            )
            return acc + jnp.sum(g_rows_at(kb) * x_rows.astype(acc_dtype), axis=3)

        zeros = jnp.zeros((tiles.block_batch, *positions.shape), acc_dtype)
        acc = lax.fori_loop(0, k_blocks, k_step, zeros)
        store(
            out_ref,
            (out_members[:, None, None], _distinct(positions, mask, tiles)[None]),
            _poisoned(acc, outside[None]).astype(out_ref.dtype),
            mask=member_mask[:, None, None] & mask[None],
        )

    def long_row(row, start, length, carry):
        lane = jnp.arange(tiles.long_lanes, dtype=start.dtype)[None, :]
        row_ids = jnp.full((1,), row, jnp.int32)
        long_g_row = g_rows_for(row_ids, row_ids >= 0)

        def step(s, _):
            mask, positions, cols, outside = _step_entries(
                indices_ref, tiles, start[None], length[None], lane, tiles.long_lanes, s
            )
            sample(long_g_row, positions, mask, cols, outside)

        _over_entries(tiles.unroll, length, tiles.long_lanes, step, None)
        return carry

    def row_block():
        out_rows, row_mask, starts, lengths, bad_rows = _block_rows(indptr_ref, tiles, block)
        bad_ref[block] = jnp.max(bad_rows.astype(jnp.int32))
        lengths = _unchunked(tiles, lengths)
        short = jnp.where(lengths > tiles.row_cap, 0, lengths)
        rows = jnp.minimum(out_rows, tiles.m - 1).astype(jnp.int32)
        short_g_rows = g_rows_for(rows, row_mask)

        def step(s, _):
            lane = jnp.arange(tiles.lanes, dtype=starts.dtype)[None, :]
            mask, positions, cols, outside = _step_entries(
                indices_ref, tiles, starts, short, lane, tiles.lanes, s
            )
            sample(short_g_rows, positions, mask, cols, outside)

        _over_entries(tiles.unroll, jnp.max(short), tiles.lanes, step, None)
        _each_long_row(indptr_ref, tiles, block, lengths, long_row, None)

    def chunk(rows):
        for row, lo, length, _ in rows:
            long_row(row, lo, length, None)
        bad_ref[block] = jnp.zeros((), jnp.int32)  # a chunk's bounds are its rows' blocks'

    _row_block_or_chunk(indptr_ref, tiles, row_block, chunk)


def _sddmm_poison_kernel(invalid_ref, _, out_ref, *, tiles: _Tiles, programs: int):
    """NaN over every entry of `out` (`(batch, nnz)`) where `invalid_ref[0]` says a row's
    bounds were invalid: which entries such a row claims is not defined. Program
    `program_id(0)` of `programs` takes a share of the entries."""
    _, member_mask, out_members = _members(tiles)
    share = pl.cdiv(tiles.nnz, programs)
    first = pl.program_id(0) * share
    lane = jnp.arange(tiles.long_lanes, dtype=jnp.int32)

    def poison(s, _):
        offset = s * tiles.long_lanes + lane
        positions = first + offset
        mask = (offset < share) & (positions < tiles.nnz)
        nans = jnp.full((tiles.block_batch, tiles.long_lanes), jnp.nan, out_ref.dtype)
        store(
            out_ref,
            (out_members[:, None], _distinct(positions, mask, tiles)[None]),
            nans,
            mask=member_mask[:, None] & mask[None],
        )

    steps = (invalid_ref[0] > 0).astype(jnp.int32) * pl.cdiv(share, tiles.long_lanes)
    lax.fori_loop(0, steps, poison, None)


# ---------------------------------------------------------------------------------------
# Gradient step `(sddmm(g, x), A.T @ g)` in one pass, scattered with atomic additions

# Bits of a program's flag in the one-pass gradient: a column outside `[0, n)`
# (poisons `A.T @ g`), invalid row bounds (poison both results).
_BAD_COLUMN, _BAD_BOUNDS = 1, 2


def _pullback_rows_kernel(
    indptr_ref, indices_ref, data_ref, g_ref, x_ref, _, dx_ref, ddata_ref, bad_ref, *, tiles
):
    """Rows block `program_id(0)` of one matrix (or a chunk: `_walk_with_g_rows`), every
    column of `g` and `x` in one k-block (`k <= block_k`): for each entry `p` of row `i`
    and column `j`, adds `data[p] * g[i]` to `dx[j]` (atomically; `dx` `(1, n, k)` starts
    at zero) and writes `g[i] . x[j]` to `ddata[0, p]`, so the entries, their columns and
    `g`'s rows are read once for both. `bad_ref[program]` holds `_BAD_COLUMN` and
    `_BAD_BOUNDS` bits for the program's rows."""
    k_cols, k_mask, _ = _k_columns(tiles, 0)
    members, member_mask, out_members = _members(tiles)
    scatter = _scatterer(data_ref, dx_ref, tiles, 0)

    def both(positions, mask, cols, outside, g_rows):
        """Scatters the entries' `data * g` rows and writes their sampled products."""
        x_rows = _gather(
            x_ref,
            False,
            members,
            member_mask,
            cols,
            mask & ~outside,
            k_cols,
            k_mask,
            tiles.read_again,
        )
        sampled = jnp.sum(g_rows * x_rows.astype(g_rows.dtype), axis=-1)
        store(
            ddata_ref,
            (out_members[:, None, None], _distinct(positions, mask, tiles)[None]),
            _poisoned(sampled, outside[None]).astype(ddata_ref.dtype),
            mask=member_mask[:, None, None] & mask[None],
        )
        scatter(positions, mask, cols, outside, g_rows)

    def flag(bad_columns, bad_bounds):
        return bad_columns * _BAD_COLUMN + bad_bounds * _BAD_BOUNDS

    _walk_with_g_rows(indptr_ref, indices_ref, g_ref, tiles, False, 0, both, bad_ref, flag)


# ---------------------------------------------------------------------------------------
# Wrappers


def _tiles(platform, interpret, block_sizes, *, shape, nnz, k, batch) -> tuple[_Tiles, BlockSizes]:
    platform = _pallas.resolve_platform(platform, interpret, _PLATFORMS)
    m, n = shape
    block_sizes = (block_sizes or BlockSizes()).filled(
        platform=platform, num_cols=k, batch=batch, mean_row_length=nnz / max(m, 1)
    )
    chunk = block_sizes.long_lanes * block_sizes.chunk_steps
    tiles = _Tiles(
        m=m,
        n=n,
        nnz=nnz,
        k=k,
        batch=batch,
        block_rows=block_sizes.block_rows,
        lanes=block_sizes.lanes,
        row_cap=block_sizes.lanes * block_sizes.row_steps,
        long_lanes=block_sizes.long_lanes,
        unroll=block_sizes.unroll,
        chunk=chunk if chunk < nnz else 0,  # no row is longer than all the entries
        block_k=block_sizes.block_k,
        block_batch=block_sizes.block_batch if batch > 1 else 1,
        stream_entries=block_sizes.stream_entries,
        keep_operand=block_sizes.keep_operand,
        # One column a tile has nothing to vectorize, and its clamp and mask only cost
        # instructions.
        whole_column_tiles=(block_sizes.vector_loads or block_sizes.block_k == 1)
        and k % block_sizes.block_k == 0,
    )
    return tiles, block_sizes


def _launch(
    rows_kernel,
    operands,
    out_shape,
    tiles,
    k_blocks,
    options,
    *,
    poison=None,
    initial=None,
    chunk_programs=False,
):
    """The row-block kernel over `operands` (and `initial`, its output's starting value,
    aliased), one program per block of rows, k-block and batch block; with
    `chunk_programs`, one more per chunk of entries (`_row_block_or_chunk`). With a
    `poison` kernel, the kernel also writes a flag per program (1: invalid input) and the
    poisoning kernel, given whether any flag is set, writes NaN over all of the output."""
    interpret, block_sizes, name = options
    blocks = tiles.row_blocks + (tiles.chunks if chunk_programs else 0)
    grid = (blocks, k_blocks, pl.cdiv(tiles.batch, tiles.block_batch))
    params = _compiler_params(block_sizes)
    initial = () if initial is None else (initial,)
    flags = () if poison is None else (jax.ShapeDtypeStruct((blocks,), jnp.int32),)
    results = pl.pallas_call(
        rows_kernel,
        grid=grid,
        out_shape=(out_shape, *flags),
        input_output_aliases={len(operands): 0} if initial else {},
        compiler_params=params,
        interpret=interpret,
        name=f"{name}_rows",
    )(*operands, *initial)
    if poison is None:
        return results[0]
    out, bad = results
    return _poison_if(poison, jnp.max(bad) > 0, out, tiles, grid, options)


def _poison_if(poison, invalid, out, tiles, grid, options, name_suffix="poison"):
    """`poison`'s kernel over `out` (aliased) for the row-block launch's `grid`: NaN over
    all of it where the scalar `invalid` is set, a launch of programs that end at once
    where it is not."""
    interpret, block_sizes, name = options
    programs = min(_POISON_PROGRAMS, grid[0])
    return pl.pallas_call(
        functools.partial(poison, tiles=tiles, programs=programs),
        grid=(programs, *grid[1:]),
        out_shape=jax.ShapeDtypeStruct(out.shape, out.dtype),
        input_output_aliases={1: 0},
        compiler_params=_compiler_params(block_sizes),
        interpret=interpret,
        name=f"{name}_{name_suffix}",
    )(invalid.astype(jnp.int32).reshape(1), out)


def csr_matmul_triton(
    data,
    x,
    indices,
    indptr,
    *,
    shape: tuple[int, int],
    interpret: bool = False,
    platform: str | None = None,
    block_sizes: BlockSizes | None = None,
) -> jax.Array:
    """`Y = A @ x` for the CSR matrix `A = (data, indices, indptr)`.

    **Arguments:**

    - `data`, `x`: the `(nnz,)` values and the dense `(n, k)` operand, one dtype; or a
      batch: `(B, nnz)` values and a `(B, n, k)` or shared `(n, k)` operand.
    - `indices`, `indptr`: the CSR structure (`(nnz,)`, `(m + 1,)`).
    - `shape`: `(m, n)`, static.
    - `interpret`: run the kernel in Pallas interpret mode (any machine).
    - `platform`: `"cuda"`, `"rocm"` or `"cpu"` (interpret mode); `None`: `"cpu"` when
      interpreting, else `"cuda"`.
    - `block_sizes`: `None` fields take `BlockSizes.get_default`.

    **Returns:** `(m, k)` array in `x`'s dtype (`(B, m, k)` for a batch); NaN in the rows
    of an invalid structure (see the module docstring).
    """
    options = dict(interpret=interpret, platform=platform, block_sizes=block_sizes)
    return _product(_matmul_rows_kernel, "csr_matmul", data, x, indices, indptr, shape, **options)


def _product(rows_kernel, name, data, dense, indices, indptr, shape, **options):
    """`A @ dense` (`name` `"csr_matmul"`, `dense` `(n, k)`) or `A.T @ dense`
    (`"csr_matmul_t"`, `(m, k)`) by `rows_kernel`, with the batch axis of the product
    contract; the transposed product scatters into a zeroed result in the accumulation
    dtype and poisons it all for an invalid structure."""
    m, n = shape
    transposed = name == "csr_matmul_t"
    inner, outer = (m, n) if transposed else (n, m)
    check_structure(data, indices, indptr, shape)
    batch = data.shape[0] if data.ndim == 2 else None
    check_dense("g" if transposed else "x", dense, inner, data.dtype, batch)
    k, nnz = dense.shape[-1], indices.shape[0]
    lead = data.shape[:-1]
    if nnz > 0 and (m == 0 or n == 0):
        return jnp.full((*lead, outer, k), jnp.nan, dense.dtype)  # entries with no place
    if m == 0 or k == 0 or nnz == 0 or n == 0 or 0 in lead:
        return nan_if_invalid(jnp.zeros((*lead, outer, k), dense.dtype), indices, indptr, n)
    tiles, block_sizes = _tiles(
        options["platform"],
        options["interpret"],
        options["block_sizes"],
        shape=shape,
        nnz=nnz,
        k=k,
        batch=batch or 1,
    )
    out_shape = (batch or 1, outer, k)
    operands = (indptr, indices, data.reshape(batch or 1, -1), dense)
    launch_options = (options["interpret"], block_sizes, name)
    out_dtype, extra = dense.dtype, {}
    if transposed:  # atomic additions into the sums' dtype, rounded once after
        out_dtype = accumulation_dtype(dense.dtype)
        extra = dict(
            poison=_matmul_t_poison_kernel,
            initial=jnp.zeros(out_shape, out_dtype),
            chunk_programs=True,
        )
    elif tiles.chunk:
        operands += _chunked(operands, tiles, dense.ndim == 2, launch_options)
    out = _launch(
        functools.partial(rows_kernel, tiles=tiles, shared=dense.ndim == 2),
        operands,
        jax.ShapeDtypeStruct(out_shape, out_dtype),
        tiles,
        pl.cdiv(k, tiles.block_k),
        launch_options,
        **extra,
    ).astype(dense.dtype)
    return out if batch else out[0]


def _chunked(operands, tiles: _Tiles, shared: bool, options):
    """The chunk kernel over the product's `operands`: the partial sums and owners of
    every chunk of entries (`_matmul_chunks_kernel`)."""
    interpret, block_sizes, name = options
    indptr, _, data, dense = operands
    chunks, k = tiles.chunks, dense.shape[-1]
    return pl.pallas_call(
        functools.partial(_matmul_chunks_kernel, tiles=tiles, shared=shared),
        grid=(chunks, pl.cdiv(k, tiles.block_k), pl.cdiv(tiles.batch, tiles.block_batch)),
        out_shape=(
            jax.ShapeDtypeStruct((data.shape[0], chunks, 2, k), accumulation_dtype(dense.dtype)),
            jax.ShapeDtypeStruct((chunks, 2), indptr.dtype),
        ),
        compiler_params=_compiler_params(block_sizes),
        interpret=interpret,
        name=f"{name}_chunks",
    )(*operands)


def _scatters_with_atomics(interpret: bool) -> bool:
    """Whether the transposed product scatters with atomic additions: on a GPU (half
    precision into float32: float32 and float64 have hardware atomic addition on every
    GPU), unless `JAXSPARSE_DETERMINISTIC` is `1`. Interpret mode has no masked atomics:
    it sorts."""
    return not interpret and os.environ.get(DETERMINISTIC_ENV_VAR) != "1"


def csr_matmul_t_triton(
    data,
    g,
    indices,
    indptr,
    *,
    shape: tuple[int, int],
    interpret: bool = False,
    platform: str | None = None,
    block_sizes: BlockSizes | None = None,
) -> jax.Array:
    """`Y = A.T @ g`: on a GPU a scatter of every entry's `data[p] * g[row(p)]` into
    `Y[indices[p]]` with atomic additions (half precision into float32, rounded once), so
    its bits may vary from run to run (the order of the additions does); in interpret
    mode, or with `JAXSPARSE_DETERMINISTIC=1`, the product kernels on the transposed
    structure, built in XLA by a sort per call (deterministic).

    **Arguments:** as `csr_matmul_triton`, with `g` the `(m, k)` operand.

    **Returns:** `(n, k)` array in `g`'s dtype (`(B, n, k)` for a batch); NaN everywhere
    for an invalid structure.
    """
    if not _scatters_with_atomics(interpret):
        return matmul_t_by_transposed_structure(
            csr_matmul_triton,
            data,
            g,
            indices,
            indptr,
            shape=shape,
            interpret=interpret,
            platform=platform,
            block_sizes=block_sizes,
        )
    options = dict(interpret=interpret, platform=platform, block_sizes=block_sizes)
    return _product(
        _matmul_t_rows_kernel, "csr_matmul_t", data, g, indices, indptr, shape, **options
    )


def csr_sddmm_triton(
    g,
    x,
    indices,
    indptr,
    *,
    shape: tuple[int, int],
    interpret: bool = False,
    platform: str | None = None,
    block_sizes: BlockSizes | None = None,
) -> jax.Array:
    """Sampled product `out[p] = sum_c g[row(p), c] * x[indices[p], c]`: the gradient of
    `A @ x` with respect to `data` (cotangent `g`).

    **Arguments:** `g`: `(m, k)`; `x`: `(n, k)`, same dtype; the rest as `csr_matmul_triton`.

    **Returns:** `(nnz,)` array in `g`'s dtype (`(B, nnz)` if `g` or `x` is a `(B, rows, k)`
    batch); NaN for the entries of an invalid structure's rows.
    """
    check_sddmm(g, x, indices, indptr, shape)
    nnz, k = indices.shape[0], g.shape[-1]
    batch = next((a.shape[0] for a in (g, x) if a.ndim == 3), None)
    lead = (batch,) if batch is not None else ()
    if nnz == 0 or 0 in lead:
        return jnp.zeros((*lead, nnz), g.dtype)
    if 0 in shape:
        return jnp.full((*lead, nnz), jnp.nan, g.dtype)  # entries with no place
    if k == 0:
        return jnp.zeros((*lead, nnz), g.dtype)
    tiles, block_sizes = _tiles(
        platform, interpret, block_sizes, shape=shape, nnz=nnz, k=k, batch=batch or 1
    )
    out = _launch(
        functools.partial(_sddmm_rows_kernel, tiles=tiles, batched=(g.ndim == 3, x.ndim == 3)),
        (indptr, indices, g, x),
        jax.ShapeDtypeStruct((batch or 1, nnz), g.dtype),
        tiles,
        1,
        (interpret, block_sizes, "csr_sddmm"),
        poison=_sddmm_poison_kernel,
        chunk_programs=True,
    )
    return out if batch else out[0]


def csr_matmul_pullback_triton(
    g,
    data,
    x,
    indices,
    indptr,
    *,
    shape: tuple[int, int],
    interpret: bool = False,
    platform: str | None = None,
    block_sizes: BlockSizes | None = None,
):
    """`(csr_sddmm(g, x), A.T @ g)`: the gradients of `A @ x` in `data` and in `x` along
    the cotangent `g` (`_primitive.py`, "Gradient steps in one pass"). Where the
    transposed product scatters with atomic additions (`csr_matmul_t_triton`), for one
    matrix whose columns fit one column tile (`k <= block_k`, 64 by default): one pass
    over the entries (`_pullback_rows_kernel`), with the invalid structures' NaN of the
    two products. Else the two kernels.

    **Arguments:** `g` `(m, k)`, `data` `(nnz,)`, `x` `(n, k)` (or batches, which take the
    two kernels); the rest as `csr_matmul_triton`.

    **Returns:** `(nnz,)` and `(n, k)` arrays (batched: with the batch axis).
    """
    options = dict(shape=shape, interpret=interpret, platform=platform, block_sizes=block_sizes)
    check_structure(data, indices, indptr, shape)
    one_matrix = data.ndim == 1 and g.ndim == 2 and x.ndim == 2
    k, nnz = g.shape[-1], indices.shape[0]
    block_k = (block_sizes and block_sizes.block_k) or _MAX_BLOCK_K
    if (
        not one_matrix
        or not _scatters_with_atomics(interpret)
        or not 0 < k <= block_k
        or 0 in (nnz, *shape)
    ):
        return (
            csr_sddmm_triton(g, x, indices, indptr, **options),
            csr_matmul_t_triton(data, g, indices, indptr, **options),
        )
    return _pullback_in_one_pass(g, data, x, indices, indptr, **options)


def _pullback_in_one_pass(g, data, x, indices, indptr, *, shape, interpret, platform, block_sizes):
    """`csr_matmul_pullback_triton`'s one pass, for one matrix with `k <= block_k`: `dx`
    scattered with atomic additions in the accumulation dtype (`_scatters_with_atomics`),
    rounded once after; in interpret mode only inside `_bounds_check.out_of_bounds_reports`
    (whose lane-by-lane additions stand in)."""
    n = shape[1]
    check_sddmm(g, x, indices, indptr, shape)
    check_dense("x", x, n, data.dtype, None)
    nnz, k = indices.shape[0], g.shape[-1]
    tiles, block_sizes = _tiles(
        platform, interpret, block_sizes, shape=shape, nnz=nnz, k=k, batch=1
    )
    if k > tiles.block_k:
        raise ValueError(f"One pass takes one column tile: k = {k} > block_k = {tiles.block_k}.")
    blocks = tiles.row_blocks + tiles.chunks  # `_walk_with_g_rows`'s programs
    grid = (blocks, 1, 1)
    options = (interpret, block_sizes, "csr_pullback")
    dx_dtype = accumulation_dtype(x.dtype)
    dx, ddata, bad = pl.pallas_call(
        functools.partial(_pullback_rows_kernel, tiles=tiles),
        grid=grid,
        out_shape=(
            jax.ShapeDtypeStruct((1, n, k), dx_dtype),
            jax.ShapeDtypeStruct((1, nnz), g.dtype),
            jax.ShapeDtypeStruct((blocks,), jnp.int32),
        ),
        input_output_aliases={5: 0},
        compiler_params=_compiler_params(block_sizes),
        interpret=interpret,
        name="csr_pullback_rows",
    )(indptr, indices, data[None], g, x, jnp.zeros((1, n, k), dx_dtype))
    dx = _poison_if(_matmul_t_poison_kernel, jnp.max(bad) > 0, dx, tiles, grid, options, "dx")
    bad_bounds = jnp.max(bad & _BAD_BOUNDS) > 0
    ddata = _poison_if(_sddmm_poison_kernel, bad_bounds, ddata, tiles, grid, options, "ddata")
    return ddata[0], dx[0].astype(x.dtype)
