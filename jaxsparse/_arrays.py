"""Host values onto the device, and arrays indexed, each as one compiled program or none.

Outside a trace every `jax.numpy` call is its own compiled program, compiled again for each
new shape: the eager paths of the containers (construction, conversions, host-side
structure changes) go through these helpers instead of dispatching op by op.
"""

import jax
import jax.numpy as jnp
import numpy as np


def device_array(values, dtype=None) -> jax.Array:
    """`jnp.asarray(values, dtype)`, with a numpy array copied to the device: `jnp.asarray`
    lifts one through `lax.stage`, which outside a trace compiles a program for each new
    shape, and may share the array's memory, which its owner can still change."""
    if isinstance(values, np.ndarray) and values.dtype.kind not in "OSU":
        dtype = jax.dtypes.canonicalize_dtype(values.dtype if dtype is None else dtype)
        return jax.device_put(np.array(values, dtype, copy=True))
    return jnp.asarray(values, dtype=dtype)


@jax.jit
def take_at(values, *index) -> jax.Array:
    """`values[index]` for index arrays (numpy ones included), as one compiled program:
    eagerly, indexing dispatches its index wrap, broadcasts and gather one by one, each
    compiled for every new shape."""
    return values[index]


@jax.jit
def take_at_each(values, *indices) -> tuple[jax.Array, ...]:
    """`values[index]` for each of `indices`, as one compiled program (see `take_at`)."""
    return tuple(values[index] for index in indices)
