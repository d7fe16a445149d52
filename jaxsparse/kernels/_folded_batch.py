"""Batch axes folded into one, for calls that take one leading batch axis at most: the
native banded kernels (whose adjoints' values' cotangent, `native/dia_sddmm.h`, checks for
one), their host twins and the banded tangent primitive (`linalg/_banded_one_pass.py`).
Each level of `jax.vmap` adds its axis to the arrays, never to the call, which sees all of
them folded into one."""

import jax
import jax.numpy as jnp


def batch_shape(arrays, ranks, vmapped=None) -> tuple[int, ...]:
    """The leading axes beyond `ranks` that `arrays` carry (past the axis in front of those
    `vmapped`): the same on every array that has them."""
    vmapped = vmapped or (False,) * len(arrays)
    shapes = {
        a.shape[int(v) : a.ndim - rank]
        for a, rank, v in zip(arrays, ranks, vmapped, strict=True)
        if a.ndim - int(v) > rank
    }
    if len(shapes) > 1:
        raise ValueError(f"the batched arrays disagree on their batch axes: {sorted(shapes)}")
    return shapes.pop() if shapes else ()


def _with_batch(value, rank: int, batch: tuple[int, ...], vmapped: bool):
    """`value` broadcast to `(*batch, *core)`, `core` its last `rank` axes."""
    core = value.shape[value.ndim - rank :]
    if vmapped and value.ndim == rank + 1:
        value = value.reshape(value.shape[0], *(1,) * (len(batch) - 1), *core)
    return jnp.broadcast_to(value, (*batch, *core))


def fold_arrays(arrays, ranks, shared, batch: tuple[int, ...], vmapped=None) -> list:
    """`arrays` with the batch `batch` as one leading axis. An array's own batch axes are
    `batch[1:]` or none after `batch[0]` in front where `vmapped`, else `batch` or none; one
    marked `shared` that has none stays as it is (one matrix's values or factors for the
    whole batch), every other gets the batch's axes."""
    vmapped = vmapped or (False,) * len(arrays)
    return [
        a
        if keep and not v and a.ndim == rank
        else _with_batch(a, rank, batch, v).reshape(-1, *a.shape[a.ndim - rank :])
        for a, rank, keep, v in zip(arrays, ranks, shared, vmapped, strict=True)
    ]


def unfold(results, batch: tuple[int, ...]):
    """`results` with their one leading batch axis as the axes `batch`."""
    return jax.tree.map(lambda r: r.reshape(*batch, *r.shape[1:]), results)


def fold_batch(call, arrays, ranks, shared=None):
    """`call(*arrays)`, where `call` takes one leading batch axis at most and gives every
    result that axis when an array has it, for `arrays` with any leading axes beyond their
    `ranks` (the batch, the same on every array that has them) and under any depth of
    `jax.vmap`. An array marked `shared` that has no batch axes stays one for the whole
    batch; every other array gets the batch's axes."""
    ranks = tuple(ranks)
    shared = tuple(shared or (False,) * len(ranks))

    @jax.custom_batching.custom_vmap
    def folded(*arrays):
        batch = batch_shape(arrays, ranks)
        if not batch:
            return call(*arrays)
        return unfold(call(*fold_arrays(arrays, ranks, shared, batch)), batch)

    @folded.def_vmap
    def _(axis_size, in_batched, *arrays):
        batch = (axis_size, *batch_shape(arrays, ranks, in_batched))
        results = folded(*fold_arrays(arrays, ranks, shared, batch, in_batched))
        return unfold(results, batch), jax.tree.map(lambda _: True, results)

    return folded(*arrays)
