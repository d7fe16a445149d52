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
  the member's table of implementations (`{"xla": ..., "native": ..., "triton": ...}`);
  every implementation of a member takes the primitive's arguments and parameters;
- the JVP (two products: bilinearity), the transposes above, and batching (below).

Every primitive also carries a `backend` parameter, which the implementations do not see.

**Gradient steps in one pass.** The JVP of a member `P(a, b)` whose two tangents are both
nonzero is one `tangent` primitive, `tangent(da, db, a, b) = P(da, b) + P(a, db)` (static
parameter `member`), linear in `(da, db)` together. Its transpose, where both are being
transposed (`jax.grad` in the values and the operand), is one `pullback` primitive,
`pullback(ct, a, b) = (cotangent of a, cotangent of b)`: the two transposes of the table
above in one call, which an implementation family may compute in one pass over the
structure (`fused_pullbacks`: the native CSR kernel does for `matmul` where the columns are
banded, see `kernels/native_csr.py`, and the Triton CSR kernels on GPUs, see
`kernels/triton_csr.py`). Families without a fused pullback compute the two
transposes one after the other, and `tangent` is always the two products. Their JVPs
and batching rules are those of the two members they stand for, and `pullback`
transposes back to `tangent`'s two products.

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

from ._backend import choose_implementation
from ._families import MEMBERS, PLATFORMS

# The transposes of each member, in its first argument and in its second:
# (ct, first, second) -> (member, its first argument, its second argument); the
# structure and parameters follow unchanged.
TRANSPOSES = {
    "matmul": (lambda ct, a, x: ("sddmm", ct, x), lambda ct, a, x: ("matmul_t", a, ct)),
    "matmul_t": (lambda ct, a, g: ("sddmm", g, ct), lambda ct, a, g: ("matmul", a, ct)),
    "sddmm": (lambda ct, g, x: ("matmul", ct, x), lambda ct, g, x: ("matmul_t", ct, g)),
}


@dataclasses.dataclass(frozen=True)
class ProductFamily:
    """The product primitives of one format (see the module docstring): the three
    members, and the `tangent` and `pullback` of a gradient step."""

    matmul: Primitive
    matmul_t: Primitive
    sddmm: Primitive
    tangent: Primitive
    pullback: Primitive

    def member(self, name: str) -> Primitive:
        return getattr(self, name)


def product_family(
    format_name: str,
    *,
    values_shape: Callable[..., tuple[int, ...]],
    implementations: Mapping[str, Mapping[str, Callable]],
    supports: Mapping[str, Callable],
    batch_structure: Callable | None = None,
    fused_pullbacks: Mapping[str, Mapping[str, Callable]] | None = None,
) -> ProductFamily:
    """Build and register the product primitives of one format.

    **Arguments:**

    - `format_name`: e.g. `"dia"`; the primitives are named `jaxsparse_dia_matmul`,
      `jaxsparse_dia_matmul_t`, `jaxsparse_dia_sddmm`, `jaxsparse_dia_tangent` and
      `jaxsparse_dia_pullback`.
    - `values_shape`: `(*structure_avals, **params) -> shape` of the stored values, the
      result of `sddmm`.
    - `implementations`: member (`"matmul"`, `"matmul_t"`, `"sddmm"`) -> implementation
      family (`"xla"`, `"native"`, `"triton"`, ...) -> function taking the primitive's arrays
      and static parameters (Pallas families also take `interpret` and `platform`);
      `_families.implementations` derives it from the families' table.
    - `supports`: implementation family -> `(dtype, platform) -> bool`, the dtypes its
      kernels take; families not listed take every dtype.
    - `batch_structure`: for formats with structure arguments, `(primitive, args, dims,
      **params) -> (out, out_dim)`, the batching rule when the structure is batched.
    - `fused_pullbacks`: member -> family -> function `(ct, first, second, *structure,
      **params) -> (cotangent of first, cotangent of second)` computing both transposes of
      the member in one call; a family without one computes them one after the other.

    **Returns:** the `ProductFamily`.
    """
    if set(implementations) != set(MEMBERS):
        raise ValueError(f"`implementations` must have exactly the members {MEMBERS}.")
    fused_pullbacks = fused_pullbacks or {}
    members = [
        _product_primitive(
            f"jaxsparse_{format_name}_{member}",
            abstract_eval=functools.partial(_abstract_eval, member, values_shape),
            implementations=implementations[member],
            supports=supports,
        )
        for member in MEMBERS
    ]
    # The gradient step's primitives run in every family that has all three members.
    families = set.intersection(*(set(implementations[member]) for member in MEMBERS))
    by_family = {f: {member: implementations[member][f] for member in MEMBERS} for f in families}
    tangent = _product_primitive(
        f"jaxsparse_{format_name}_tangent",
        abstract_eval=functools.partial(_tangent_abstract_eval, values_shape),
        implementations={
            f: functools.partial(_tangent_of, by_family[f].__getitem__) for f in families
        },
        supports=supports,
    )
    pullback = _product_primitive(
        f"jaxsparse_{format_name}_pullback",
        abstract_eval=functools.partial(_pullback_abstract_eval, values_shape),
        implementations={
            f: functools.partial(
                _pullback_of,
                by_family[f].__getitem__,
                {m: fused[f] for m, fused in fused_pullbacks.items() if f in fused},
            )
            for f in families
        },
        supports=supports,
        multiple_results=True,
    )
    family = ProductFamily(*members, tangent, pullback)

    def bound(member):  # the rules compose the primitives themselves
        return family.member(member).bind

    for member in MEMBERS:
        primitive = family.member(member)
        ad.primitive_jvps[primitive] = functools.partial(_bilinear_jvp, family, member)
        ad.primitive_transposes[primitive] = functools.partial(_member_transpose, family, member)
        batching.primitive_batchers[primitive] = functools.partial(
            _batch, primitive, member, values_shape, batch_structure
        )
    for primitive, composition, bilinear in (
        (tangent, functools.partial(_tangent_of, bound), 4),
        (pullback, functools.partial(_pullback_of, bound, {}), 3),
    ):
        ad.primitive_jvps[primitive] = functools.partial(_jvp_of_composition, composition, bilinear)
        batching.primitive_batchers[primitive] = functools.partial(_batch_composition, composition)
    ad.primitive_transposes[tangent] = functools.partial(_tangent_transpose, family)
    ad.primitive_transposes[pullback] = functools.partial(_pullback_transpose, family)
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


def _tangent_abstract_eval(
    values_shape, d_first, d_second, first, second, *structure, member, **params
):
    return _abstract_eval(member, values_shape, first, second, *structure, **params)


def _pullback_abstract_eval(values_shape, ct, first, second, *structure, member, **params):
    return [
        _abstract_eval(name, values_shape, a, b, *structure, **params)
        for name, a, b in _transposed(member, ct, first, second)
    ]


def _transposed(member, ct, first, second) -> list[tuple]:
    """The member's two transposes (cotangent of `first`, of `second`), each as
    `(member, first argument, second argument)`."""
    return [rule(ct, first, second) for rule in TRANSPOSES[member]]


def _tangent_of(product_of, d_first, d_second, first, second, *structure, member, **params):
    """`P(da, b) + P(a, db)` for the member `P`, with `product_of(member)` the callable
    computing a member (an implementation, or a primitive's `bind`)."""
    product = product_of(member)
    return product(d_first, second, *structure, **params) + product(
        first, d_second, *structure, **params
    )


def _pullback_of(product_of, fused, ct, first, second, *structure, member, **params):
    """Both transposes of the member along `ct`: `fused[member]` in one call where the
    family has one, else the two products of `_transposed`."""
    if member in fused:
        return tuple(fused[member](ct, first, second, *structure, **params))
    return tuple(
        product_of(name)(a, b, *structure, **params)
        for name, a, b in _transposed(member, ct, first, second)
    )


def _batch_shape(member, *arrays_and_ranks) -> tuple:
    """`(B,)` if one of the bilinear arguments has the leading batch axis, else `()`."""
    sizes = {a.shape[0] for a, rank in arrays_and_ranks if a.ndim == rank + 1}
    if any(a.ndim not in (rank, rank + 1) for a, rank in arrays_and_ranks) or len(sizes) > 1:
        shapes = [a.shape for a, _ in arrays_and_ranks]
        raise ValueError(f"{member}: arguments of shapes {shapes} are not one batch.")
    return tuple(sizes)


def _product_primitive(
    name, *, abstract_eval, implementations, supports, multiple_results=False
) -> Primitive:
    primitive = Primitive(name)
    primitive.multiple_results = multiple_results
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
        return mlir.lower_fun(function, multiple_results=multiple_results)(ctx, *args)

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


def _bilinear_jvp(family, member, primals, tangents, **params):
    """`d(P(a, b)) = P(da, b) + P(a, db)`: one product where a tangent is zero (JAX calls
    this only when one is not, and the integer structure's tangents are always zero), else
    one `tangent` primitive, whose transpose is one `pullback`."""
    primitive = family.member(member)
    first, second, *structure = primals
    d_first, d_second = tangents[:2]
    out = primitive.bind(*primals, **params)
    if type(d_first) is ad.Zero:
        return out, primitive.bind(first, d_second, *structure, **params)
    if type(d_second) is ad.Zero:
        return out, primitive.bind(d_first, second, *structure, **params)
    return out, family.tangent.bind(
        d_first, d_second, first, second, *structure, member=member, **params
    )


def _member_transpose(family, member, ct, *args, **params):
    return _transpose_terms(family, [[(member, 0, 1)]], [ct], args, 2, params)


def _tangent_transpose(family, ct, *args, member, **params):
    """`P(da, b) + P(a, db)` transposed: one `pullback` when both tangents are being
    transposed (a gradient in the values and the operand), else term by term."""
    d_first, d_second, first, second, *structure = args
    linear = [ad.is_undefined_primal(a) for a in args[:4]]
    if type(ct) is not ad.Zero and linear == [True, True, False, False]:
        of_first, of_second = family.pullback.bind(
            ct, first, second, *structure, member=member, **params
        )
        return [_unbatched(of_first, d_first), _unbatched(of_second, d_second)] + [None] * (
            len(args) - 2
        )
    terms = [[(member, 0, 3), (member, 2, 1)]]
    return _transpose_terms(family, terms, [ct], args, 4, params)


def _pullback_transpose(family, cts, *args, member, **params):
    """Each output of `pullback` is one member of `(ct, first, second)` (positions 0-2)."""
    terms = [[(name, i, j)] for name, i, j in _transposed(member, 0, 1, 2)]
    return _transpose_terms(family, terms, cts, args, 3, params)


def _transpose_terms(family, outputs, cts, args, bilinear, params):
    """The cotangents of `args` for outputs that are sums of member products: `outputs[o]`
    lists output `o`'s terms `(member, i, j)`, each `member(args[i], args[j], *structure)`
    with the structure after the first `bilinear` arguments. A term adds, to whichever of
    its two arguments is being transposed, the member's transpose along `cts[o]`; an
    argument shared by a batch (no batch axis) gets the sum over the batch."""
    structure = args[bilinear:]
    cotangents = [None] * len(args)
    for ct, terms in zip(cts, outputs, strict=True):
        if type(ct) is ad.Zero:
            continue
        for member, i, j in terms:
            for position, slot in enumerate((i, j)):
                if not ad.is_undefined_primal(args[slot]):
                    continue
                name, first, second = TRANSPOSES[member][position](ct, args[i], args[j])
                cotangent = _unbatched(
                    family.member(name).bind(first, second, *structure, **params), args[slot]
                )
                previous = cotangents[slot]
                cotangents[slot] = cotangent if previous is None else previous + cotangent
    return cotangents


def _unbatched(cotangent, primal):
    """`cotangent`, summed over its batch axis where `primal` (an argument being
    transposed) has none: the argument was shared by the batch."""
    if cotangent.ndim == primal.aval.ndim + 1:
        return jnp.sum(cotangent, axis=0)
    return cotangent


def _jvp_of_composition(composition, bilinear, primals, tangents, *, member, **params):
    """The JVP of `tangent` or `pullback`: that of the member products it stands for
    (`composition`), with the integer structure (after the first `bilinear` arguments)
    held."""
    floats, structure = primals[:bilinear], primals[bilinear:]

    def function(*floats):
        return composition(*floats, *structure, member=member, **params)

    return jax.jvp(
        function, tuple(floats), tuple(ad.instantiate_zeros(t) for t in tangents[:bilinear])
    )


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


def _batch_composition(composition, args, dims, **params):
    """The batching rule of `tangent` and `pullback`: the member products they stand for
    (`composition`), each batched by its own rule."""
    out = jax.vmap(functools.partial(composition, **params), in_axes=tuple(dims))(*args)
    if isinstance(out, tuple):
        return out, (0,) * len(out)
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
