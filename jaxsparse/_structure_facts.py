"""Facts about known CSR structures, computed once and kept while their index arrays live.

A `jax.Array` never changes, so what holds of a pair `(indices, indptr)` (that it is a
valid structure for a shape, the structure of its transpose, whether a position repeats)
holds for as long as both arrays live. `remembered(indices, indptr, fact, compute)` returns
`compute()` the first time and the same object afterwards. The facts sit in a table beside
the arrays, keyed by their ids, and leave it when either array is collected
(`weakref.finalize`), before its id can be reused. Host (numpy) arrays can change, traced
ones have no values, and deleted ones (donated) no longer hold theirs: their facts are
computed every time. A fact holding a traced array is not kept, and one holding an array
deleted since (a donated transpose) is computed anew. Nor is a fact holding arrays about
arrays the table itself holds: the transpose of a kept transpose would keep a third pair,
and `M = M.T` in a loop a chain as long as the loop while the first pair lives.
"""

import weakref
from collections.abc import Callable, Hashable
from typing import NamedTuple

import jax

from ._base import is_concrete


class _Entry(NamedTuple):
    facts: dict[Hashable, object]
    finalizers: list[weakref.finalize]


_FACTS: dict[tuple[int, int], _Entry] = {}
# The ids of the arrays the kept facts hold, which live while held.
_HELD: set[int] = set()


def remembered(indices, indptr, fact: Hashable, compute: Callable[[], object]):
    """`compute()`, computed once per pair of known index arrays and `fact`."""
    arrays = (indices, indptr)
    if (
        not all(isinstance(a, jax.Array) for a in arrays)
        or not is_concrete(*arrays)
        or any(a.is_deleted() for a in arrays)
    ):
        return compute()
    key = (id(indices), id(indptr))
    entry = _FACTS.get(key)
    if entry is None:
        entry = _FACTS[key] = _Entry({}, [])
        for array in {id(a): a for a in arrays}.values():
            entry.finalizers.append(weakref.finalize(array, _forget, key))
    if fact in entry.facts and not _holds_deleted(entry.facts[fact]):
        return entry.facts[fact]
    value = compute()
    held = _held_arrays(value)
    if is_concrete(*held) and not (held and _HELD.intersection(key)):
        _HELD.difference_update(map(id, _held_arrays(entry.facts.get(fact))))
        entry.facts[fact] = value
        _HELD.update(map(id, held))
    return value


def _forget(key: tuple[int, int]) -> None:
    """Drops a pair's facts, and the finalizer on its other array, which may live on."""
    entry = _FACTS.pop(key, None)
    if entry is None:
        return
    for value in entry.facts.values():
        _HELD.difference_update(map(id, _held_arrays(value)))
    for finalizer in entry.finalizers:
        finalizer.detach()


def _held_arrays(value) -> list:
    return [leaf for leaf in jax.tree.leaves(value) if isinstance(leaf, jax.Array)]


def _holds_deleted(value) -> bool:
    return any(leaf.is_deleted() for leaf in _held_arrays(value))
