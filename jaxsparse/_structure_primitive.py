"""What the CSR structure primitives (`_csr_transpose`, `_csr_union`) share: index arrays in,
index arrays out, a native CPU kernel or a portable XLA implementation chosen at lowering,
one leading batch axis that `jax.vmap` at any depth folds into, and eager calls compiled
once per set of parameters.

The choice follows the products' rule (`_backend.choose_implementation`): `"auto"` takes
the `native` family on a CPU where it is built and takes the index dtype, except when
`jax.export` lowers (its custom call has no compatibility guarantee), a shape is symbolic
or an array is longer than the index dtype counts; `JAXSPARSE_BACKEND=xla` takes the
portable implementation, as every other platform does.
"""

import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir

from ._backend import choose_implementation, resolve_backend
from ._families import PLATFORMS
from .kernels import native_csr


def runs_natively(index_dtype) -> bool:
    """Whether an eager call with indices of `index_dtype` runs the native kernel: the
    default device a CPU where it is built, no `JAXSPARSE_BACKEND=xla`, and JAX holds the
    dtype (int64 needs 64-bit types, which numpy has always)."""
    wide_without_x64 = np.dtype(index_dtype) == np.int64 and not jax.config.jax_enable_x64
    return (
        jax.default_backend() == "cpu"
        and resolve_backend(None) != "xla"
        and native_csr.takes_indices(index_dtype, "cpu")
        and not wide_without_x64
    )


def structure_primitive(
    name: str, abstract_eval: Callable, *, native: Callable, portable: Callable
) -> Callable:
    """Defines the primitive `name` and returns its binder `bind(*arrays, **params)`.

    - `abstract_eval(*avals, **params)`: the results' `ShapedArray`s; every result carries
      the arrays' leading batch axis, if any.
    - `native`, `portable`: the implementations, `(*arrays, **params) -> results`, taking
      one optional leading batch axis.
    """
    primitive = Primitive(name)
    primitive.multiple_results = True

    def lowering(ctx, *arrays, platform, **params):
        index_dtype = ctx.avals_in[0].dtype
        avals = (*ctx.avals_in, *ctx.avals_out)
        symbolic = any(not isinstance(d, int) for a in avals for d in a.shape)
        implementations = {"native": native, "xla": portable}
        # Positions or rows past the index dtype come only with invalid structures.
        if symbolic or max(a.shape[-1] for a in avals) > np.iinfo(index_dtype).max:
            del implementations["native"]
        implementation = choose_implementation(
            name,
            implementations,
            {"native": native_csr.takes_indices},
            backend=params["backend"],
            platform=platform,
            dtype=index_dtype,
            for_export=ctx.module_context.lowering_parameters.for_export,
            symbolic_shapes=symbolic,
        )
        params = {key: value for key, value in params.items() if key != "backend"}
        function = functools.partial(implementation, **params)
        return mlir.lower_fun(function, multiple_results=True)(ctx, *arrays)

    def batch(args, dims, **params):
        """The batch of this `vmap` in front of any batch the arrays carry, folded into one
        leading axis; an array without it is repeated."""
        size = next(a.shape[d] for a, d in zip(args, dims, strict=True) if d is not None)
        args = [
            jnp.broadcast_to(a, (size, *a.shape)) if d is None else jnp.moveaxis(a, d, 0)
            for a, d in zip(args, dims, strict=True)
        ]
        leading = args[0].shape[:-1]
        # Explicit sizes, not -1: an axis may have no elements.
        folded = [a.reshape(math.prod(leading), a.shape[-1]) for a in args]
        results = primitive.bind(*folded, **params)
        return [r.reshape(*leading, r.shape[-1]) for r in results], [0] * len(results)

    @functools.lru_cache(maxsize=64)
    def compiled(params: tuple):
        return jax.jit(functools.partial(primitive.bind, **dict(params)))

    primitive.def_abstract_eval(abstract_eval)
    # Eager evaluation: the single primitive compiled once per set of parameters.
    primitive.def_impl(lambda *arrays, **params: compiled(tuple(sorted(params.items())))(*arrays))
    batching.primitive_batchers[primitive] = batch
    for platform in PLATFORMS:
        mlir.register_lowering(
            primitive, functools.partial(lowering, platform=platform), platform=platform
        )

    def bind(*arrays, **params):
        backend = "xla" if resolve_backend(None) == "xla" else "auto"
        return tuple(primitive.bind(*arrays, backend=backend, **params))

    return bind
