"""One builder for sparse products: a format declares its product family as data.

Every format has three products, each a JAX primitive bilinear in its first two array
arguments, with the format's integer structure (if any) after them and its static
metadata (`shape`, DIA's `offsets`) as parameters:

| member     | computes                          | transpose in 1st argument | in 2nd argument   |
|------------|-----------------------------------|---------------------------|-------------------|
| `matmul`   | `matmul(a, x) = A @ x`            | `sddmm(ct, x)`            | `matmul_t(a, ct)` |
| `matmul_t` | `matmul_t(a, g) = A^T @ g`        | `sddmm(g, ct)`            | `matmul(a, ct)`   |
| `sddmm`    | `sddmm(g, x)[slot] = g[i] . x[j]` | `matmul(ct, x)`           | `matmul_t(ct, g)` |

(`a` and `ct` in the first argument are stored values: `A`'s, or a cotangent with the
same structure. `sddmm` is the product sampled on the structure: slot `(i, j)` gets
`sum_c g[i, c] * x[j, c]`, the gradient of `A @ x` in `A`'s values.) The transposes are
the same for every format and close on the family, so every order of differentiation
stays sparse. `product_family` registers, for the three members at once:

- the abstract evaluation, from `shape` and the format's `values_shape`;
- the lowering per platform, which asks `_backend.choose_implementation` for one entry of
  the member's table of implementations (`{"xla": ..., "native": ..., "pallas": ...}`);
  every implementation of a member takes the primitive's arguments and parameters;
- the JVP (two products: bilinearity), the transposes above, and batching (below).

Every primitive also carries a `backend` parameter, which the implementations do not see.

**Batches.** The batching rule never maps a product sequentially. A batch of dense operands alone
(`x` of `matmul`, `g` of `matmul_t`) is folded into columns: one wider product. Any other
batch becomes one leading batch axis on the two bilinear arguments, and every
implementation takes it (the contract a new implementation family follows):

| member     | first argument          | second argument         | result          |
|------------|-------------------------|-------------------------|-----------------|
| `matmul`   | values `(B, *values)`   | `(n, k)` or `(B, n, k)` | `(B, m, k)`     |
| `matmul_t` | values `(B, *values)`   | `(m, k)` or `(B, m, k)` | `(B, n, k)`     |
| `sddmm`    | `(m, k)` or `(B, m, k)` | `(n, k)` or `(B, n, k)` | `(B, *values)`  |

(`values` is the unbatched values' shape, `values_shape`; a `matmul` or `matmul_t` whose
operand is batched always has batched values too; an `sddmm` has at least one batched
argument.) An argument without the axis is shared by the whole batch, and the structure
(CSR's index arrays) never has it: the implementation reads the structure, and a shared
operand, once for all `B` matrices. Nested `vmap`s merge into the one axis. A batch of
structures is the format's `batch_structure` rule (CSR: one block-diagonal matrix). An
implementation tells a batched call by its arguments' ranks; every family takes the axis.
The transposes sum a shared argument's cotangent over the batch.
"""

import dataclasses
import functools
from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
from jax.core import ShapedArray
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from ._backend import PLATFORMS, choose_implementation

MEMBERS = ("matmul", "matmul_t", "sddmm")


@dataclasses.dataclass(frozen=True)
class ProductFamily:
    """The three product primitives of one format (see the module docstring)."""

    matmul: Primitive
    matmul_t: Primitive
    sddmm: Primitive


def product_family(
    format_name: str,
    *,
    values_shape: Callable[..., tuple[int, ...]],
    implementations: Mapping[str, Mapping[str, Callable]],
    supports: Mapping[str, Callable],
    batch_structure: Callable | None = None,
) -> ProductFamily:
    """Build and register the product primitives of one format.

    **Arguments:**

    - `format_name`: e.g. `"dia"`; the primitives are named `jaxsparse_dia_matmul`,
      `jaxsparse_dia_matmul_t` and `jaxsparse_dia_sddmm`.
    - `values_shape`: `(*structure_avals, **params) -> shape` of the stored values, the
      result of `sddmm`.
    - `implementations`: member (`"matmul"`, `"matmul_t"`, `"sddmm"`) -> implementation
      family (`"xla"`, `"native"`, `"pallas"`, ...) -> function taking the primitive's arrays
      and static parameters (kernel families also take `interpret` and `platform`).
    - `supports`: implementation family -> `(dtype, platform) -> bool`, the dtypes its
      kernels take; families not listed take every dtype.
    - `batch_structure`: for formats with structure arguments, `(primitive, args, dims,
      **params) -> (out, out_dim)`, the batching rule when the structure is batched.

    **Returns:** the `ProductFamily`.
    """
    if set(implementations) != set(MEMBERS):
        raise ValueError(f"`implementations` must have exactly the members {MEMBERS}.")
    family = ProductFamily(
        *(
            _product_primitive(
                f"jaxsparse_{format_name}_{member}",
                abstract_eval=functools.partial(_abstract_eval, member, values_shape),
                implementations=implementations[member],
                supports=supports,
            )
            for member in MEMBERS
        )
    )
    # (transpose in the first argument, transpose in the second): (ct, first, second) ->
    # (member, its first argument, its second argument); structure and params follow.
    transposes = {
        family.matmul: (
            lambda ct, a, x: (family.sddmm, ct, x),
            lambda ct, a, x: (family.matmul_t, a, ct),
        ),
        family.matmul_t: (
            lambda ct, a, g: (family.sddmm, g, ct),
            lambda ct, a, g: (family.matmul, a, ct),
        ),
        family.sddmm: (
            lambda ct, g, x: (family.matmul, ct, x),
            lambda ct, g, x: (family.matmul_t, ct, g),
        ),
    }
    for primitive, rules in transposes.items():
        ad.primitive_jvps[primitive] = functools.partial(_bilinear_jvp, primitive)
        ad.primitive_transposes[primitive] = functools.partial(_bilinear_transpose, rules)
    for member in MEMBERS:
        batching.primitive_batchers[getattr(family, member)] = functools.partial(
            _batch, getattr(family, member), member, values_shape, batch_structure
        )
    return family


def _abstract_eval(member, values_shape, first, second, *structure, shape, backend, **params):
    if first.dtype != second.dtype:
        raise TypeError(
            f"{member}: operands must share a dtype, got {first.dtype} and {second.dtype}."
        )
    values = values_shape(*structure, shape=shape, **params)
    first_rank = 2 if member == "sddmm" else len(values)
    batch = _batch_shape(member, (first, first_rank), (second, 2))
    m, n = shape
    if member == "matmul":
        return ShapedArray((*batch, m, second.shape[-1]), second.dtype)
    if member == "matmul_t":
        return ShapedArray((*batch, n, second.shape[-1]), second.dtype)
    return ShapedArray((*batch, *values), second.dtype)


def _batch_shape(member, *arrays_and_ranks) -> tuple:
    """`(B,)` if one of the bilinear arguments has the leading batch axis, else `()`."""
    sizes = {a.shape[0] for a, rank in arrays_and_ranks if a.ndim == rank + 1}
    if any(a.ndim not in (rank, rank + 1) for a, rank in arrays_and_ranks) or len(sizes) > 1:
        shapes = [a.shape for a, _ in arrays_and_ranks]
        raise ValueError(f"{member}: arguments of shapes {shapes} are not one batch.")
    return tuple(sizes)


def _product_primitive(name, *, abstract_eval, implementations, supports) -> Primitive:
    primitive = Primitive(name)
    primitive.def_abstract_eval(abstract_eval)
    primitive.def_impl(functools.partial(_apply_compiled, primitive))

    def lowering(ctx, *args, backend, platform, **params):
        # What else decides: whether `jax.export` is lowering (then only implementations
        # whose custom calls it guarantees), and whether a dimension is symbolic (shape
        # polymorphism, which no Pallas kernel takes).
        implementation = choose_implementation(
            name,
            implementations,
            supports,
            backend=backend,
            platform=platform,
            dtype=ctx.avals_in[0].dtype,
            for_export=ctx.module_context.lowering_parameters.for_export,
            symbolic_shapes=any(
                not isinstance(dim, int) for aval in ctx.avals_in for dim in aval.shape
            ),
        )
        function = functools.partial(implementation, **params)
        return mlir.lower_fun(function, multiple_results=False)(ctx, *args)

    for platform in PLATFORMS:
        mlir.register_lowering(
            primitive, functools.partial(lowering, platform=platform), platform=platform
        )
    return primitive


def _apply_compiled(primitive: Primitive, *args, **params):
    """Eager evaluation: compile the single primitive once per set of parameters."""
    return _compiled_primitive(primitive, tuple(sorted(params.items())))(*args)


@functools.lru_cache(maxsize=256)
def _compiled_primitive(primitive: Primitive, params: tuple) -> Callable:
    return jax.jit(functools.partial(primitive.bind, **dict(params)))


def _bilinear_jvp(primitive, primals, tangents, **params):
    """`d(f(a, b)) = f(da, b) + f(a, db)`: JAX calls this only when a tangent is nonzero,
    and the integer structure's tangents are always zero."""
    out = primitive.bind(*primals, **params)
    terms = []
    for position in (0, 1):
        if type(tangents[position]) is not ad.Zero:
            args = list(primals)
            args[position] = tangents[position]
            terms.append(primitive.bind(*args, **params))
    return out, sum(terms[1:], start=terms[0])


def _bilinear_transpose(rules, ct, first, second, *structure, **params):
    """The cotangent of whichever of the two bilinear arguments is being transposed; an
    argument shared by a batch (no batch axis) gets the sum over the batch."""
    cotangents = [None] * (2 + len(structure))
    if type(ct) is ad.Zero:
        return cotangents
    position = 0 if ad.is_undefined_primal(first) else 1
    member, new_first, new_second = rules[position](ct, first, second)
    cotangent = member.bind(new_first, new_second, *structure, **params)
    primal_rank = (first, second)[position].aval.ndim
    if cotangent.ndim == primal_rank + 1:
        cotangent = jnp.sum(cotangent, axis=0)
    cotangents[position] = cotangent
    return cotangents


def _batch(primitive, member, values_shape, batch_structure, args, dims, **params):
    """The batching rule: see "Batches" in the module docstring."""
    if any(d is not None for d in dims[2:]):
        if batch_structure is None:
            raise NotImplementedError(f"{primitive.name}: no batching rule for its structure.")
        return batch_structure(primitive, args, dims, **params)
    first, second, *structure = args
    if member != "sddmm" and dims[0] is None:
        return _fold_into_columns(primitive, first, second, dims[1], structure, params)
    values = values_shape(*structure, **{k: v for k, v in params.items() if k != "backend"})
    ranks = (2 if member == "sddmm" else len(values), 2)
    # A nested vmap meets arguments that already carry an (inner) batch axis: the new axis
    # and the inner one merge into one leading axis, new-major.
    inner = [
        a.ndim - (d is not None) > r for a, d, r in zip(args[:2], dims[:2], ranks, strict=True)
    ]
    size = next(a.shape[d] for a, d in zip(args[:2], dims[:2], strict=True) if d is not None)
    inner_size = next(
        (
            a.shape[1 if d == 0 else 0]
            for a, d, i in zip(args[:2], dims[:2], inner, strict=True)
            if i
        ),
        1,
    )
    merged = [
        _with_merged_batch(a, d, i, any(inner), size, inner_size)
        for a, d, i in zip(args[:2], dims[:2], inner, strict=True)
    ]
    out = primitive.bind(*merged, *structure, **params)
    if any(inner):
        out = out.reshape(size, inner_size, *out.shape[1:])
    return out, 0


def _fold_into_columns(primitive, values, dense, dim, structure, params):
    """Only the dense operand is batched: its batch joins its columns (the last axis)."""
    dense = jnp.moveaxis(dense, dim, -2)
    *lead, size, cols = dense.shape
    out = primitive.bind(values, dense.reshape(*lead, size * cols), *structure, **params)
    out = out.reshape(*out.shape[:-1], size, cols)
    return out, out.ndim - 2


def _with_merged_batch(array, dim, has_inner, merge, size, inner_size):
    """`array` with its new batch axis (`dim`, or none: shared) and inner batch axis (if
    `has_inner`) as one leading axis of `size * inner_size`, where `merge`; an array with
    neither stays shared."""
    if dim is None and not has_inner:
        return array
    if dim is None:
        array = jnp.broadcast_to(array, (size, *array.shape))
    else:
        array = jnp.moveaxis(array, dim, 0)
    if not merge:
        return array
    if not has_inner:
        array = jnp.broadcast_to(array[:, None], (size, inner_size, *array.shape[1:]))
    return array.reshape(size * inner_size, *array.shape[2:])
