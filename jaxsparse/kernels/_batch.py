"""The batch axis of the product contract (`_primitive.py`, "Batches") for implementations
written for one matrix in pure `jax.numpy`: `jax.vmap` makes them one batched program, in
which whatever does not depend on the batch (the structure, a shared operand) is computed
once."""

import functools

import jax


def over_batch(function, arrays, ranks, **params):
    """`function(*arrays, **params)`, where an array with one more axis than its unbatched
    rank in `ranks` carries a leading batch axis and the others are shared by the batch."""
    in_axes = tuple(
        0 if a.ndim == rank + 1 else None for a, rank in zip(arrays, ranks, strict=True)
    )
    if all(axis is None for axis in in_axes):
        return function(*arrays, **params)
    return jax.vmap(functools.partial(function, **params), in_axes=in_axes)(*arrays)
