"""`shard`: a DIA or CSR matrix split by rows over one axis of a `jax.sharding.Mesh`, whose
products run under `jax.shard_map` with only the operand rows each device needs exchanged.

`S = shard(A, mesh, axis="x")` places row blocks of `A` on the devices of mesh axis `"x"`
(as `jax.device_put` places an array), and `S @ x`, `S @ X`, `x @ S`, `X @ S` take and
return dense operands sharded by rows over that axis (`S.sharding`). Inside, every device
runs the exchange of its plan (`_shard_plan.py`, `_shard_exchange.py`) and then the
library's own product primitives on its local matrix, so autodiff, batching and the
backend table come unchanged: gradients in the values come out sharded like the values,
gradients in the operand like the operand.
"""

import abc
import collections
import dataclasses
import functools
import hashlib
import threading

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from ._base import SparseMatrix, _as_scalar, is_concrete, leaf_dtype_name
from ._csr import CSRMatrix
from ._csr_ops import csr_matmul_p, csr_matmul_t_p
from ._dia import DIAMatrix
from ._dia_layout import active_diagonals, valid_rows
from ._dia_ops import dia_matmul_p, dia_matmul_t_p
from ._matmul import matmul, operand_rows, runs_compiled, sparse_times_dense
from ._shard_exchange import column_buffer, halo_window, sent_back
from ._shard_gather import host_array, replicated, unshard_csr, unshard_dia
from ._shard_plan import ColumnPlan, HaloPlan, column_plan, halo_plan


class ShardedMatrix(eqx.Module):
    """A sparse matrix whose row blocks live on the devices of one mesh axis.

    Built by `shard` (from a whole matrix) or `shard_from_rows` (each process from its own
    rows). Dense operands sharded by rows over the same axis (`S.sharding`) must divide
    evenly over its devices, so the sharded ones have `S.padded_shape` rows: `m` and `n`
    rounded up to a multiple of the device count, zero past the matrix (`S.shard_vector`
    pads and places a vector or matrix, `S.unpad` slices a result back). An operand with
    the matrix's own number of rows is padded inside and gives a result with the matrix's
    own number of rows.
    """

    data: eqx.AbstractVar[jax.Array]
    shape: eqx.AbstractVar[tuple[int, int]]
    mesh: eqx.AbstractVar[jax.sharding.Mesh]
    axis: eqx.AbstractVar[str]
    plan: eqx.AbstractVar[HaloPlan | ColumnPlan]

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def ndim(self) -> int:
        return 2

    @property
    def devices(self) -> int:
        """Devices along the sharded mesh axis."""
        return self.mesh.shape[self.axis]

    @property
    def sharding(self) -> NamedSharding:
        """The sharding of dense operands and results: rows over `axis`."""
        return NamedSharding(self.mesh, P(self.axis))

    @property
    def padded_shape(self) -> tuple[int, int]:
        """`(rows of S @ x, rows of x)`: `shape` rounded up to whole blocks per device."""
        plan = self.plan
        return plan.devices * plan.row_block, plan.devices * plan.column_block

    def shard_vector(self, vector) -> jax.Array:
        """`vector` (`(n,)`, `(n, k)`, `(m,)` or `(m, k)`) padded with zero rows to
        `padded_shape` and placed with `sharding` (jit-able).

        A length of `n` is taken as an operand of `S @ x`, one of `m` as an operand of
        `x @ S`; `S.unpad(y)` slices results back.
        """
        array = jnp.asarray(vector)
        m, n = self.shape
        padded_m, padded_n = self.padded_shape
        if array.ndim not in (1, 2) or array.shape[0] not in (m, n):
            raise ValueError(
                f"`vector` must have shape (n,), (n, k), (m,) or (m, k) with (m, n) = "
                f"{self.shape}, got {array.shape}."
            )
        rows = padded_n if array.shape[0] == n else padded_m
        pad = [(0, rows - array.shape[0])] + [(0, 0)] * (array.ndim - 1)
        return jax.device_put(jnp.pad(array, pad), self.sharding)

    def unpad(self, result) -> jax.Array:
        """The first `m` rows of a result of `S @ x`, `(padded_m,)` or `(padded_m, k)`
        (`S.T.unpad(u)` cuts a result of `x @ S` to `n`), jit-able.

        Where `m` divides evenly over the devices nothing is cut and the result stays
        sharded. Otherwise the rows cannot stay split evenly: on a mesh axis of type
        `Explicit` (`jax.make_mesh`'s default), where a plain `y[:m]` raises
        `ShardingTypeError`, the result is replicated over the axis; on an `Auto` axis
        XLA places it.
        """
        array = jnp.asarray(result)
        padded_m = self.padded_shape[0]
        if array.ndim not in (1, 2) or array.shape[0] != padded_m:
            raise ValueError(
                f"`result` must have shape ({padded_m},) or ({padded_m}, k) (`padded_shape[0]` "
                f"rows, as `S @ x` gives), got {array.shape}."
            )
        return _first_rows(array, self.shape[0], self.mesh, self.axis)

    def exchanged_bytes(self, columns: int = 1, dtype=None) -> int:
        """Bytes one product sends between devices, summed over all pairs, by the plan.

        **Arguments:**

        - `columns`: `k` of the dense operand (1 for a vector).
        - `dtype`: the product's dtype (default: the matrix's).
        """
        itemsize = np.dtype(self.dtype if dtype is None else dtype).itemsize
        return self.plan.exchanged_rows() * columns * itemsize

    def with_data(self, data) -> "ShardedMatrix":
        """The same structure and placement holding new (sharded) values `data`."""
        return eqx.tree_at(lambda matrix: matrix.data, self, data)

    @property
    def T(self) -> "ShardedMatrix":
        """The transpose: a view on the same shards whose products are the transposed
        products (`S.T @ x == x @ S`), with no data moved."""
        return ShardedTranspose(self)

    def transpose(self) -> "ShardedMatrix":
        return self.T

    @abc.abstractmethod
    def unshard(self):
        """The same matrix as one `DIAMatrix` or `CSRMatrix` (not sharded), jit-able in
        the values and differentiable in them; a CSR structure must be concrete. On a
        mesh over several processes, every process must call it."""

    def todense(self) -> jax.Array:
        """The dense `(m, n)` matrix (replicated over the mesh)."""
        return self.unshard().todense()

    def to_scipy(self):
        """The matrix as a scipy.sparse array on this host (gathered from every process
        when the mesh spans several: every process must call it then)."""
        whole = jax.tree.map(host_array, self.unshard())
        return whole.to_scipy()

    def __matmul__(self, other):
        return matmul(self, other)

    def __rmatmul__(self, other):
        return matmul(other, self)

    def __mul__(self, scalar):
        return self.with_data(self.data * _as_scalar(scalar, "*"))

    __rmul__ = __mul__

    def __truediv__(self, scalar):
        return self.with_data(self.data / _as_scalar(scalar, "/"))

    def __neg__(self):
        return self.with_data(-self.data)

    # Make numpy arrays defer to `__rmatmul__` (`x @ S` with `x` a numpy array).
    __array_ufunc__ = None

    # Never dense implicitly, as a whole matrix (`SparseMatrix.__array__`).
    __array__ = SparseMatrix.__array__

    # Equinox's `==` would compare whole trees; a matrix's `==` is elementwise, which a
    # sharded matrix does not offer, so both comparisons and truth values are refused.
    def __eq__(self, other):
        raise TypeError(_NO_COMPARISONS)

    def __ne__(self, other):
        raise TypeError(_NO_COMPARISONS)

    __hash__ = eqx.Module.__hash__

    def __bool__(self):
        raise ValueError("The truth value of a sharded matrix is ambiguous.")

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(shape={self.shape}, dtype={leaf_dtype_name(self.data)}, "
            f"{self._repr_structure()}devices={self.devices} on axis {self.axis!r}, "
            f"{self.plan.summary()})"
        )

    def _repr_structure(self) -> str:
        return ""

    def _stores_nothing(self) -> bool:
        """Whether no stored entry lies inside the matrix (every product is zero)."""
        return False

    def _sharded_product(self, data, columns, *, transposed: bool, backend: str) -> jax.Array:
        """`S @ columns` (`S^T @ columns` if `transposed`): `columns` 2-D with the padded or
        the matrix's own number of rows, `data` the values in the product's dtype.

        The formats define what runs on each device: `_leaves(data)` (the arrays it takes),
        `_leaf_specs()` (their `PartitionSpec`s) and `_local_product` (its exchange and
        product, under `jax.shard_map`)."""
        # One compiled program per shape and plan (nested in the caller's `jit`, if any),
        # so that eager calls, `jax.grad` and `jax.vmap` outside `jit` do not run the
        # exchange and the product one dispatch per operation. A concrete operand is placed
        # on the mesh first: a compiled program takes no arrays committed to other devices.
        leaves = self._placed_leaves(data)
        if is_concrete(columns) and not _on_devices_of(columns, self.mesh):
            columns = jax.device_put(columns, NamedSharding(self.mesh, P()))
        skeleton = eqx.filter(self, eqx.is_array, inverse=True)
        return _compiled_product(skeleton, leaves, columns, transposed=transposed, backend=backend)

    def _product_of_placed(self, leaves, columns, *, transposed: bool, backend: str):
        """`_sharded_product` of the placed `_leaves(data)`; reads only the matrix's static
        fields, so it runs on a copy holding no arrays (`_compiled_product`)."""
        padded_m, padded_n = self.padded_shape
        m, n = self.shape
        padded_rows, out_rows = (padded_m, n) if transposed else (padded_n, m)
        own_length = columns.shape[0] != padded_rows
        if self._stores_nothing():
            # Zeros, without a per-device program: jaxlib 0.11.2's Shardy pass crashes the
            # process compiling a `shard_map` whose (empty) matrix input goes unused.
            padded_out = padded_n if transposed else padded_m
            zeros = jnp.zeros((padded_out, columns.shape[1]), columns.dtype)
            out = _rows_placed(zeros, self.mesh, self.axis)
            return _first_rows(out, out_rows, self.mesh, self.axis) if own_length else out
        if own_length:
            columns = jnp.pad(columns, ((0, padded_rows - columns.shape[0]), (0, 0)))
        row_spec = P(self.axis, None)
        local = functools.partial(self._local_product, transposed=transposed, backend=backend)
        out = jax.shard_map(
            local,
            mesh=self.mesh,
            in_specs=(self._leaf_specs(), row_spec),
            out_specs=row_spec,
            # The library's product primitives carry no varying-axes types (their abstract
            # evaluation knows nothing of meshes), so JAX's check of them is turned off.
            check_vma=False,
        )(leaves, _rows_placed(columns, self.mesh, self.axis))
        return _first_rows(out, out_rows, self.mesh, self.axis) if own_length else out

    def _placed_leaves(self, data) -> tuple:
        """`_leaves(data)` sharded as `_leaf_specs()` says: values deserialized or given to
        `with_data` may lie on one device, which `shard_map` does not move. Traced arrays
        are placed by their type on an `Explicit` axis, by `shard_map` on an `Auto` one."""
        placed = []
        for leaf, spec in zip(self._leaves(data), self._leaf_specs(), strict=True):
            sharding = NamedSharding(self.mesh, spec)
            if not isinstance(leaf, jax.core.Tracer):
                leaf = jax.device_put(leaf, sharding)
            elif _is_explicit(self.mesh, self.axis):
                leaf = jax.sharding.reshard(leaf, sharding)
            placed.append(leaf)
        return tuple(placed)


def _on_devices_of(array, mesh) -> bool:
    """Whether concrete `array` is a jax array laid out over exactly `mesh`'s devices."""
    return isinstance(array, jax.Array) and array.sharding.device_set == set(mesh.devices.flat)


@functools.partial(jax.jit, static_argnames=("transposed", "backend"))
def _compiled_product(skeleton, leaves, columns, *, transposed: bool, backend: str):
    return skeleton._product_of_placed(leaves, columns, transposed=transposed, backend=backend)


_NO_COMPARISONS = (
    "sharded matrices do not compare elementwise: compare `S.unshard()`, or `S.data` of two "
    "matrices sharded alike."
)


def _is_explicit(mesh, axis: str) -> bool:
    return mesh.axis_types[mesh.axis_names.index(axis)] == jax.sharding.AxisType.Explicit


def _rows_placed(columns, mesh, axis: str) -> jax.Array:
    """`columns` sharded by rows over `axis`, as the product's `shard_map` takes them: an
    `Explicit` axis needs the operand's type to say so; on an `Auto` one `shard_map` moves
    it itself."""
    if _is_explicit(mesh, axis):
        return jax.sharding.reshard(columns, NamedSharding(mesh, P(axis, None)))
    return columns


def _first_rows(array, rows: int, mesh, axis: str) -> jax.Array:
    """`array[:rows]`; replicated over `axis` when that is an `Explicit` axis that `rows`
    does not divide (explicit shardings must divide evenly)."""
    if array.shape[0] == rows:
        return array
    if _is_explicit(mesh, axis) and rows % mesh.shape[axis]:
        replicated = NamedSharding(mesh, P(*[None] * array.ndim))
        return jax.sharding.reshard(array, replicated)[:rows]
    return array[:rows]


runs_compiled.register(ShardedMatrix, lambda matrix: False)


@sparse_times_dense.register(ShardedMatrix)
def _sharded_times_dense(matrix, data, columns, *, transposed: bool, backend: str):
    return matrix._sharded_product(data, columns, transposed=transposed, backend=backend)


@operand_rows.register(ShardedMatrix)
def _sharded_operand_rows(matrix, *, transposed: bool) -> tuple[int, ...]:
    padded_m, padded_n = matrix.padded_shape
    m, n = matrix.shape
    return (m, padded_m) if transposed else (n, padded_n)


class ShardedTranspose(ShardedMatrix):
    """`S.T` for a sharded matrix `S`: the same shards, products transposed.

    Its operands are sharded like `S`'s results and the other way round, so
    `padded_shape` is `S`'s reversed; `S.T.T` is `S`.
    """

    parent: ShardedMatrix

    @property
    def data(self) -> jax.Array:
        return self.parent.data

    @property
    def shape(self) -> tuple[int, int]:
        return self.parent.shape[::-1]

    @property
    def mesh(self) -> jax.sharding.Mesh:
        return self.parent.mesh

    @property
    def axis(self) -> str:
        return self.parent.axis

    @property
    def plan(self) -> HaloPlan | ColumnPlan:
        return self.parent.plan

    @property
    def padded_shape(self) -> tuple[int, int]:
        return self.parent.padded_shape[::-1]

    @property
    def T(self) -> ShardedMatrix:
        return self.parent

    def with_data(self, data) -> "ShardedTranspose":
        return ShardedTranspose(self.parent.with_data(data))

    def unshard(self):
        return self.parent.unshard().T

    def __repr__(self) -> str:
        return f"ShardedTranspose(shape={self.shape}, of {self.parent!r})"

    def _sharded_product(self, data, columns, *, transposed: bool, backend: str) -> jax.Array:
        return self.parent._sharded_product(
            data, columns, transposed=not transposed, backend=backend
        )


class ShardedDIAMatrix(ShardedMatrix):
    """A DIA matrix sharded by rows, keeping only the diagonals inside the matrix.

    Device `p` holds its rows' diagonals already laid out for its local product: the DIA
    layout of its local matrix `(plan.row_block, plan.window)`, whose columns are the
    window of operand rows its `HaloPlan` brings in and whose diagonals sit at
    `plan.local_offsets`. So `data` has shape `(len(offsets), devices * plan.window)`,
    sharded over its second axis, and row `i` of device `p` (global row `p * row_block +
    i`) keeps `A[row, row + offsets[d]]` at `data[d, p * plan.window + i +
    plan.local_offsets[d]]`; every other slot is zero and ignored.
    """

    data: jax.Array
    offsets: tuple[int, ...] = eqx.field(static=True)
    shape: tuple[int, int] = eqx.field(static=True)
    mesh: jax.sharding.Mesh = eqx.field(static=True)
    axis: str = eqx.field(static=True)
    plan: HaloPlan = eqx.field(static=True)

    def unshard(self) -> DIAMatrix:
        return unshard_dia(replicated(self.data, self.mesh), self.offsets, self.shape, self.plan)

    def _repr_structure(self) -> str:
        return f"offsets={self.offsets}, "

    def _leaves(self, data) -> tuple:
        return (data,)

    def _leaf_specs(self) -> tuple:
        return (P(None, self.axis),)

    def _stores_nothing(self) -> bool:
        return not self.plan.local_offsets

    def _local_product(self, leaves, columns, *, transposed: bool, backend: str):
        (local_data,) = leaves
        plan, (m, n) = self.plan, self.shape
        params = dict(
            offsets=plan.local_offsets,
            shape=(plan.row_block, plan.window),
            backend=backend,
        )
        device = lax.axis_index(self.axis)
        exchange = functools.partial(halo_window, plan=plan, axis=self.axis)
        if transposed:
            cotangent = _zero_past(columns, device * plan.row_block, m, plan.devices)
            window = dia_matmul_t_p.bind(local_data, cotangent, **params)
            block = sent_back(exchange, window, plan.column_block)
            return _zero_past(block, device * plan.column_block, n, plan.devices)
        block = _zero_past(columns, device * plan.column_block, n, plan.devices)
        out = dia_matmul_p.bind(local_data, exchange(block), **params)
        return _zero_past(out, device * plan.row_block, m, plan.devices)


class ShardedCSRMatrix(ShardedMatrix):
    """A CSR matrix sharded by row blocks: device `p` holds the entries of its rows, padded
    to `plan.entries_per_block` (`data`, `indices`, each `(devices * entries_per_block,)`,
    and `indptr`, `(devices * (row_block + 1),)`), with column indices into the buffer its
    `ColumnPlan` builds, and the rows of its operand block it sends (`send_positions`)."""

    data: jax.Array
    indices: jax.Array
    indptr: jax.Array
    send_positions: jax.Array
    shape: tuple[int, int] = eqx.field(static=True)
    mesh: jax.sharding.Mesh = eqx.field(static=True)
    axis: str = eqx.field(static=True)
    plan: ColumnPlan = eqx.field(static=True)

    def unshard(self) -> CSRMatrix:
        if not is_concrete(self.indices, self.indptr, self.send_positions):
            raise TypeError(
                "`unshard` needs a sharded CSR matrix with a concrete structure: it is "
                "rebuilt on the host. Call it outside `jit`, or close over the matrix."
            )
        return unshard_csr(
            replicated(self.data, self.mesh),
            self.indices,
            self.indptr,
            self.send_positions,
            self.shape,
            self.plan,
            self.indices.dtype,
        )

    def _leaves(self, data) -> tuple:
        return (data, self.indices, self.indptr, self.send_positions)

    def _leaf_specs(self) -> tuple:
        return (P(self.axis),) * 4

    def _local_product(self, leaves, columns, *, transposed: bool, backend: str):
        data, indices, indptr, send_positions = leaves
        plan = self.plan
        params = dict(shape=(plan.row_block, plan.buffer), backend=backend)
        exchange = functools.partial(
            column_buffer, send_positions=send_positions, plan=plan, axis=self.axis
        )
        if transposed:
            buffer = csr_matmul_t_p.bind(data, columns, indices, indptr, **params)
            return sent_back(exchange, buffer, plan.column_block)
        return csr_matmul_p.bind(data, exchange(columns), indices, indptr, **params)


def _zero_past(block, start, limit: int, devices: int) -> jax.Array:
    """`block` (one device's rows, from global row `start`) with rows `>= limit` zeroed:
    the padding past the matrix, which exists only when `limit` is not a multiple of the
    device count."""
    rows = block.shape[0]
    if devices * rows == limit:
        return block
    inside = start + lax.iota(np.int32, rows) < limit
    return jnp.where(inside[:, None], block, jnp.zeros((), block.dtype))


@functools.singledispatch
def shard(matrix, mesh: jax.sharding.Mesh, axis: str) -> ShardedMatrix:
    """`matrix` split by rows over the devices of `axis` of `mesh`, with its products sharded.

    The structure's communication plan is found here, on the host, once: which operand
    rows each device needs from which other. `S @ x` then exchanges only those (for a DIA
    matrix the halo: `max(offsets)` rows from the right neighbour and `-min(offsets)` from
    the left) and multiplies locally with the library's product primitives. The values
    are re-laid out by a jit-able gather of `matrix.data`, so gradients reach the original
    values through `shard` as well.

    **Arguments:**

    - `matrix`: a `DIAMatrix` or a `CSRMatrix`; a CSR structure must be concrete (not
      traced under `jit`): the plan depends on it.
    - `mesh`: a `jax.sharding.Mesh` (several axes are fine: the others replicate).
    - `axis`: the name of the mesh axis whose devices hold the row blocks.

    **Returns:** a `ShardedDIAMatrix` or `ShardedCSRMatrix` (pytrees: pass them through
    `jax.jit` and `jax.grad` like the matrices they come from).
    """
    raise TypeError(f"`matrix` must be a DIAMatrix or a CSRMatrix, got {type(matrix).__name__}.")


def check_mesh(mesh, axis) -> int:
    if not isinstance(mesh, jax.sharding.Mesh):
        raise TypeError(f"`mesh` must be a jax.sharding.Mesh, got {type(mesh).__name__}.")
    if axis not in mesh.axis_names:
        raise ValueError(f"`axis` must be one of the mesh's axes {mesh.axis_names}, got {axis!r}.")
    return mesh.shape[axis]


@shard.register(DIAMatrix)
def _shard_dia(matrix: DIAMatrix, mesh: jax.sharding.Mesh, axis: str) -> ShardedDIAMatrix:
    devices = check_mesh(mesh, axis)
    index, offsets = active_diagonals(matrix.offsets, matrix.shape)
    plan = halo_plan(offsets, matrix.shape, devices)
    data = _local_layout(matrix, index, offsets, plan)
    data = jax.device_put(data, NamedSharding(mesh, P(None, axis)))
    return ShardedDIAMatrix(data, offsets, matrix.shape, mesh, axis, plan)


# One compiled program per layout, not one dispatch per diagonal's slice and pads.
@functools.partial(jax.jit, static_argnames=("index", "offsets", "plan"))
def _local_layout(matrix: DIAMatrix, index, offsets, plan: HaloPlan) -> jax.Array:
    """The diagonals `index` of `matrix` laid out for the devices' local products,
    `(len(index), devices * plan.window)` (see `ShardedDIAMatrix`): each diagonal stored
    by rows, cut into blocks of `row_block` rows, each block shifted to its local offset."""
    devices, row_block, window = plan.devices, plan.row_block, plan.window
    if not index:
        return jnp.zeros((0, devices * window), matrix.dtype)
    blocks = []
    for d, off, local in zip(index, offsets, plan.local_offsets, strict=True):
        lo, hi = valid_rows(off, matrix.shape)
        by_rows = jnp.pad(matrix.data[d, lo + off : hi + off], (lo, devices * row_block - hi))
        by_device = by_rows.reshape(devices, row_block)
        blocks.append(jnp.pad(by_device, ((0, 0), (local, window - row_block - local))))
    return jnp.stack(blocks).reshape(len(index), devices * window)


@shard.register(CSRMatrix)
def _shard_csr(matrix: CSRMatrix, mesh: jax.sharding.Mesh, axis: str) -> ShardedCSRMatrix:
    devices = check_mesh(mesh, axis)
    if not is_concrete(matrix.indices, matrix.indptr):
        raise TypeError(
            "`shard` needs a CSR matrix with concrete `indices` and `indptr`: its "
            "communication plan is computed on the host. Shard outside `jit` (values may "
            "still be traced: `shard(A.with_data(values), ...)` with `A` closed over)."
        )
    indices, indptr = np.asarray(matrix.indices), np.asarray(matrix.indptr)
    plan, arrays = _column_plan_cached(indices, indptr, matrix.shape, devices)
    values = _entries_at(matrix.data, arrays.entry_source.reshape(-1))
    place = functools.partial(jax.device_put, device=NamedSharding(mesh, P(axis)))
    index_dtype = matrix.index_dtype
    return ShardedCSRMatrix(
        place(values),
        place(arrays.local_indices.reshape(-1).astype(index_dtype)),
        place(arrays.local_indptr.reshape(-1).astype(index_dtype)),
        place(arrays.send_positions.reshape(-1).astype(index_dtype)),
        matrix.shape,
        mesh,
        axis,
        plan,
    )


@jax.jit
def _entries_at(data, source) -> jax.Array:
    """`data[source]`, zero where `source` is -1 (a padding slot): those read a zero
    appended past the entries, which also serves a matrix with no entries."""
    with_zero = jnp.concatenate([data, jnp.zeros(1, data.dtype)])
    return with_zero[jnp.where(source >= 0, source, data.shape[0])]


# The plans of the structures sharded last, so that sharding new values of one structure
# does not plan again: at most PLAN_CACHE_ENTRIES of them and PLAN_CACHE_BYTES of their
# arrays (the newest always), keyed by a digest of the index arrays, not copies of them.
PLAN_CACHE_ENTRIES = 16
PLAN_CACHE_BYTES = 1 << 26
_plans: collections.OrderedDict = collections.OrderedDict()
_plans_lock = threading.Lock()


def _column_plan_cached(indices: np.ndarray, indptr: np.ndarray, shape, devices: int):
    """`column_plan` once per structure (see `PLAN_CACHE_ENTRIES`)."""
    digest = hashlib.blake2b(digest_size=16)
    for array in (indices, indptr):
        digest.update(np.ascontiguousarray(array).view(np.uint8))
    key = (digest.digest(), indices.dtype.str, indptr.shape, shape, devices)
    with _plans_lock:
        if key in _plans:
            _plans.move_to_end(key)
            return _plans[key][0]
    found = column_plan(indices, indptr, shape, devices)
    size = sum(getattr(found[1], field.name).nbytes for field in dataclasses.fields(found[1]))
    with _plans_lock:
        _plans[key] = (found, size)
        total = sum(entry_size for _, entry_size in _plans.values())
        while len(_plans) > 1 and (total > PLAN_CACHE_BYTES or len(_plans) > PLAN_CACHE_ENTRIES):
            _, (_, evicted) = _plans.popitem(last=False)
            total -= evicted
    return found
