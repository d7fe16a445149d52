"""scipy.sparse's elementwise methods: the ufuncs that keep zeros (`A.sin()`, `A.sqrt()`,
...).

- A ufunc `f` with `f(0) == 0` (`ZERO_PRESERVING_UFUNCS`) gives a matrix of the same
  format and structure holding `jnp.f` of the stored values, after repeated CSR entries
  are summed (as scipy does). DIA slots outside the matrix are zeroed first, so `f` of
  whatever they held (a NaN for `sqrt(-1)`) never reaches a product or a gradient.
"""

import functools

import jax
import jax.numpy as jnp

from ._base import register_for_format
from ._batching import (
    over_batch,
)
from ._comparisons import _distinct
from ._coordinates import may_repeat
from ._dia_layout import inside_slots

# scipy's ufunc methods (those with `f(0) == 0`), and whether each takes complex values
# (numpy's `floor`, `ceil`, `trunc`, `deg2rad`, `rad2deg` do not).
ZERO_PRESERVING_UFUNCS: dict[str, bool] = {
    "sin": True,
    "tan": True,
    "arcsin": True,
    "arctan": True,
    "sinh": True,
    "tanh": True,
    "arcsinh": True,
    "arctanh": True,
    "rint": True,
    "sign": True,
    "floor": False,
    "ceil": False,
    "trunc": False,
    "expm1": True,
    "log1p": True,
    "deg2rad": False,
    "rad2deg": False,
    "sqrt": True,
}


def with_zero_preserving_ufuncs(cls):
    """A class decorator: one method per entry of `ZERO_PRESERVING_UFUNCS` (`A.sin()`)."""
    for name in ZERO_PRESERVING_UFUNCS:
        setattr(cls, name, _ufunc_method(cls, name))
    return cls


def _ufunc_method(cls, name: str):
    def method(self):
        return apply_ufunc(self, name)

    method.__name__ = name
    method.__qualname__ = f"{cls.__qualname__}.{name}"
    method.__doc__ = (
        f"`jnp.{name}` of every entry, in the same format and structure "
        f"(`{name}(0) == 0`), as scipy's `{name}()`; repeated CSR entries are summed first."
    )
    return method


@over_batch
def apply_ufunc(matrix, name: str):
    """`jnp.<name>` of the matrix's entries, on its structure (see the module docstring)."""
    if jnp.issubdtype(matrix.dtype, jnp.complexfloating) and not ZERO_PRESERVING_UFUNCS[name]:
        raise TypeError(f"`{name}` is not defined for complex values (as in numpy and scipy).")
    summed = _summed(matrix)
    return summed.with_data(getattr(jnp, name)(stored_values(summed)))


def _summed(matrix):
    """`matrix` with each position stored once: itself when that is known on the host."""
    return matrix if may_repeat(matrix) is False else _distinct(matrix)


@functools.singledispatch
def stored_values(matrix) -> jax.Array:
    """`matrix.data`, with any slot that lies outside the matrix zeroed."""
    return matrix.data


@register_for_format("dia", stored_values)
def _dia_stored_values(matrix) -> jax.Array:
    return inside_slots(matrix.data, matrix.offsets, matrix.shape, range(len(matrix.offsets)))
