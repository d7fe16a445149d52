"""Native calls over any number of leading batch axes.

The banded solve handlers take at most one batch axis, and an FFI call's `vmap_method`
adds one more axis to its arguments for every `vmap` around it: nested `vmap`s (a
`jax.hessian`, `vmap` of a gradient whose arguments already carry a batch) would hand a
handler two. `over_leading_axes` makes such a call a `custom_vmap` function instead: a
`vmap` adds one leading axis to its arguments and calls it again, and the call merges all
leading axes into the one the handler takes.
"""

import jax
import jax.numpy as jnp


def _leading(leaf, rank: int) -> tuple:
    return leaf.shape[: leaf.ndim - rank]


def _with_lead(leaf, rank: int, lead: tuple):
    """`leaf`, whose leading axes are none or a suffix of `lead`, broadcast to `lead`."""
    core = leaf.shape[leaf.ndim - rank :]
    padded = leaf.reshape((1,) * (len(lead) + rank - leaf.ndim) + leaf.shape)
    return jnp.broadcast_to(padded, (*lead, *core))


def over_leading_axes(function, ranks: tuple, shared: tuple):
    """`function(*args)` for arguments with any number of leading axes.

    `ranks[i]` is argument `i`'s rank for one member (a pytree of ranks like the argument
    for a pytree argument). The arguments that carry leading axes carry the same ones; an
    argument with `shared[i]` may lack them (one matrix for every member), the others are
    broadcast to them. `function` gets those axes merged into one (or none), and all its
    results carry them; they come back with the axes split again."""

    def leaf_facts(args):
        """The leaves of `args`, their ranks and whether each may be shared."""
        leaves, tree = jax.tree.flatten(args)
        leaf_ranks, leaf_shared = [], []
        for arg, rank, alone in zip(args, ranks, shared, strict=True):
            leaf_ranks += jax.tree.leaves(rank)
            leaf_shared += [alone] * len(jax.tree.leaves(arg))
        return leaves, tree, leaf_ranks, leaf_shared

    @jax.custom_batching.custom_vmap
    def call(*args):
        leaves, tree, leaf_ranks, leaf_shared = leaf_facts(args)
        lead = max((_leading(leaf, r) for leaf, r in zip(leaves, leaf_ranks, strict=True)), key=len)
        if not lead:
            return function(*args)
        merged = [
            _with_lead(leaf, rank, lead).reshape(-1, *leaf.shape[leaf.ndim - rank :])
            if leaf.ndim > rank or not alone
            else leaf
            for leaf, rank, alone in zip(leaves, leaf_ranks, leaf_shared, strict=True)
        ]
        out = function(*tree.unflatten(merged))
        return jax.tree.map(lambda value: value.reshape(*lead, *value.shape[1:]), out)

    @call.def_vmap
    def _(axis_size, in_batched, *args):
        leaves, tree, leaf_ranks, leaf_shared = leaf_facts(args)
        batched = jax.tree.leaves(in_batched)
        inner = max(
            (
                _leading(leaf, r)[int(b) :]
                for leaf, r, b in zip(leaves, leaf_ranks, batched, strict=True)
            ),
            key=len,
        )
        lead = (axis_size, *inner)
        moved = []
        for leaf, rank, alone, is_batched in zip(
            leaves, leaf_ranks, leaf_shared, batched, strict=True
        ):
            if is_batched:  # (B, core) or (B, *inner, core)
                padded = (1,) * (len(inner) + rank + 1 - leaf.ndim)
                leaf = leaf.reshape(leaf.shape[:1] + padded + leaf.shape[1:])
                leaf = jnp.broadcast_to(leaf, (*lead, *leaf.shape[len(lead) :]))
            elif leaf.ndim > rank or not alone:
                leaf = _with_lead(leaf, rank, lead)
            moved.append(leaf)
        out = call(*tree.unflatten(moved))
        return out, jax.tree.map(lambda _: True, out)

    return call
