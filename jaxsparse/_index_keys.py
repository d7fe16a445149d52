"""The index keys of `A[rows, cols]`, one per axis, checked and resolved against the
axis' size (`axis_key`). A key becomes one of:

- a point: an int in `[0, size)`, or a traced 0-d integer array, clamped into range as
  `jnp` indexing clamps (one row or column);
- a `range`: a slice with its bounds resolved (`slice.indices`), any step;
- picks: an int64 numpy array in `[0, size)`, from a list, a concrete integer array or a
  boolean mask's positions; or a traced integer array, clamped, which only a dense result
  (`A[i, picks]`, `A[picks, picks]`) can take, its length being static.

Picks keep their shape: `np.ix_`'s column `(r, 1)` and row `(1, c)` select a submatrix.
"""

import jax.numpy as jnp
import numpy as np

from ._base import is_concrete


def split_key(key) -> tuple:
    """`(rows_key, cols_key)` of `A[key]`, `:` for those not given (numpy's rule)."""
    if not isinstance(key, tuple):
        key = (key,)
    if len(key) > 2:
        raise IndexError(f"a sparse matrix takes at most two indices, got {len(key)}.")
    rows_key, cols_key = (*key, slice(None), slice(None))[:2]
    if rows_key is Ellipsis or cols_key is Ellipsis:
        raise IndexError("a sparse matrix takes no `...`: index its rows and columns.")
    if rows_key is None or cols_key is None:
        raise IndexError("a sparse matrix takes no `None` (new axis): it has two, always.")
    return rows_key, cols_key


def axis_key(key, size: int, what: str):
    """`key` as a point, a `range` or picks along an axis of `size` (module docstring);
    `what` (`"row"`, `"column"`) names the axis in errors."""
    if isinstance(key, slice):
        return range(*key.indices(size))
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        if not -size <= key < size:
            raise IndexError(f"{what} index {key} is out of range for size {size}.")
        return int(key) % size
    if isinstance(key, (list, tuple)):
        key = np.asarray(key)
    array = key if hasattr(key, "ndim") and hasattr(key, "dtype") else None
    if array is None or not _integer_or_boolean(array) or (array.ndim == 0 and array.dtype == bool):
        raise IndexError(
            f"a {what} index must be an integer, a slice, or an array of integers or "
            f"booleans, got {key!r}."
        )
    if not is_concrete(array):
        return _traced_picks(array, size, what)
    if array.dtype == np.bool_ and array.ndim:
        if array.shape != (size,):
            raise IndexError(
                f"a boolean mask of {what}s must have shape ({size},), got {array.shape}."
            )
        return np.flatnonzero(np.asarray(array))
    if array.ndim > 2:
        raise IndexError(f"a {what} index takes at most 2 dimensions, got {array.shape}.")
    picked = np.asarray(array).astype(np.int64)
    if picked.size and (picked.min() < -size or picked.max() >= size):
        raise IndexError(f"{what} index out of range for size {size}: {picked.tolist()}.")
    return picked % max(size, 1) if picked.ndim else int(picked) % size


def _integer_or_boolean(array) -> bool:
    # An empty list is float64 to numpy: it picks nothing, whatever its dtype.
    return array.size == 0 or jnp.issubdtype(array.dtype, jnp.integer) or array.dtype == bool


def _traced_picks(array, size: int, what: str):
    """A traced index: a point or picks, made non-negative and clamped into range."""
    if array.dtype == jnp.bool_:
        raise TypeError(
            f"a boolean mask of {what}s selects as many {what}s as it holds `True`, which "
            "depends on values traced under `jax.jit`: index outside `jit`."
        )
    if array.ndim > 2:
        raise IndexError(f"a {what} index takes at most 2 dimensions, got {array.shape}.")
    # No value is in range of an empty axis, and its size is static: `jnp`'s IndexError now.
    if size == 0:
        raise IndexError(f"a {what} index is out of range for size 0, whatever its value.")
    return jnp.clip(jnp.where(array < 0, array + size, array), 0, size - 1)


def is_point(key) -> bool:
    """Whether an `axis_key` picks one row or column."""
    return isinstance(key, int) or (hasattr(key, "ndim") and key.ndim == 0)


def is_picks(key) -> bool:
    """Whether an `axis_key` holds index arrays (numpy or traced), not a point or range."""
    return hasattr(key, "ndim") and key.ndim > 0


def span(key, size: int) -> tuple[int, int]:
    """`(start, stop)` of a `range` of step 1; the whole axis for any other key."""
    if isinstance(key, range) and key.step == 1:
        return key.start, max(key.start, key.stop)
    return 0, size


def host_positions(key, what: str) -> np.ndarray | None:
    """The positions a `range` of another step than 1 or picks select, on the host, flat;
    None for a range of step 1 (`span` covers it)."""
    if isinstance(key, range):
        return None if key.step == 1 else np.asarray(key, np.int64)
    if not isinstance(key, np.ndarray):
        raise TypeError(
            f"selecting a list of {what}s changes the number of entries, which depends on "
            "index values traced under `jax.jit`: select outside `jit`, or take single "
            f"{what}s (`A[i]`, dense and jit-able)."
        )
    return key.reshape(-1)
