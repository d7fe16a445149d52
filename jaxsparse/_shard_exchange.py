"""The exchanges of row-sharded products: collectives built from a plan (`_shard_plan.py`).

Each function runs inside `jax.shard_map` on one device's operand block `(column_block,
k)` and returns what that device's local matrix multiplies. Each is linear in the block,
so its transpose (`jax.linear_transpose`, the same collectives run backwards: a
`ppermute` transposes to the reverse `ppermute`, an `all_gather` to a `psum_scatter`)
sends a transposed product's partial sums home with the same bytes.
"""

import jax
import jax.numpy as jnp
from jax import lax

from ._shard_plan import ColumnPlan, HaloPlan, shift_pairs


def received(part: jax.Array, axis: str, shift: int, devices: int) -> jax.Array:
    """`part` as sent by device `p + shift` to every device `p` (zeros where none exists)."""
    pairs = shift_pairs(shift, devices)
    if not pairs:
        return jnp.zeros_like(part)
    return lax.ppermute(part, axis, pairs)


def halo_window(block: jax.Array, plan: HaloPlan, axis: str) -> jax.Array:
    """Device `p`'s window of operand rows (see `HaloPlan`), `(plan.window, k)`, zero
    outside the operand."""
    if plan.all_gather:
        return _window_from_all_gather(block, plan, axis)
    pieces = []
    for shift, lo, hi in plan.pieces:
        part = block[lo:hi]
        pieces.append(received(part, axis, shift, plan.devices) if shift else part)
    if not pieces:  # no diagonal inside the matrix reads the operand
        return jnp.zeros((plan.window, block.shape[1]), block.dtype)
    return jnp.concatenate(pieces)


def _window_from_all_gather(block, plan: HaloPlan, axis: str) -> jax.Array:
    gathered = lax.all_gather(block, axis, tiled=True)
    front = max(0, -plan.first)
    back = max(0, (plan.devices - 1) * plan.row_block + plan.first + plan.window - len(gathered))
    padded = jnp.pad(gathered, ((front, back), (0, 0)))
    start = lax.axis_index(axis) * plan.row_block + plan.first + front
    return lax.dynamic_slice_in_dim(padded, start, plan.window)


def column_buffer(
    block: jax.Array, send_positions: jax.Array, plan: ColumnPlan, axis: str
) -> jax.Array:
    """Device `p`'s buffer, `(plan.buffer, k)`: its block, what each shift sends it, a zero row.

    `send_positions`: `(plan.sent_per_device,)`, the rows of `block` this device sends,
    shift after shift.
    """
    zero_row = jnp.zeros((1, block.shape[1]), block.dtype)
    if plan.all_gather:
        return jnp.concatenate([lax.all_gather(block, axis, tiled=True), zero_row])
    parts, start = [block], 0
    for shift, length in plan.shifts:
        part = block[send_positions[start : start + length]]
        parts.append(received(part, axis, shift, plan.devices))
        start += length
    parts.append(zero_row)
    return jnp.concatenate(parts)


def sent_back(exchange, received_rows: jax.Array, block_rows: int) -> jax.Array:
    """The transpose of a linear `exchange` of one `(block_rows, k)` operand block, applied
    to `received_rows` (shaped like what `exchange` returns): each row's value is sent
    back to, and summed into, the block row it came from."""
    block = jax.ShapeDtypeStruct((block_rows, received_rows.shape[1]), received_rows.dtype)
    (out,) = jax.linear_transpose(exchange, block)(received_rows)
    return out
