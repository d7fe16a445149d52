"""What `gpu_compile.py` compiles: every product and gradient of every format, at realistic
sizes, as programs of abstract arguments (`jax.ShapeDtypeStruct`: nothing is allocated).

Each program goes through the public API (`jaxsparse.matmul(..., backend="pallas")`,
`jax.vjp`, `jax.vmap`), so it runs exactly the kernels a user's program runs. The GPU kernel
families come from the library's own table (`_families.FAMILIES`, through
`_backend.PREFERENCES` for the GPU and the formats' `IMPLEMENTATIONS`), so a family added
there is compiled without a change here.
`planted_programs` holds the deliberately broken kernels of `--plant-oversized-block`.
"""

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

import jaxsparse as js
from jaxsparse import _backend, _csr_ops, _dia_ops, _families
from jaxsparse._dia_layout import MAX_UNROLLED_DIAGONALS
from jaxsparse.kernels import triton_csr, triton_dia
from jaxsparse.kernels._csr_common import matmul_t_by_transposed_structure

PLATFORM = "cuda"
DTYPES = (jnp.float32, jnp.bfloat16, jnp.float64, jnp.complex64)
KS = (1, 8, 128)
# Loop steps an iteration of the Triton CSR kernels compiled beside the defaults' one
# (`BlockSizes.unroll`; the tile sweep, `benchmarks/gpu_csr_tiles.py`, times the product
# with them).
CSR_UNROLLS = (2, 4)
# Long-row steps a chunk in the Triton CSR product and gradient step compiled with rows
# taken by chunks (`BlockSizes.chunk_steps`), for one matrix and a batch of `BATCH`.
CSR_CHUNK_STEPS = 8
# Matrices per batch in the `jax.vmap` programs (a batch grid axis in the kernels).
BATCH = 8
STENCIL_SIDE = 1024  # a 1024 x 1024 grid: 2^20 rows
CSR_ROWS, CSR_PER_ROW = 10**6, 10  # 10^7 stored entries


@dataclasses.dataclass(frozen=True)
class Matrix:
    """A sparse matrix described by its static structure only.

    - `name`: for the report.
    - `implementations`: the format's table, member -> family -> function.
    - `shape`: `(m, n)`.
    - `values_shape`: the shape of its stored values.
    - `structure`: abstract integer structure arrays (CSR's `indices`, `indptr`), if any.
    - `build`: `(values, *structure) -> matrix`.
    """

    name: str
    implementations: dict
    shape: tuple[int, int]
    values_shape: tuple[int, ...]
    structure: tuple[jax.ShapeDtypeStruct, ...]
    build: Callable


@dataclasses.dataclass(frozen=True)
class Program:
    """One program to compile: `function(*avals)`, labelled for the report."""

    matrix: str
    operation: str
    dtype: str
    k: int
    family: str
    function: Callable
    avals: tuple

    @property
    def label(self) -> str:
        return f"{self.matrix} | {self.operation} | {self.dtype} | k={self.k} | {self.family}"


def matrices() -> tuple[Matrix, ...]:
    """A DIA 5-point stencil and a DIA band wide enough for the looping kernels (both
    2^20 rows), and a CSR matrix with 10^7 entries."""
    n = STENCIL_SIDE**2
    stencil = (-STENCIL_SIDE, -1, 0, 1, STENCIL_SIDE)
    many = MAX_UNROLLED_DIAGONALS + 8
    band = tuple(range(-(many // 2), many - many // 2))
    nnz = CSR_ROWS * CSR_PER_ROW
    return (
        _dia(f"DIA 5-point stencil, {n} rows", stencil, n),
        _dia(f"DIA {many} diagonals (looped kernels), {n} rows", band, n),
        Matrix(
            name=f"CSR {CSR_ROWS} rows, {nnz} entries",
            implementations=_csr_ops.IMPLEMENTATIONS,
            shape=(CSR_ROWS, CSR_ROWS),
            values_shape=(nnz,),
            structure=(
                jax.ShapeDtypeStruct((nnz,), jnp.int32),
                jax.ShapeDtypeStruct((CSR_ROWS + 1,), jnp.int32),
            ),
            build=lambda values, indices, indptr: js.CSRMatrix(
                values, indices, indptr, shape=(CSR_ROWS, CSR_ROWS)
            ),
        ),
    )


def _dia(name: str, offsets: tuple[int, ...], n: int) -> Matrix:
    return Matrix(
        name=name,
        implementations=_dia_ops.IMPLEMENTATIONS,
        shape=(n, n),
        values_shape=(len(offsets), n),
        structure=(),
        build=lambda values: js.DIAMatrix(values, offsets=offsets, shape=(n, n)),
    )


def gpu_kernel_families(implementations: dict) -> tuple[str, ...]:
    """The kernel families that `"auto"` or `"pallas"` may run on a GPU and that this format
    has, in the library's order of preference."""
    preferred = _backend.PREFERENCES["pallas", PLATFORM] + _backend.PREFERENCES["auto", PLATFORM]
    has = {family for table in implementations.values() for family in table}
    pallas = {name for name, family in _families.FAMILIES.items() if family.pallas}
    return tuple(dict.fromkeys(f for f in preferred if f in pallas and f in has))


def programs() -> list[Program]:
    """Every (matrix, operation, dtype, k, kernel family) program, then the Triton CSR
    kernels with more loop steps an iteration than the defaults', and with rows taken by
    chunks (`csr_tile_programs`)."""
    return [
        Program(matrix.name, operation, jnp.dtype(dtype).name, k, family, function, avals)
        for matrix in matrices()
        for family in gpu_kernel_families(matrix.implementations)
        for dtype in DTYPES
        for k in KS
        for operation, (function, avals) in _operations(matrix, jnp.dtype(dtype), k).items()
    ] + csr_tile_programs()


def csr_tile_programs() -> list[Program]:
    """The Triton CSR product and its one-pass gradient step (the sampled and transposed
    products past 64 columns, and for a batch) in float32, with `CSR_UNROLLS` steps a loop
    iteration; both with rows taken by chunks of `CSR_CHUNK_STEPS` long-row steps, for
    one matrix and a batch; and at k = 8 the transposed product that
    `JAXSPARSE_DETERMINISTIC=1` takes (a sort per call, then the product kernels), which
    no public program here reaches."""
    matrix = matrices()[-1]
    shape = matrix.shape
    found = []

    def add(operation, k, function, avals):
        found.append(Program(matrix.name, operation, "float32", k, "triton", function, avals))

    def kernels(**block_sizes):
        """The product and the gradient step with these block sizes."""
        options = dict(
            shape=shape, platform=PLATFORM, block_sizes=triton_csr.BlockSizes(**block_sizes)
        )
        return (
            functools.partial(triton_csr.csr_matmul_triton, **options),
            functools.partial(triton_csr.csr_matmul_pullback_triton, **options),
        )

    chunks = f"chunks of {CSR_CHUNK_STEPS} steps"
    for k in KS:
        x = jax.ShapeDtypeStruct((shape[1], k), jnp.float32)
        for unroll in CSR_UNROLLS:
            product, pullback = kernels(unroll=unroll)
            values = jax.ShapeDtypeStruct(matrix.values_shape, jnp.float32)
            ct = jax.ShapeDtypeStruct((shape[0], k), jnp.float32)
            add(f"A @ X, unroll {unroll}", k, product, (values, x, *matrix.structure))
            add(
                f"gradient step (values, X), unroll {unroll}",
                k,
                pullback,
                (ct, values, x, *matrix.structure),
            )
        product, pullback = kernels(chunk_steps=CSR_CHUNK_STEPS)
        for lead, label in (((), ""), ((BATCH,), f"batch of {BATCH} ")):
            values = jax.ShapeDtypeStruct((*lead, *matrix.values_shape), jnp.float32)
            ct = jax.ShapeDtypeStruct((*lead, shape[0], k), jnp.float32)
            add(f"{label}A @ X, {chunks}", k, product, (values, x, *matrix.structure))
            add(
                f"{label}gradient step (values, X), {chunks}",
                k,
                pullback,
                (ct, values, x, *matrix.structure),
            )

    sorted_transposed = functools.partial(
        matmul_t_by_transposed_structure,
        triton_csr.csr_matmul_triton,
        shape=shape,
        platform=PLATFORM,
    )
    values = jax.ShapeDtypeStruct(matrix.values_shape, jnp.float32)
    ct = jax.ShapeDtypeStruct((shape[0], 8), jnp.float32)
    add("A.T @ G, sorted per call", 8, sorted_transposed, (values, ct, *matrix.structure))
    return found


def _operations(matrix: Matrix, dtype, k: int) -> dict[str, tuple[Callable, tuple]]:
    """Operation name -> (function of abstract arrays, their avals)."""
    m, n = matrix.shape
    values = jax.ShapeDtypeStruct(matrix.values_shape, dtype)
    batch = jax.ShapeDtypeStruct((BATCH, *matrix.values_shape), dtype)
    x, ct = jax.ShapeDtypeStruct((n, k), dtype), jax.ShapeDtypeStruct((m, k), dtype)
    batch_ct = jax.ShapeDtypeStruct((BATCH, m, k), dtype)
    xt = jax.ShapeDtypeStruct((k, m), dtype)

    def product(values, x, *structure):
        return js.matmul(matrix.build(values, *structure), x, backend="pallas")

    def left_product(values, xt, *structure):
        return js.matmul(xt, matrix.build(values, *structure), backend="pallas")

    def batched(values, x, *structure):
        return jax.vmap(product, in_axes=(0, None, *[None] * len(structure)))(values, x, *structure)

    def gradient(function):
        def vjp(values, x, ct, *structure):
            _, pullback = jax.vjp(lambda v, y: function(v, y, *structure), values, x)
            return pullback(ct)

        return vjp

    return {
        "A @ X": (product, (values, x, *matrix.structure)),
        "X @ A": (left_product, (values, xt, *matrix.structure)),
        "vjp of A @ X (values, X)": (gradient(product), (values, x, ct, *matrix.structure)),
        f"vmap A @ X ({BATCH} matrices)": (batched, (batch, x, *matrix.structure)),
        f"vjp of vmap A @ X ({BATCH} matrices)": (
            gradient(batched),
            (batch, x, batch_ct, *matrix.structure),
        ),
    }


def planted_programs() -> list[Program]:
    """Kernels that must not pass: a Pallas Triton kernel whose `(256, 256)` float32 blocks
    need 256 KiB of shared memory for their product (an H100 block has 227 KiB), which the
    back end rejects; and the DIA product kernel with 64 warps (2048 threads per block, the
    limit is 1024), which XLA compiles without complaint and the launch check catches."""
    side = 256

    def square_kernel(x_ref, out_ref):
        out_ref[...] = jnp.dot(x_ref[...], x_ref[...])

    def oversized_square(x):
        block = pl.BlockSpec((side, side), lambda i: (0, 0))
        return pl.pallas_call(
            square_kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(1,),
            in_specs=[block],
            out_specs=block,
            compiler_params=pltriton.CompilerParams(num_warps=4),
            name="planted_oversized_square",
        )(x)

    n = STENCIL_SIDE**2
    offsets = (-STENCIL_SIDE, -1, 0, 1, STENCIL_SIDE)
    too_many_warps = triton_dia.BlockSizes(block_rows=32, block_cols=8, num_warps=64)

    def dia_with_too_many_threads(values, x):
        return triton_dia.dia_matmul_triton(
            values, x, offsets=offsets, shape=(n, n), platform=PLATFORM, block_sizes=too_many_warps
        )

    square = jax.ShapeDtypeStruct((side, side), jnp.float32)
    return [
        Program(
            "planted",
            f"({side}, {side}) block product",
            "float32",
            side,
            "triton",
            oversized_square,
            (square,),
        ),
        Program(
            "planted",
            "DIA product, 64 warps",
            "float32",
            8,
            "triton",
            dia_with_too_many_threads,
            (
                jax.ShapeDtypeStruct((len(offsets), n), jnp.float32),
                jax.ShapeDtypeStruct((n, 8), jnp.float32),
            ),
        ),
    ]
