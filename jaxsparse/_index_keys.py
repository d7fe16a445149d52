"""The index keys of `A[rows, cols]`, one per axis, checked and resolved against the
axis' size (`axis_key`). A key becomes one of:

- a point: an int in `[0, size)`, or a traced 0-d integer array, clamped into range as
  `jnp` indexing clamps (one row or column);
- a `range`: a slice with its bounds resolved (`slice.indices`), any step;
- picks: an int64 numpy array in `[0, size)`, from a list, a concrete integer array or a
  boolean mask's positions; or a traced integer array, clamped, which only a dense result
  (`A[i, picks]`, `A[picks, picks]`) can take, its length being static.

Picks keep their shape: `np.ix_`'s column `(r, 1)` and row `(1, c)` select a submatrix.
A 2-D boolean mask of the matrix's shape picks entries (`mask_positions`).
"""

import jax
import jax.numpy as jnp
import numpy as np

from ._base import index_dtype_for, is_concrete


def mask_positions(key, shape: tuple[int, int]):
    """`(rows, cols)` of the `True` entries of a 2-D boolean mask of the matrix's shape,
    numpy's `A[mask]` (row-major); None for any other key."""
    if not (hasattr(key, "dtype") and key.dtype == bool and getattr(key, "ndim", 0) == 2):
        return None
    if tuple(key.shape) != tuple(shape):
        raise IndexError(f"a boolean mask of entries must have shape {shape}, got {key.shape}.")
    if not is_concrete(key):
        raise TypeError(
            "a boolean mask of entries selects as many entries as it holds `True`, which "
            "depends on values traced under `jax.jit`: index outside `jit`."
        )
    return np.nonzero(np.asarray(key))


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
    # An empty list is float64 to numpy: it picks nothing, whatever its dtype.
    from_list = isinstance(key, (list, tuple))
    array = np.asarray(key) if from_list else key
    if (
        not (hasattr(array, "ndim") and hasattr(array, "dtype"))
        or not (_integer_or_boolean(array.dtype) or (from_list and array.size == 0))
        or (array.ndim == 0 and array.dtype == bool)
    ):
        raise IndexError(
            f"a {what} index must be an integer, a slice, or an array of integers or "
            f"booleans, got {key!r}."
        )
    if array.ndim > 2:
        raise IndexError(f"a {what} index takes at most 2 dimensions, got {array.shape}.")
    if not is_concrete(array):
        return _traced_picks(array, size, what)
    array = np.asarray(array)
    if array.dtype == np.bool_:
        if array.shape != (size,):
            raise IndexError(
                f"a boolean mask of {what}s must have shape ({size},), got {array.shape}."
            )
        return np.flatnonzero(array)
    # Checked in the key's own dtype: a cast first would wrap large unsigned values.
    if array.size and (array.min() < -size or array.max() >= size):
        raise IndexError(f"{what} index out of range for size {size}: {array.tolist()}.")
    picked = array.astype(np.int64) % max(size, 1)
    return picked if picked.ndim else int(picked)


def _integer_or_boolean(dtype) -> bool:
    return jnp.issubdtype(dtype, jnp.integer) or dtype == jnp.bool_


def _traced_picks(array, size: int, what: str):
    """A traced index: a point or picks, made non-negative and clamped into range, in a
    dtype that holds `size` (an int8 key would wrap at `array + size`)."""
    if array.dtype == jnp.bool_:
        raise TypeError(
            f"a boolean mask of {what}s selects as many {what}s as it holds `True`, which "
            "depends on values traced under `jax.jit`: index outside `jit`."
        )
    # No value is in range of an empty axis, and its size is static: `jnp`'s IndexError now.
    if size == 0 and array.size:
        raise IndexError(f"a {what} index is out of range for size 0, whatever its value.")
    wide = jax.dtypes.canonicalize_dtype(index_dtype_for((size, size), 0))
    if jnp.issubdtype(array.dtype, jnp.unsignedinteger):
        # Clamped in the key's dtype, where a cast first could wrap a large value.
        array = jnp.minimum(array, min(max(size - 1, 0), jnp.iinfo(array.dtype).max))
        array = array.astype(wide)
    else:
        array = array.astype(np.promote_types(array.dtype, wide))  # widened exactly
    clamped = jnp.clip(jnp.where(array < 0, array + size, array), 0, max(size - 1, 0))
    return clamped.astype(wide)


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
