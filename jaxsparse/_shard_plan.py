"""Communication plans for row-sharded products, computed on the host once per structure.

A matrix of shape `(m, n)` sharded over `devices` devices by rows: device `p` owns the
output rows `[p * row_block, (p + 1) * row_block)` with `row_block = ceil(m / devices)`, and
the operand rows `[p * column_block, (p + 1) * column_block)` with `column_block =
ceil(n / devices)`: JAX's own blocking of a sharded axis, with the last blocks padded (JAX
needs a sharded axis to divide evenly, so sharded operands have `devices * column_block`
rows, zero past `n`).

A plan says which operand rows each device needs from which other, as *shifts*: device `p`
receives from device `p + shift` (one `jax.lax.ppermute` per shift, every pair sending a
buffer of the same length). The plans here are plain data (hashable, so they can be static
metadata); `_shard_exchange.py` turns them into collectives.
"""

import dataclasses

import numpy as np

from ._coordinates import sorted_unique


def block_size(rows: int, devices: int) -> int:
    """Rows per device when `rows` are split in `devices` blocks (the last one padded)."""
    return max(1, -(-rows // devices))


def shift_pairs(shift: int, devices: int) -> tuple[tuple[int, int], ...]:
    """The `(source, target)` pairs of a `ppermute` where device `p` receives from `p + shift`."""
    return tuple((p + shift, p) for p in range(devices) if 0 <= p + shift < devices)


@dataclasses.dataclass(frozen=True)
class HaloPlan:
    """The exchange of a row-sharded DIA matrix: a window of operand rows per device.

    Diagonal `d` of device `p`'s rows touches the operand rows `[p * row_block +
    offsets[d], (p + 1) * row_block + offsets[d])`. The window is the union of those
    intervals (overlapping ones merged, the gaps between them left out), and the local
    matrix `(row_block, window)` has the diagonals at `local_offsets`.

    - When `row_block == column_block` (always for square matrices), the window is cut from
      the owner's block and other devices' blocks at the same positions on every device:
      `pieces` lists `(shift, lo, hi)`, rows `[lo, hi)` of device `p + shift`'s block, in
      window order. With offsets no longer than a block that is `-min(offsets)` rows from
      the left neighbour and `max(offsets)` from the right one; longer offsets reach further
      devices. Either way only the rows the diagonals touch are sent: the halo minimum.
    - Otherwise (a rectangular matrix whose two blockings differ) the windows do not line
      up with the blocks; `all_gather` is set, the window is the whole interval from
      `first = min(offsets)` and every device gathers the operand and slices its window:
      correct, not minimal.
    """

    devices: int
    row_block: int
    column_block: int
    local_offsets: tuple[int, ...]
    window: int
    pieces: tuple[tuple[int, int, int], ...]
    all_gather: bool
    first: int

    def exchanged_rows(self) -> int:
        """Operand rows sent between devices per product, summed over all pairs."""
        if self.all_gather:
            return self.devices * (self.devices - 1) * self.column_block
        return sum(
            (hi - lo) * len(shift_pairs(shift, self.devices))
            for shift, lo, hi in self.pieces
            if shift
        )

    def summary(self) -> str:
        """One line: what each device receives per product."""
        if self.all_gather:
            return "all-gather (the row and column blockings differ)"
        parts = [
            f"{hi - lo} rows from p{shift:+d}"
            for shift, lo, hi in self.pieces
            if shift and shift_pairs(shift, self.devices)
        ]
        return "halo: " + (", ".join(parts) or "none")


def halo_plan(offsets: tuple[int, ...], shape: tuple[int, int], devices: int) -> HaloPlan:
    """The `HaloPlan` of a DIA matrix with these offsets (those inside the matrix) and
    `shape`."""
    m, n = shape
    row_block, column_block = block_size(m, devices), block_size(n, devices)
    if not offsets:
        return HaloPlan(devices, row_block, column_block, (), row_block, (), False, 0)
    first, last = min(offsets), max(offsets)
    if row_block != column_block:
        local = tuple(off - first for off in offsets)
        window = row_block + last - first
        return HaloPlan(devices, row_block, column_block, local, window, (), True, first)
    block = row_block
    clusters = []  # merged intervals [start, stop) of window rows, relative to the block
    for off in sorted(offsets):
        if clusters and off <= clusters[-1][1]:
            clusters[-1][1] = off + block
        else:
            clusters.append([off, off + block])
    pieces, cluster_position, position = [], {}, 0
    for start, stop in clusters:
        cluster_position[start] = position
        for shift in range(start // block, (stop - 1) // block + 1):
            lo = max(start, shift * block) - shift * block
            hi = min(stop, (shift + 1) * block) - shift * block
            pieces.append((shift, lo, hi))
        position += stop - start
    local = []
    for off in offsets:
        start = max(s for s, _ in clusters if s <= off)
        local.append(cluster_position[start] + off - start)
    return HaloPlan(devices, block, block, tuple(local), position, tuple(pieces), False, first)


@dataclasses.dataclass(frozen=True)
class ColumnPlan:
    """The exchange of a row-sharded CSR matrix (static part).

    Device `p` builds a buffer: its own operand block, then for each `(shift, length)` in
    `shifts` the `length` operand entries device `p + shift` sends it (the entries its rows
    touch in that block, padded to the longest such list over the pairs of that shift),
    then one zero row. Its local matrix indexes that buffer. When the plan would move at
    least half as much as an all-gather of the operand, `all_gather` is set instead and
    the buffer is the whole gathered operand and the zero row (one collective beats many
    nearly as large).
    """

    devices: int
    row_block: int
    column_block: int
    entries_per_block: int
    shifts: tuple[tuple[int, int], ...]
    all_gather: bool

    @property
    def sent_per_device(self) -> int:
        """Length of the concatenated send lists each device holds."""
        return sum(length for _, length in self.shifts)

    @property
    def buffer(self) -> int:
        """Rows of the buffer each device's local matrix multiplies."""
        if self.all_gather:
            return self.devices * self.column_block + 1
        return self.column_block + self.sent_per_device + 1

    def exchanged_rows(self) -> int:
        """Operand rows sent between devices per product, summed over all pairs."""
        if self.all_gather:
            return self.devices * (self.devices - 1) * self.column_block
        return sum(length * len(shift_pairs(shift, self.devices)) for shift, length in self.shifts)

    def summary(self) -> str:
        """One line: what each device receives per product."""
        if self.all_gather:
            return "all-gather (the pattern needs much of the operand)"
        parts = [f"{length} rows from p{shift:+d}" for shift, length in self.shifts]
        return "plan: " + (", ".join(parts) or "none")


@dataclasses.dataclass(frozen=True)
class ColumnPlanArrays:
    """The per-device arrays of a `ColumnPlan`, each `(devices, ...)` (row `p` for device `p`).

    - `entry_source`: `(devices, entries_per_block)`: the entry of the global CSR matrix
      each local slot holds, or -1 for padding (value 0, pointing at the zero row).
    - `local_indices`: `(devices, entries_per_block)`: each slot's row in the buffer.
    - `local_indptr`: `(devices, row_block + 1)`: local row pointers.
    - `send_positions`: `(devices, sent_per_device)`: rows of its own block each device
      sends, shift after shift.
    """

    entry_source: np.ndarray
    local_indices: np.ndarray
    local_indptr: np.ndarray
    send_positions: np.ndarray


def column_plan(
    indices: np.ndarray, indptr: np.ndarray, shape: tuple[int, int], devices: int
) -> tuple[ColumnPlan, ColumnPlanArrays]:
    """The communication plan of a CSR structure row-sharded over `devices` devices."""
    m, n = shape
    row_block, column_block = block_size(m, devices), block_size(n, devices)
    indices, indptr = np.asarray(indices, np.int64), np.asarray(indptr, np.int64)
    starts = indptr[np.minimum(np.arange(devices + 1) * row_block, m)]
    blocks = [indices[starts[p] : starts[p + 1]] for p in range(devices)]
    needs = [block_needs(columns, p, column_block, devices) for p, columns in enumerate(blocks)]
    plan = plan_from_needs(needs, [len(columns) for columns in blocks], shape, devices)
    width = plan.entries_per_block
    entry_source = np.full((devices, width), -1, np.int64)
    local_indices = np.empty((devices, width), np.int64)
    local_indptr = np.empty((devices, row_block + 1), np.int64)
    for p in range(devices):
        entry_source[p, : len(blocks[p])] = np.arange(starts[p], starts[p + 1])
        rows = np.arange(p * row_block, (p + 1) * row_block + 1)
        block_indptr = indptr[np.minimum(rows, m)] - starts[p]
        local_indices[p], local_indptr[p] = local_structure(
            plan, p, blocks[p], block_indptr, needs[p]
        )
    arrays = ColumnPlanArrays(
        entry_source, local_indices, local_indptr, send_positions(plan, needs)
    )
    return plan, arrays


def block_needs(columns: np.ndarray, p: int, column_block: int, devices: int) -> list:
    """`needs[q]`: the sorted columns of operand block `q` that device `p`'s entries
    (`columns`, global column indices) touch; empty for `q == p` (its own block is local)."""
    columns = sorted_unique(np.asarray(columns, np.int64))
    owners = columns // column_block
    empty = np.zeros(0, np.int64)
    return [columns[owners == q] if q != p else empty for q in range(devices)]


def plan_from_needs(
    needs: list, entries: list[int], shape: tuple[int, int], devices: int
) -> ColumnPlan:
    """The `ColumnPlan` from every device's `block_needs` and its number of entries.

    Only this (the columns each block touches outside itself, and the entry counts)
    needs to be known about other devices' rows, which is what lets each process of a
    multi-process mesh build its blocks from its own rows (`shard_from_rows`).
    """
    m, n = shape
    row_block, column_block = block_size(m, devices), block_size(n, devices)
    lengths = {}
    for p in range(devices):
        for q in range(devices):
            if q != p and len(needs[p][q]):
                lengths[q - p] = max(lengths.get(q - p, 0), len(needs[p][q]))
    shifts = tuple(sorted(lengths.items()))
    entries_per_block = max(1, int(max(entries)))
    plan = ColumnPlan(devices, row_block, column_block, entries_per_block, shifts, False)
    if 2 * plan.exchanged_rows() >= devices * (devices - 1) * column_block and devices > 1:
        plan = dataclasses.replace(plan, shifts=(), all_gather=True)
    return plan


def local_structure(
    plan: ColumnPlan, p: int, columns: np.ndarray, block_indptr: np.ndarray, needs_of_p: list
) -> tuple[np.ndarray, np.ndarray]:
    """Device `p`'s local CSR structure: `(local_indices, local_indptr)`, of lengths
    `plan.entries_per_block` and `plan.row_block + 1`.

    **Arguments:**

    - `columns`: the global columns of its entries, row after row.
    - `block_indptr`: `(row_block + 1,)` row pointers into `columns` (rows past the matrix
      empty).
    - `needs_of_p`: its `block_needs`.
    """
    width, zero_row = plan.entries_per_block, plan.buffer - 1
    columns = np.asarray(columns, np.int64)
    local_indices = np.full(width, zero_row, np.int64)
    if plan.all_gather:
        local_indices[: len(columns)] = columns
    else:
        local_indices[: len(columns)] = _buffer_rows(columns, p, needs_of_p, plan)
    local_indptr = np.asarray(block_indptr, np.int64).copy()
    # The padding slots sit in the last local row, after its entries.
    local_indptr[-1] = width
    return local_indices, local_indptr


def send_positions(plan: ColumnPlan, needs: list) -> np.ndarray:
    """`(devices, sent_per_device)`: the rows of its own block each device sends, shift
    after shift (zeros past a shorter list)."""
    devices, column_block = plan.devices, plan.column_block
    positions = np.zeros((devices, plan.sent_per_device), np.int64)
    if plan.all_gather:
        return positions
    start = 0
    for shift, length in plan.shifts:
        for p in range(devices):
            q = p + shift
            if 0 <= q < devices:
                wanted = needs[p][q] - q * column_block
                positions[q, start : start + len(wanted)] = wanted
        start += length
    return positions


def _segment_starts(plan: ColumnPlan) -> dict[int, int]:
    """Where each shift's received rows start in a device's buffer."""
    starts, start = {}, plan.column_block
    for shift, length in plan.shifts:
        starts[shift] = start
        start += length
    return starts


def _buffer_rows(columns, p, needs_of_p, plan) -> np.ndarray:
    """Each column's row in device `p`'s buffer (own block first, then received segments)."""
    segment_start = _segment_starts(plan)
    owners = columns // plan.column_block
    rows = columns - p * plan.column_block
    for q, wanted in enumerate(needs_of_p):
        if q == p or not len(wanted):
            continue
        mine = owners == q
        rows[mine] = segment_start[q - p] + np.searchsorted(wanted, columns[mine])
    return rows
