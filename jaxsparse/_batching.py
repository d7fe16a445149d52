"""Batched matrices: a `DIAMatrix` or `CSRMatrix` whose array leaves carry leading batch axes.

A matrix returned by `jax.vmap(build)(...)` (or built with batched `data`) stands for `B`
matrices of one `shape`. Every leaf has a known unbatched rank (the format's `leaf_ranks`);
the axes before it are the batch, and a leaf without them (CSR index arrays shared by the
batch) belongs to every member. Operations that take a batch map over it with `jax.vmap`,
so the structure shared by the batch is handled once; the others call `refuse_batch`,
which names the batch instead of answering for one matrix. `docs/batching.md` lists which.
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np


class PerMember(eqx.Module):
    """A dense operand of `map_over_batch` with the batch's axes in front: each member of
    the batch gets its own slice (`rank` is the rank of one slice)."""

    array: jax.Array
    rank: int = eqx.field(static=True)


def batch_shape(matrix) -> tuple[int, ...]:
    """The leading batch axes shared by the batched leaves of `matrix` (`()` if none)."""
    if isinstance(matrix, PerMember):
        return tuple(matrix.array.shape[: matrix.array.ndim - matrix.rank])
    found = set()
    for name, rank in type(matrix).leaf_ranks.items():
        leaf = getattr(matrix, name, None)
        if leaf is not None and hasattr(leaf, "ndim") and leaf.ndim > rank:
            found.add(tuple(leaf.shape[: leaf.ndim - rank]))
    if len(found) > 1:
        raise ValueError(
            f"the leaves of a {type(matrix).__name__} carry different batch axes {sorted(found)}; "
            "a batch must be the same for every leaf that has one."
        )
    return found.pop() if found else ()


def _leaf_axes(matrix):
    """`jax.vmap`'s `in_axes` for `matrix`: 0 on the leaves that carry the batch."""
    if isinstance(matrix, PerMember):
        return 0
    ranks = type(matrix).leaf_ranks

    def axis(path, leaf):
        return 0 if leaf.ndim > ranks[path[-1].name] else None

    return jax.tree_util.tree_map_with_path(axis, matrix)


def is_batched(value) -> bool:
    """Whether `value` is a jaxsparse matrix (or a `PerMember` operand) with batch axes."""
    batchable = isinstance(value, PerMember) or hasattr(type(value), "leaf_ranks")
    return batchable and bool(batch_shape(value))


def batches_structure(matrix) -> bool:
    """Whether a batched `matrix` carries a structure per member (batched CSR index
    arrays), not one structure shared by the batch."""
    ranks = getattr(type(matrix), "leaf_ranks", {})
    return any(getattr(matrix, name).ndim > rank for name, rank in ranks.items() if name != "data")


def map_over_batch(function, *operands):
    """`function(*operands)` for each member of the batch of the batched matrices among
    `operands` (all of one batch shape), and each `PerMember` operand's slice for it;
    other operands are shared by the whole batch.

    **Returns:** `function`'s result with the batch axes leading every output leaf.
    """
    batches = {batch_shape(value) for value in operands if is_batched(value)}
    if not batches:
        return function(*(_unwrap(value) for value in operands))
    if len(batches) > 1:
        raise ValueError(
            f"batched matrices with different batches {sorted(batches)} cannot be combined."
        )
    in_axes = tuple(_leaf_axes(value) if is_batched(value) else None for value in operands)
    # One batch axis per `vmap`: the function maps again over any axes that remain.
    return jax.vmap(lambda *members: map_over_batch(function, *members), in_axes=in_axes)(*operands)


def _unwrap(value):
    return value.array if isinstance(value, PerMember) else value


def over_batch(method):
    """A method of a matrix (or a function of one) mapped over the matrix's batch, if any;
    the other arguments are shared by the batch."""

    @functools.wraps(method)
    def mapped(matrix, *args, **kwargs):
        if not is_batched(matrix):
            return method(matrix, *args, **kwargs)
        return map_over_batch(lambda member: method(member, *args, **kwargs), matrix)

    return mapped


def pair_dense_with_batch(value, batch: tuple[int, ...], operation: str):
    """A dense operand of an elementwise `operation` with a matrix of batch `batch`: one of
    shape `batch + (rows, columns)` pairs up with the members (a `PerMember`); one of rank 2
    or less is shared by the batch; other values are returned as they are."""
    if not isinstance(value, (jax.Array, np.ndarray)) or value.ndim <= 2:
        return value
    if value.ndim != len(batch) + 2 or tuple(value.shape[: len(batch)]) != batch:
        raise ValueError(
            f"`{operation}`: a dense operand of shape {tuple(value.shape)} does not fit a "
            f"batched matrix (batch={batch}): pass one of rank 2 or less, shared by the batch, "
            f"or one of shape {batch} + (rows, columns), one per member."
        )
    return PerMember(jnp.asarray(value), 2)


def refuse_batch(operation: str, *operands) -> None:
    """A ValueError naming the batch if any operand is a batched matrix: `operation` works
    on one matrix at a time."""
    for value in operands:
        if is_batched(value):
            raise ValueError(
                f"{operation} does not take a batched matrix (batch={batch_shape(value)}, "
                f"shape={value.shape}): apply it to each member inside `jax.vmap`, or take "
                "one member with `A.batch_member(b)`."
            )


def batch_member(matrix, index):
    """Member `index` of a batched matrix's batch (one leading axis taken away)."""
    if not is_batched(matrix):
        raise ValueError(f"`batch_member` takes a batched matrix; this {matrix!r} has no batch.")
    ranks = type(matrix).leaf_ranks

    def take(path, leaf):
        return leaf[index] if leaf.ndim > ranks[path[-1].name] else leaf

    return jax.tree_util.tree_map_with_path(take, matrix)
