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
  the member's table of implementations (`{"xla": ..., "cpu": ..., "pallas": ...}`);
  every implementation of a member takes the primitive's arguments and parameters;
- the JVP (two products: bilinearity), the transposes above, and batching: a batch of
  dense operands (`x` of `matmul`, `g` of `matmul_t`) is folded into columns, one wider
  product; anything else batched maps sequentially with `lax.map`.

Every primitive also carries a `backend` parameter, which the implementations do not see.
"""

import dataclasses
import functools
from collections.abc import Callable, Mapping

import jax
from jax import lax
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
) -> ProductFamily:
    """Build and register the product primitives of one format.

    **Arguments:**

    - `format_name`: e.g. `"dia"`; the primitives are named `jaxsparse_dia_matmul`,
      `jaxsparse_dia_matmul_t` and `jaxsparse_dia_sddmm`.
    - `values_shape`: `(*structure_avals, **params) -> shape` of the stored values, the
      result of `sddmm`.
    - `implementations`: member (`"matmul"`, `"matmul_t"`, `"sddmm"`) -> implementation
      family (`"xla"`, `"cpu"`, `"pallas"`, ...) -> function taking the primitive's arrays
      and static parameters (kernel families also take `interpret` and `platform`).
    - `supports`: implementation family -> `(dtype, platform) -> bool`, the dtypes its
      kernels take; families not listed take every dtype.

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
    batching.primitive_batchers[family.matmul] = functools.partial(_batch, family.matmul, True)
    batching.primitive_batchers[family.matmul_t] = functools.partial(_batch, family.matmul_t, True)
    batching.primitive_batchers[family.sddmm] = functools.partial(_batch, family.sddmm, False)
    return family


def _abstract_eval(member, values_shape, first, second, *structure, shape, backend, **params):
    if first.dtype != second.dtype:
        raise TypeError(
            f"{member}: operands must share a dtype, got {first.dtype} and {second.dtype}."
        )
    m, n = shape
    if member == "matmul":
        return ShapedArray((m, second.shape[1]), second.dtype)
    if member == "matmul_t":
        return ShapedArray((n, second.shape[1]), second.dtype)
    return ShapedArray(values_shape(*structure, shape=shape, **params), second.dtype)


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
    """The cotangent of whichever of the two bilinear arguments is being transposed."""
    cotangents = [None] * (2 + len(structure))
    if type(ct) is ad.Zero:
        return cotangents
    position = 0 if ad.is_undefined_primal(first) else 1
    member, new_first, new_second = rules[position](ct, first, second)
    cotangents[position] = member.bind(new_first, new_second, *structure, **params)
    return cotangents


def _batch(primitive, folds_second: bool, args, dims, **params):
    """One wider product when only the dense operand (second argument) is batched and the
    member is column-wise in it; otherwise a sequential map over the batch."""
    if folds_second and all(d is None for i, d in enumerate(dims) if i != 1):
        dense = jax.numpy.moveaxis(args[1], dims[1], 1)
        rows, size, cols = dense.shape
        out = primitive.bind(args[0], dense.reshape(rows, size * cols), *args[2:], **params)
        return out.reshape(out.shape[0], size, cols), 1
    batched = [i for i, d in enumerate(dims) if d is not None]

    def one_member(members):
        call_args = list(args)
        for i, member in zip(batched, members, strict=True):
            call_args[i] = member
        return primitive.bind(*call_args, **params)

    stacked = tuple(jax.numpy.moveaxis(args[i], dims[i], 0) for i in batched)
    return lax.map(one_member, stacked), 0
