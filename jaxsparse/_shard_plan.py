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
    entries_per_block = max(1, int(np.max(np.diff(starts))))
    # needs[p][q]: sorted columns of block q that the rows of device p touch.
    needs = []
    for p in range(devices):
        columns = np.unique(indices[starts[p] : starts[p + 1]])
        owners = columns // column_block
        needs.append([columns[owners == q] for q in range(devices)])
    lengths = {}
    for p in range(devices):
        for q in range(devices):
            if q != p and len(needs[p][q]):
                lengths[q - p] = max(lengths.get(q - p, 0), len(needs[p][q]))
    shifts = tuple(sorted(lengths.items()))
    plan = ColumnPlan(devices, row_block, column_block, entries_per_block, shifts, False)
    if 2 * plan.exchanged_rows() >= devices * (devices - 1) * column_block and devices > 1:
        plan = dataclasses.replace(plan, shifts=(), all_gather=True)
    arrays = _column_plan_arrays(plan, indices, indptr, starts, needs, m)
    return plan, arrays


def _column_plan_arrays(plan, indices, indptr, starts, needs, m) -> ColumnPlanArrays:
    devices, row_block, column_block = plan.devices, plan.row_block, plan.column_block
    width = plan.entries_per_block
    zero_row = plan.buffer - 1
    entry_source = np.full((devices, width), -1, np.int64)
    local_indices = np.full((devices, width), zero_row, np.int64)
    local_indptr = np.zeros((devices, row_block + 1), np.int64)
    send_positions = np.zeros((devices, plan.sent_per_device), np.int64)
    segment_start = {}
    start = column_block
    for shift, length in plan.shifts:
        segment_start[shift] = start
        start += length
    for p in range(devices):
        count = starts[p + 1] - starts[p]
        entry_source[p, :count] = np.arange(starts[p], starts[p + 1])
        columns = indices[starts[p] : starts[p + 1]]
        if plan.all_gather:
            local_indices[p, :count] = columns
        else:
            local_indices[p, :count] = _buffer_rows(columns, p, needs[p], segment_start, plan)
        rows = np.arange(p * row_block, (p + 1) * row_block + 1)
        local_indptr[p] = indptr[np.minimum(rows, m)] - starts[p]
        # The padding slots sit in the last local row, after its entries.
        local_indptr[p, -1] = width
    if not plan.all_gather:
        position = 0
        for shift, length in plan.shifts:
            for p in range(devices):
                q = p + shift
                if 0 <= q < devices:
                    wanted = needs[p][q] - q * column_block
                    send_positions[q, position : position + len(wanted)] = wanted
            position += length
    return ColumnPlanArrays(entry_source, local_indices, local_indptr, send_positions)


def _buffer_rows(columns, p, needs_of_p, segment_start, plan) -> np.ndarray:
    """Each column's row in device `p`'s buffer (own block first, then received segments)."""
    owners = columns // plan.column_block
    rows = columns - p * plan.column_block
    for q, wanted in enumerate(needs_of_p):
        if q == p or not len(wanted):
            continue
        mine = owners == q
        rows[mine] = segment_start[q - p] + np.searchsorted(wanted, columns[mine])
    return rows
