"""`shard_from_rows`: a sharded matrix built by each process from its own rows only.

On a mesh spanning several processes (`jax.distributed`), no process has to hold the whole
matrix: each one asks for the row blocks of its own devices, lays them out, and learns
from the others only what the communication plan needs, in one exchange at build time:

- DIA: the offsets of the diagonals each block stores (the plan is their union);
- CSR: each block's number of entries and the columns it touches in every other device's
  operand block (`_shard_plan.block_needs`), from which every process computes the same
  `ColumnPlan`, and each device the rows it sends.

The plans are the ones `shard` computes from the whole matrix, so a product moves the
same bytes either way.
"""

from collections.abc import Callable

import jax
import numpy as np
import scipy.sparse
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from ._base import SparseMatrix, index_dtype_for, storable_host_values
from ._shard import ShardedCSRMatrix, ShardedDIAMatrix, ShardedMatrix, check_mesh
from ._shard_plan import (
    block_needs,
    block_size,
    halo_plan,
    local_structure,
    plan_from_needs,
    send_positions,
)


def shard_from_rows(
    rows: Callable,
    shape: tuple[int, int],
    mesh: jax.sharding.Mesh,
    axis: str,
    *,
    format: str = "csr",
) -> ShardedMatrix:
    """A sharded matrix whose row blocks each process builds from its own rows.

    In the spirit of `jax.make_array_from_callback`: `rows(start, stop)` is called, in
    each process, once for each row block held by that process's devices (the block of
    mesh position `p` along `axis` is rows `[p * row_block, min((p + 1) * row_block,
    m))`, `row_block = ceil(m / devices)`), and must return those rows. The processes then
    exchange once what the communication plan needs (see the module), so every process
    must call `shard_from_rows` with the same `shape`, `mesh`, `axis` and `format`.

    **Arguments:**

    - `rows`: a function `(start, stop) -> ` the rows `[start, stop)` of the matrix, as a
      `scipy.sparse` matrix or array (or a jaxsparse matrix) of shape `(stop - start, n)`.
    - `shape`: `(m, n)`, the whole matrix's shape.
    - `mesh`, `axis`: as for `shard`.
    - `format`: `"csr"` (the blocks' stored entries) or `"dia"` (the diagonals on which
      some block stores an entry).

    **Returns:** a `ShardedCSRMatrix` or `ShardedDIAMatrix`, equal to `shard` of the
    whole matrix in that format, with the same plan.
    """
    devices = check_mesh(mesh, axis)
    if not callable(rows):
        raise TypeError(
            f"`rows` must be a function (start, stop) -> rows, got {type(rows).__name__}."
        )
    if format not in ("csr", "dia"):
        raise ValueError(f"`format` must be 'csr' or 'dia', got {format!r}.")
    if (
        len(shape) != 2
        or not all(isinstance(size, int | np.integer) for size in shape)
        or min(shape) < 1
    ):
        raise ValueError(f"`shape` must be two positive ints (m, n), got {shape}.")
    shape = (int(shape[0]), int(shape[1]))
    row_block = block_size(shape[0], devices)
    blocks = {
        p: _block(rows, p * row_block, min((p + 1) * row_block, shape[0]), shape[1])
        for p in _process_blocks(mesh, axis)
    }
    dtype = _common_dtype(blocks)
    if format == "dia":
        return _dia_from_blocks(blocks, dtype, shape, mesh, axis)
    return _csr_from_blocks(blocks, dtype, shape, mesh, axis)


def _process_blocks(mesh, axis) -> list[int]:
    """The positions along `axis` of this process's devices."""
    position = mesh.axis_names.index(axis)
    here = jax.process_index()
    return sorted(
        {
            index[position]
            for index, device in np.ndenumerate(mesh.devices)
            if device.process_index == here
        }
    )


def _block(rows, start: int, stop: int, n: int) -> scipy.sparse.csr_array:
    """Rows `[start, stop)` from `rows`, as a canonical CSR array (no rows past the matrix)."""
    if start >= stop:
        return scipy.sparse.csr_array((0, n))
    block = rows(start, stop)
    if isinstance(block, SparseMatrix):
        block = block.to_scipy()
    if not scipy.sparse.issparse(block):
        raise TypeError(
            f"`rows({start}, {stop})` must return a scipy.sparse matrix or a jaxsparse matrix, "
            f"got {type(block).__name__}."
        )
    if block.shape != (stop - start, n):
        raise ValueError(
            f"`rows({start}, {stop})` must have shape {(stop - start, n)}, got {block.shape}."
        )
    block = scipy.sparse.csr_array(block)
    block.sum_duplicates()
    # Integer and boolean values become floating, as `from_scipy` makes them.
    return scipy.sparse.csr_array(
        (storable_host_values(block.data), block.indices, block.indptr), shape=block.shape
    )


def _across_processes(array: np.ndarray) -> np.ndarray:
    """Every process's int64 `array` (same shape everywhere), stacked along a new first
    axis. It travels as pairs of int32 so that it arrives exact whether or not JAX has
    64-bit types enabled."""
    if jax.process_count() == 1:
        return array[None]
    halves = np.ascontiguousarray(array, np.int64).view(np.int32)
    gathered = np.asarray(multihost_utils.process_allgather(halves), np.int32)
    return np.ascontiguousarray(gathered).view(np.int64)


def _common_dtype(blocks: dict) -> np.dtype:
    """The values' dtype, which every process's blocks must share (exchanged by its
    one-character code)."""
    codes = {ord(block.dtype.char) for block in blocks.values() if block.shape[0]}
    if len(codes) > 1:
        raise TypeError(f"`rows` must return blocks of one dtype, got {sorted(map(chr, codes))}.")
    code = codes.pop() if codes else -1
    everywhere = set(_across_processes(np.array([code], np.int64))[:, 0].tolist()) - {-1}
    if len(everywhere) != 1:
        found = sorted(str(np.dtype(chr(code))) for code in everywhere)
        raise TypeError(f"`rows` must return the same dtype in every process, got {found}.")
    return np.dtype(chr(everywhere.pop()))


def _gathered_lists(lists: dict[int, np.ndarray], slots: int) -> list[np.ndarray]:
    """`slots` integer lists, each filled by the process that holds it (`lists`, slot ->
    array), made known to every process: the lengths first, then the lists padded."""
    lengths = np.full(slots, -1, np.int64)
    for slot, values in lists.items():
        lengths[slot] = len(values)
    lengths = _across_processes(lengths).max(axis=0)
    if np.any(lengths < 0):
        raise ValueError("`mesh` has row blocks that no process holds.")
    ends = np.cumsum(lengths)
    flat = np.full(int(ends[-1]) if slots else 0, np.iinfo(np.int64).min, np.int64)
    for slot, values in lists.items():
        flat[ends[slot] - lengths[slot] : ends[slot]] = values
    flat = _across_processes(flat).max(axis=0)
    return np.split(flat, ends[:-1])


def _place(pieces: dict[int, np.ndarray], spec: P, mesh, axis) -> jax.Array:
    """The global array whose piece on each device at position `p` along `axis` is
    `pieces[p]`, concatenated along the dimension that `spec` shards over `axis`."""
    sharding = NamedSharding(mesh, spec)
    dim = list(spec).index(axis)
    piece_shape = next(iter(pieces.values())).shape
    shape = list(piece_shape)
    shape[dim] *= mesh.shape[axis]
    position = mesh.axis_names.index(axis)
    block_of = {device: index[position] for index, device in np.ndenumerate(mesh.devices)}
    arrays = [
        jax.device_put(pieces[block_of[device]], device) for device in sharding.addressable_devices
    ]
    return jax.make_array_from_single_device_arrays(tuple(shape), sharding, arrays)


def _dia_from_blocks(blocks, dtype, shape, mesh, axis) -> ShardedDIAMatrix:
    devices = mesh.shape[axis]
    row_block = block_size(shape[0], devices)
    entries = {}
    for p, block in blocks.items():
        coo = block.tocoo()
        rows = coo.row.astype(np.int64)
        entries[p] = (rows, coo.col - (rows + p * row_block), coo.data)
    local_offsets = {p: np.unique(offsets) for p, (_, offsets, _) in entries.items()}
    offsets = np.unique(np.concatenate(_gathered_lists(local_offsets, devices)))
    offsets = tuple(int(off) for off in offsets)
    plan = halo_plan(offsets, shape, devices)
    pieces = {}
    for p, (rows, block_offsets, values) in entries.items():
        diagonal = np.searchsorted(offsets, block_offsets)
        piece = np.zeros((len(offsets), plan.window), dtype)
        piece[diagonal, rows + np.asarray(plan.local_offsets, np.int64)[diagonal]] = values
        pieces[p] = piece
    data = _place(pieces, P(None, axis), mesh, axis)
    return ShardedDIAMatrix(data, offsets, shape, mesh, axis, plan)


def _csr_from_blocks(blocks, dtype, shape, mesh, axis) -> ShardedCSRMatrix:
    devices = mesh.shape[axis]
    row_block, column_block = block_size(shape[0], devices), block_size(shape[1], devices)
    needs_here = {
        p: block_needs(block.indices, p, column_block, devices) for p, block in blocks.items()
    }
    lists = {p * devices + q: needs[q] for p, needs in needs_here.items() for q in range(devices)}
    lists |= {devices * devices + p: np.array([block.nnz]) for p, block in blocks.items()}
    gathered = _gathered_lists(lists, devices * devices + devices)
    needs = [gathered[p * devices : (p + 1) * devices] for p in range(devices)]
    counts = [int(count[0]) for count in gathered[devices * devices :]]
    plan = plan_from_needs(needs, counts, shape, devices)
    index_dtype = index_dtype_for(shape, max(sum(counts), plan.buffer))
    sends = send_positions(plan, needs).astype(index_dtype)
    values, indices, indptrs = {}, {}, {}
    for p, block in blocks.items():
        block_indptr = np.full(row_block + 1, block.nnz, np.int64)
        block_indptr[: block.shape[0] + 1] = block.indptr
        local_indices, local_indptr = local_structure(
            plan, p, block.indices, block_indptr, needs[p]
        )
        values[p] = np.zeros(plan.entries_per_block, dtype)
        values[p][: block.nnz] = block.data
        indices[p] = local_indices.astype(index_dtype)
        indptrs[p] = local_indptr.astype(index_dtype)
    place = lambda pieces: _place(pieces, P(axis), mesh, axis)  # noqa: E731
    return ShardedCSRMatrix(
        place(values),
        place(indices),
        place(indptrs),
        place({p: sends[p] for p in blocks}),
        shape,
        mesh,
        axis,
        plan,
    )
