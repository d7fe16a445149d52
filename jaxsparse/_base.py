"""`SparseMatrix`: what every jaxsparse format shares.

A format subclass holds its arrays as pytree leaves and its `shape` (and any other Python
metadata) as static fields, names itself in `format` (which registers it, so formats can
convert into each other without importing each other), registers its product with
`_matmul.sparse_times_dense`, implements the conversions, and gets from here the products
on both sides, `T`, `astype`, `toarray`, a readable `repr`, and its
registration for `jax.export` serialization (`_export.py`). Arithmetic, reductions and
indexing come from the `_operators.SparseOperators` mixin, the format's second base.
"""

import abc
import numbers
import warnings
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse

from ._arrays import device_array
from ._batching import batch_member, batch_shape
from ._export import register_serialization
from ._matmul import matmul

_FORMATS: dict[str, type] = {}
# Format name -> (singledispatch function, implementation) waiting for the format's class.
_PENDING: dict[str, list[tuple]] = {}


def format_class(name: str) -> type:
    """The registered class of the format called `name` (`"dia"`, `"csr"`)."""
    return _FORMATS[name]


def register_for_format(name: str, dispatcher):
    """A decorator: register the function with `dispatcher` (a `functools.singledispatch`)
    for the class of the format called `name`.

    Operations dispatch on the matrix's type, as products do (`_matmul.py`); their modules
    sit below the containers, which import them, so they name the class by its format and
    the registration happens when the class is defined (or at once, if it already is).
    """

    def register(function):
        if name in _FORMATS:
            dispatcher.register(_FORMATS[name], function)
        else:
            _PENDING.setdefault(name, []).append((dispatcher, function))
        return function

    return register


class SparseMatrix(eqx.Module):
    """A two-dimensional sparse matrix whose stored values are the leaf `data`."""

    shape: eqx.AbstractVar[tuple[int, int]]
    data: eqx.AbstractVar[jax.Array]
    format: ClassVar[str]
    # The rank of each array leaf for one matrix; axes in front of it are a batch.
    leaf_ranks: ClassVar[dict[str, int]]

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "format" in cls.__dict__:
            _FORMATS[cls.format] = cls
            register_serialization(cls)
            for dispatcher, function in _PENDING.pop(cls.format, []):
                dispatcher.register(cls, function)

    # Make numpy arrays defer to our reflected operators (`x @ A` with `x` a numpy array).
    __array_ufunc__ = None

    @property
    def dtype(self) -> np.dtype:
        """The dtype of the stored values."""
        return self.data.dtype

    @property
    def ndim(self) -> int:
        return 2

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """The leading batch axes of the array leaves (`()` for one matrix); see
        `docs/batching.md`."""
        return batch_shape(self)

    def batch_member(self, index) -> "SparseMatrix":
        """Member `index` of the batch (an int or a traced integer), one matrix less batched."""
        return batch_member(self, index)

    @property
    @abc.abstractmethod
    def nnz(self) -> int:
        """The number of stored entries inside the matrix (a static Python int)."""

    @abc.abstractmethod
    def with_data(self, data) -> "SparseMatrix":
        """The same structure holding new values `data`."""

    @abc.abstractmethod
    def transpose(self) -> "SparseMatrix":
        """The transposed matrix, in the same format."""

    @abc.abstractmethod
    def todense(self) -> jax.Array:
        """The dense matrix as a JAX array (jit-able)."""

    @property
    def T(self) -> "SparseMatrix":
        return self.transpose()

    def toarray(self) -> jax.Array:
        """Alias of `todense`, as in scipy."""
        return self.todense()

    def astype(self, dtype) -> "SparseMatrix":
        """The same matrix with its values cast to `dtype` (floating, complex or boolean)."""
        dtype = jnp.dtype(dtype)
        check_value_dtype(dtype, f"`astype({dtype})`")
        return self.with_data(self.data.astype(dtype))

    @abc.abstractmethod
    def tocsr(self) -> "SparseMatrix":
        """The same matrix as a `CSRMatrix`."""

    @abc.abstractmethod
    def todia(self) -> "SparseMatrix":
        """The same matrix as a `DIAMatrix`."""

    def __matmul__(self, other):
        return matmul(self, other)

    # Comparisons are elementwise, as scipy's (`SparseOperators.compare`): `eqx.Module`'s
    # own `__eq__` compares whole trees and would answer with one boolean.
    def __eq__(self, other):
        return self.compare(other, "==")

    def __ne__(self, other):
        return self.compare(other, "!=")

    __hash__ = eqx.Module.__hash__

    # A sparse matrix never becomes a dense array implicitly (`jnp.asarray(A)`, `np.asarray`,
    # a scipy operand): that would either fail deep inside or build the dense matrix silently.
    # (No `__jax_array__`: JAX's operators call it, and `tracer * A` must reach `__rmul__`.)
    def __array__(self, dtype=None, copy=None):
        raise TypeError(_IMPLICIT_DENSE)

    def __bool__(self):
        raise ValueError(
            "The truth value of a sparse matrix is ambiguous; use `.nnz`, or compare and "
            "reduce (`(A != B).sum() == 0`)."
        )

    def __rmatmul__(self, other):
        return matmul(other, self)

    def __repr__(self) -> str:
        fields = ", ".join(f"{key}={value}" for key, value in self._repr_fields().items())
        return f"{type(self).__name__}({fields})"

    def _repr_fields(self) -> dict:
        fields = {"shape": self.shape, "dtype": leaf_dtype_name(self.data), "nnz": self.nnz}
        batch = batch_shape(self)
        return {"batch": batch, **fields} if batch else fields


_IMPLICIT_DENSE = (
    "a jaxsparse matrix does not convert to a dense array implicitly: use `A.todense()` for "
    "a dense JAX array, and `DIAMatrix.from_scipy` / `CSRMatrix.from_scipy` to bring a "
    "scipy.sparse operand in."
)


def leaf_dtype_name(leaf) -> str:
    """The dtype name of an array leaf, for `repr`: also for the leaves a gradient or a
    partition leaves in a matrix's place (`None`, or `float0` for integer leaves)."""
    if leaf is None:
        return "None"
    if leaf.dtype == jax.dtypes.float0:
        return "float0"
    return np.dtype(leaf.dtype).name


def _as_scalar(value, operator: str):
    """`value` if it is a scalar (Python number or 0-d array), else a TypeError."""
    if isinstance(value, numbers.Number):
        return value
    if isinstance(value, (jax.Array, np.ndarray, np.generic)) and jnp.ndim(value) == 0:
        return value
    raise TypeError(
        f"`{operator}` between a sparse matrix and {type(value).__name__} is not supported: "
        "only scalars are. Use `@` for products, or `todense()` for elementwise operations."
    )


def dense_shape_error(operator: str, shape, dense_shape) -> ValueError:
    """The error of an elementwise `operator` between a sparse matrix of `shape` and a
    dense operand of `dense_shape` that does not broadcast to it."""
    return ValueError(
        f"inconsistent shapes for `{operator}`: a dense operand of shape {dense_shape} does "
        f"not broadcast to the sparse matrix's {shape}."
    )


def check_broadcasts(operator: str, shape, dense_shape) -> None:
    """`dense_shape_error` unless the shapes broadcast together (a dense result, which may
    be larger), as numpy's and scipy's ValueError."""
    try:
        np.broadcast_shapes(tuple(shape), tuple(dense_shape))
    except ValueError:
        raise dense_shape_error(operator, shape, dense_shape) from None


def empty_shape(argument, shape) -> tuple[int, int] | None:
    """scipy's `(m, n)` as a constructor's first argument, for an empty matrix: that shape
    (a `shape=` given too must equal it); `None` for any other first argument."""
    if not isinstance(argument, tuple) or len(argument) != 2:
        return None
    if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in argument):
        return None
    dims = validate_shape(argument)
    if shape is not None and validate_shape(shape) != dims:
        raise ValueError(f"`shape`={shape!r} differs from the shape {dims} given first.")
    return dims


def validate_shape(shape) -> tuple[int, int]:
    """`shape` as a tuple of two non-negative Python ints, or a clear error."""
    try:
        dims = tuple(shape)
    except TypeError:
        raise TypeError(f"`shape` must be a tuple of two ints, got {shape!r}.") from None
    if len(dims) != 2:
        raise ValueError(f"`shape` must have two entries (rows, columns), got {shape!r}.")
    for dim in dims:
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
            raise TypeError(f"`shape` must hold Python ints, got {shape!r}.")
        if dim < 0:
            raise ValueError(f"`shape` must be non-negative, got {shape!r}.")
    return int(dims[0]), int(dims[1])


def as_value_array(values, name: str) -> jax.Array:
    """`values` as a JAX array with a floating or complex dtype (or boolean: the results
    of comparisons), or a TypeError."""
    # Object and string arrays before `jnp.asarray`, whose error for them names no argument.
    if isinstance(values, np.ndarray) and values.dtype.kind in "OSU":
        raise TypeError(_value_dtype_message(name, values.dtype))
    try:
        array = device_array(values)
    except TypeError:
        raise TypeError(
            f"`{name}` must be an array of floating or complex values, got "
            f"{type(values).__name__} {values!r:.80}."
        ) from None
    if not is_value_dtype(array.dtype):
        raise TypeError(_value_dtype_message(name, array.dtype))
    return array


def _value_dtype_message(name: str, dtype) -> str:
    return (
        f"`{name}` must have a floating or complex dtype, got {dtype}; "
        f"cast it first (e.g. `{name}.astype(jnp.float32)`)."
    )


def refuse_scipy_matrix(value, cls_name: str) -> None:
    """A TypeError where a constructor that takes arrays got a scipy.sparse matrix."""
    if scipy.sparse.issparse(value):
        raise TypeError(
            f"`{cls_name}` takes arrays, got a scipy.sparse {type(value).__name__}: convert "
            f"it with `{cls_name}.from_scipy(matrix)`."
        )


def is_value_dtype(dtype) -> bool:
    """Whether sparse matrices store values of `dtype`: floating, complex or boolean (the
    results of comparisons), never integers."""
    return jnp.issubdtype(dtype, jnp.inexact) or np.dtype(dtype) == np.bool_


def check_value_dtype(dtype, operation: str) -> None:
    """A TypeError saying that `operation` would give integer values unless sparse
    matrices store values of `dtype` (`is_value_dtype`)."""
    if is_value_dtype(dtype):
        return
    raise TypeError(
        f"{operation} would give {dtype} values: sparse matrices store floating, complex or "
        "boolean values, not integers. Use a floating dtype, e.g. `A.astype(jnp.float32)`."
    )


def is_concrete(*arrays) -> bool:
    """Whether every array holds known values (so host-side checks can run on them)."""
    return not any(isinstance(array, jax.core.Tracer) for array in arrays)


def index_dtype_for(shape: tuple[int, int], nnz: int):
    """int32 when every index and count fits in it, else int64."""
    return np.int32 if max(*shape, nnz) < np.iinfo(np.int32).max else np.int64


def host_values(data) -> np.ndarray:
    """`data` on the host in a dtype scipy takes (bfloat16 and float16 become float32)."""
    if data.dtype in (jnp.bfloat16, jnp.float16):
        data = data.astype(jnp.float32)
    return np.asarray(data)


def storable_dtype(dtype) -> np.dtype:
    """`dtype` where sparse matrices store it (floating, complex, boolean); the default
    floating dtype for integers."""
    dtype = np.dtype(dtype)
    return dtype if is_value_dtype(dtype) else np.dtype(jax.dtypes.canonicalize_dtype(np.float64))


def storable_host_values(values: np.ndarray) -> np.ndarray:
    """scipy values in a dtype sparse matrices store (`storable_dtype`), with a warning
    when integers are too large for the floating dtype to hold exactly."""
    dtype = storable_dtype(values.dtype)
    if np.issubdtype(values.dtype, np.integer) and values.size:
        exact = 2 ** (np.finfo(dtype).nmant + 1)
        if max(int(values.max()), -int(values.min())) > exact:
            warnings.warn(
                f"integer values beyond {exact} are rounded to the nearest {dtype}; enable "
                "`jax_enable_x64` for float64 values, or scale them.",
                stacklevel=3,
            )
    return values.astype(dtype, copy=False)
