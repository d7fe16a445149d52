"""A sharded matrix back to one `DIAMatrix` or `CSRMatrix` (`ShardedMatrix.unshard`).

The values are read out of the devices' local layouts by gathers that `jax.jit` and
autodiff follow, so `S.unshard()` is differentiable in `S.data`. A CSR structure is
rebuilt on the host from the sharded index arrays (gathered from every process when
the mesh spans several), as `shard` built it there.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from ._csr import CSRMatrix
from ._dia import DIAMatrix


def host_array(array) -> np.ndarray:
    """`array` as one numpy array on this host, gathered from every process if the mesh
    spans several (all processes must call it then, as for any collective)."""
    if isinstance(array, jax.Array) and not array.is_fully_addressable:
        return np.asarray(multihost_utils.process_allgather(array, tiled=True))
    return np.asarray(array)


def replicated(array: jax.Array, mesh: jax.sharding.Mesh) -> jax.Array:
    """`array` whole on every device of `mesh` (what reading it back out needs: a slice of
    a sharded axis that does not fall on block boundaries is refused on `Explicit` axes)."""
    return jax.sharding.reshard(array, NamedSharding(mesh, P(*[None] * array.ndim)))


def unshard_dia(data, offsets, shape, plan) -> DIAMatrix:
    """The `DIAMatrix` of a `ShardedDIAMatrix`'s fields (see its layout)."""
    m, n = shape
    devices, row_block, window = plan.devices, plan.row_block, plan.window
    local = jnp.reshape(data, (len(offsets), devices, window))
    diagonals = []
    for d, off in enumerate(offsets):
        start = plan.local_offsets[d]
        by_rows = local[d, :, start : start + row_block].reshape(-1)[:m]
        # Column `j` of a DIA diagonal holds row `j - off`: shift the rows by `off`.
        padded = jnp.pad(by_rows, (max(off, 0), max(0, n - off - m)))
        diagonals.append(padded[max(0, -off) : max(0, -off) + n])
    stacked = jnp.stack(diagonals) if diagonals else jnp.zeros((0, n), data.dtype)
    return DIAMatrix(stacked, offsets=tuple(offsets), shape=shape)


def unshard_csr(data, indices, indptr, send_positions, shape, plan, index_dtype) -> CSRMatrix:
    """The `CSRMatrix` of a `ShardedCSRMatrix`'s fields; the structure must be concrete."""
    devices, row_block = plan.devices, plan.row_block
    indices = host_array(indices).reshape(devices, -1).astype(np.int64)
    indptr = host_array(indptr).reshape(devices, row_block + 1).astype(np.int64)
    sends = host_array(send_positions).reshape(devices, -1).astype(np.int64)
    columns_of_buffer = _buffer_columns(plan, sends)
    rows = np.concatenate(
        [
            p * row_block + np.repeat(np.arange(row_block), np.diff(indptr[p]))
            for p in range(devices)
        ]
    )
    columns = np.take_along_axis(columns_of_buffer, indices, axis=1).reshape(-1)
    # Padding slots point at the buffer's zero row, whose column is -1.
    stored = np.flatnonzero(columns >= 0)
    counts = np.bincount(rows[stored], minlength=shape[0])[: shape[0]]
    new_indptr = np.concatenate([[0], np.cumsum(counts)]).astype(index_dtype)
    return CSRMatrix(
        jnp.asarray(data)[stored],
        columns[stored].astype(index_dtype),
        new_indptr,
        shape=shape,
    )


def _buffer_columns(plan, sends: np.ndarray) -> np.ndarray:
    """`(devices, plan.buffer)`: the global column each row of each device's buffer holds
    (-1 for the zero row and for rows sent by no device)."""
    devices, column_block = plan.devices, plan.column_block
    if plan.all_gather:
        row = np.concatenate([np.arange(devices * column_block), [-1]])
        return np.tile(row, (devices, 1))
    table = np.full((devices, plan.buffer), -1, np.int64)
    for p in range(devices):
        table[p, :column_block] = p * column_block + np.arange(column_block)
        position, start = column_block, 0
        for shift, length in plan.shifts:
            q = p + shift
            if 0 <= q < devices:
                table[p, position : position + length] = (
                    q * column_block + sends[q, start : start + length]
                )
            position += length
            start += length
    return table
