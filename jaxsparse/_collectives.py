"""Bytes a compiled XLA program sends between devices, read from its HLO text.

`collective_bytes(jax.jit(f).lower(*args).compile().as_text())` sums, per kind of
collective, the bytes that cross from one device to another, over all devices:

- `collective-permute`: its buffer times the number of source-target pairs;
- `all-gather`: each device receives the other `size - 1` pieces of its group;
- `reduce-scatter`: each device sends `size - 1` pieces of its input;
- `all-to-all`: each device sends `size - 1` of its `size` pieces;
- `all-reduce`: counted as a reduce-scatter plus an all-gather (a ring's traffic).

The checks of the sharded products (`tests/sharding_checks.py`) and their benchmark
(`benchmarks/sharding.py`) use it to compare what runs with what the plan says.
"""

import re

import numpy as np

_ITEM_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "u16": 2}
_ITEM_BYTES |= {"f32": 4, "s32": 4, "u32": 4, "f64": 8, "s64": 8, "u64": 8, "c64": 8}
_ITEM_BYTES |= {"c128": 16}

KINDS = ("collective-permute", "all-gather", "reduce-scatter", "all-to-all", "all-reduce")
_INSTRUCTION = re.compile(
    r"=\s*(?P<dtype>[a-z]+\d*)\[(?P<dims>[\d,]*)\][^ ]*\s+(?P<kind>[a-z-]+)\((?P<rest>.*)$"
)
_ASYNC = re.compile(
    r"\b(collective-permute|all-gather|reduce-scatter|all-reduce|all-to-all)-start\("
)


def collective_bytes(hlo_text: str) -> dict[str, int]:
    """Bytes sent between devices by each kind of collective in `hlo_text` (see the module).

    **Arguments:**

    - `hlo_text`: a compiled module's text (`jax.jit(f).lower(...).compile().as_text()`).

    **Returns:** a dict from each of `KINDS` to its total bytes (0 when absent).
    """
    if _ASYNC.search(hlo_text):
        raise ValueError(
            "`hlo_text` holds asynchronous collectives (`...-start`), which this reader does "
            "not count; read the synchronous module (the CPU compiler's)."
        )
    totals = dict.fromkeys(KINDS, 0)
    for line in hlo_text.splitlines():
        match = _INSTRUCTION.search(line)
        if match is None or match["kind"] not in KINDS:
            continue
        dims = [int(d) for d in match["dims"].split(",") if d]
        result = int(np.prod(dims, dtype=np.int64)) * _ITEM_BYTES[match["dtype"]]
        totals[match["kind"]] += _sent(match["kind"], result, match["rest"])
    return totals


def _sent(kind: str, result: int, attributes: str) -> int:
    if kind == "collective-permute":
        pairs = re.search(r"source_target_pairs=\{(.*?)\}\}", attributes)
        return result * (pairs[1].count("{") if pairs else 0)
    groups, size = _replica_groups(attributes)
    if kind == "all-gather":
        return groups * size * (result // size) * (size - 1)
    if kind == "reduce-scatter":
        return groups * size * result * (size - 1)
    if kind == "all-to-all":
        return groups * size * (result // size) * (size - 1)
    return groups * 2 * result * (size - 1)


def _replica_groups(attributes: str) -> tuple[int, int]:
    """`(number of groups, devices per group)` from `replica_groups=...`."""
    iota = re.search(r"replica_groups=\[(\d+),(\d+)\]", attributes)
    if iota:
        return int(iota[1]), int(iota[2])
    # Newer XLA names them by mesh axes: `replica_groups=mesh['x'=4,'y'=2] {'x'}`.
    by_axes = re.search(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}", attributes)
    if by_axes:
        sizes = {name: int(size) for name, size in re.findall(r"'(\w+)'=(\d+)", by_axes[1])}
        size = int(np.prod([sizes[name] for name in re.findall(r"'(\w+)'", by_axes[2])]))
        return int(np.prod(list(sizes.values()))) // size, size
    listed = re.search(r"replica_groups=\{(\{[\d,]*\}(?:,\{[\d,]*\})*)\}", attributes)
    if listed is None:
        raise ValueError(f"cannot read the replica groups of: {attributes[:200]}")
    groups = re.findall(r"\{([\d,]*)\}", listed[1])
    return len(groups), len(groups[0].split(","))
