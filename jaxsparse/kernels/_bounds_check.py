"""Memory accesses of the Triton kernels, with out-of-bounds reports in interpret mode.

A GPU kernel that reads or writes outside a buffer reads garbage or faults the device,
while Pallas's interpret mode clamps the index silently; so kernels access memory through
`load`, `store` and `atomic_add` here (`plgpu`'s, with the indices as a tuple), and
inside `out_of_bounds_reports()` each access also reports, from interpret mode, how many
unmasked lanes index outside their buffer. Tests run the kernels on invalid structures in
that mode and require no report. Outside it the wrappers add nothing to the kernel.
"""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

_reports: list | None = None


@contextlib.contextmanager
def out_of_bounds_reports():
    """Within: kernels traced in interpret mode report unmasked out-of-bounds lanes.

    Yields the list the reports go to, `(access, buffer shape, lanes outside)` each,
    complete when the block exits. Only for interpret mode (a GPU kernel has no host
    callbacks); caches are cleared on entry and exit, so no kernel traced without the
    reports is reused inside, nor one with them after.
    """
    global _reports
    jax.clear_caches()
    _reports = reports = []
    try:
        yield reports
        jax.effects_barrier()
    finally:
        _reports = None
        jax.clear_caches()


def load(ref, index: tuple, *, mask, other, eviction_policy: str | None = None):
    """`ref[index]` where `mask`, `other` elsewhere; masked lanes read nothing.
    `eviction_policy`: Triton's cache hint, `"evict_first"` for values read once (they
    leave the cache first), `"evict_last"` for values read again."""
    _report("load", ref, index, mask)
    return plgpu.load(ref.at[index], mask=mask, other=other, eviction_policy=eviction_policy)


def store(ref, index: tuple, value, *, mask):
    """`ref[index] = value` where `mask`; masked lanes write nothing."""
    _report("store", ref, index, mask)
    plgpu.store(ref.at[index], value, mask=mask)


def atomic_add(ref, index: tuple, value, *, mask):
    """`ref[index] += value` where `mask`, atomically (GPU only: interpret mode has no
    masked atomics; under the reports it adds one unmasked lane after another, exact
    whichever lanes share an address)."""
    _report("atomic_add", ref, index, mask)
    if _reports is None:
        plgpu.atomic_add(ref, index, value, mask=mask)
        return
    shape = jnp.broadcast_shapes(jnp.shape(mask), jnp.shape(value), *map(jnp.shape, index))
    mask, value, *index = (jnp.ravel(jnp.broadcast_to(a, shape)) for a in (mask, value, *index))

    def add_lane(lane, _):
        @pl.when(mask[lane])
        def _():
            position = tuple(i[lane] for i in index)
            ref[position] = ref[position] + value[lane]

    jax.lax.fori_loop(0, mask.size, add_lane, None)


def _report(access: str, ref, index: tuple, mask) -> None:
    if _reports is None:
        return
    outside = jnp.zeros((), bool)
    for axis, position in enumerate(index):
        position = jnp.asarray(position)
        outside = outside | (position < 0) | (position >= ref.shape[axis])
    lanes = jnp.sum((mask & outside).astype(jnp.int32))
    shape = tuple(ref.shape)
    reports = _reports

    def record(count):
        if int(np.asarray(count)) > 0:
            reports.append((access, shape, int(np.asarray(count))))

    jax.debug.callback(record, lanes)
