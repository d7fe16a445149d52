"""The machinery shared by every sparse primitive: evaluation, lowering and batching.

Each sparse operation (a DIA product, a CSR sampled product, ...) is a JAX primitive, so
`jax.jvp`, `jax.grad`, `jax.vmap` and their compositions see it as one linear operation
with rules of its own, never as a dense matrix. This module builds such a primitive from
its output shape and its two implementations (XLA reference and Pallas kernel); the
per-format modules (`_dia_ops.py`, `_csr_ops.py`) add the autodiff rules.

Every primitive carries a `backend` parameter (see `_backend.py`). The implementation is
picked in the lowering rule, once the target platform is known.
"""

import functools
from collections.abc import Callable

import jax
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import mlir

from ._backend import PLATFORMS, choose_implementation


def define_primitive(
    name: str,
    *,
    abstract_eval: Callable,
    xla_impl: Callable,
    pallas_impl: Callable,
    pallas_supports: Callable,
    cpu_impl: Callable | None = None,
) -> Primitive:
    """A primitive whose lowering picks XLA or Pallas per backend and platform.

    **Arguments:**

    - `name`: the primitive's name, as it appears in jaxprs.
    - `abstract_eval`: `(*avals, **params) -> ShapedArray`.
    - `xla_impl`: `(*arrays, **params) -> array`, the pure `jax.numpy` reference.
    - `pallas_impl`: `(*arrays, interpret, platform, **params) -> array`.
    - `pallas_supports`: `(dtype, platform) -> bool`.
    - `cpu_impl`: `(*arrays, **params) -> array`, the XLA path on CPU where something
      faster than the reference exists (`kernels/cpu.py`); `None` uses `xla_impl`.

    **Returns:** the primitive. `params` always include `backend`, which the implementations
    do not receive.
    """
    primitive = Primitive(name)
    primitive.def_abstract_eval(abstract_eval)
    primitive.def_impl(functools.partial(_apply_compiled, primitive))

    def lowering(ctx, *args, backend, platform, **params):
        dtype = ctx.avals_out[0].dtype
        implementation = choose_implementation(
            backend, platform, lambda p: pallas_supports(dtype, p)
        )
        if implementation == "xla":
            impl = cpu_impl if platform == "cpu" and cpu_impl is not None else xla_impl
            fn = functools.partial(impl, **params)
        else:
            fn = functools.partial(
                pallas_impl, interpret=implementation == "interpret", platform=platform, **params
            )
        return mlir.lower_fun(fn, multiple_results=False)(ctx, *args)

    for platform in PLATFORMS:
        mlir.register_lowering(
            primitive, functools.partial(lowering, platform=platform), platform=platform
        )
    return primitive


def check_same_dtype(name: str, a, b) -> None:
    """The abstract-evaluation check that a primitive's two floating operands agree."""
    if a.dtype != b.dtype:
        raise TypeError(f"{name}: operands must share a dtype, got {a.dtype} and {b.dtype}.")


def _apply_compiled(primitive: Primitive, *args, **params):
    """Eager evaluation: compile the single primitive once per set of parameters."""
    return _compiled_primitive(primitive, tuple(sorted(params.items())))(*args)


@functools.lru_cache(maxsize=256)
def _compiled_primitive(primitive: Primitive, params: tuple) -> Callable:
    return jax.jit(functools.partial(primitive.bind, **dict(params)))


def batch_by_folding_columns(primitive: Primitive, args, dims, *, operand: int, params: dict):
    """Batch a product that is batched only in its dense operand `args[operand]`.

    A batch of `B` operands of shape `(r, k)` is one operand of shape `(r, B * k)`, so the
    whole batch runs as one wider product. The output's batch axis is 1.
    """
    dense = jax.numpy.moveaxis(args[operand], dims[operand], 1)
    rows, size, cols = dense.shape
    folded = list(args)
    folded[operand] = dense.reshape(rows, size * cols)
    out = primitive.bind(*folded, **params)
    return out.reshape(out.shape[0], size, cols), 1


def batch_by_mapping(primitive: Primitive, args, dims, *, params: dict):
    """Batch any combination of batched arguments (`None` in `dims`: not batched) with a
    sequential `lax.map`.

    Used when the sparse values or structure themselves are batched: each member of the
    batch is a different matrix, which no single product call can express.
    """
    batched = [i for i, d in enumerate(dims) if d is not None]

    def one_member(members):
        call_args = list(args)
        for i, member in zip(batched, members, strict=True):
            call_args[i] = member
        return primitive.bind(*call_args, **params)

    stacked = tuple(jax.numpy.moveaxis(args[i], dims[i], 0) for i in batched)
    return lax.map(one_member, stacked), 0
