"""`a + sign * b` of two CSR matrices whose columns strictly increase within rows, from the
union of their structures (`_csr_union`): each slot of the sum holds at most one entry of
each, so its value is the two entries gathered (zero for none) and added, in
`accumulation_dtype` (booleans by `or`). Gathers, not a scatter that sums repeats: their
transposes under autodiff are scatters without repeats. The result is the matrix that
`_coordinates.csr_from_entries` builds from `a`'s entries then `b`'s: the same slots,
values and padding (explicit zeros at `(m - 1, n - 1)` past the distinct positions), up
to the sign of a zero: two `-0` terms add to `-0` here, as in numpy, and to `+0` in the
sort's sum into zeros.
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._base import format_class, index_dtype_for
from ._coordinates import stored_values
from ._csr_union import union_structure
from ._structure_facts import remembered
from .kernels._precision import accumulation_dtype


def add_known(a, b, *, sign: int, dtype, nnz: int | None):
    """`a + sign * b` for concrete structures (the values may be traced): the union found
    eagerly, even under `jit`, and the structure kept known; `nnz` checked, or the count
    of distinct positions when None. Both structures valid (checked on the host) and
    merged by the native kernel, which refuses anything else: the result's structure is
    valid by construction, and the host does not check it again."""
    m = a.shape[0]
    with jax.ensure_compile_time_eval():
        a_source, b_source, indices, indptr = union_of(a, b, a.nnz + b.nnz if nnz is None else nnz)
    found = int(np.asarray(indptr)[m])
    if nnz is not None and found > nnz:
        raise ValueError(f"`nnz`={nnz} is smaller than the result's {found} entries.")
    nnz = found if nnz is None else nnz
    with jax.ensure_compile_time_eval():
        indices, indptr = _trimmed(indices, indptr, nnz=nnz, dtype=index_dtype_for(a.shape, nnz))
    remembered(indices, indptr, ("valid", a.shape), lambda: True)
    values = _summed_prefix(*operand_values(a, b, sign, dtype), a_source, b_source, nnz=nnz)
    return format_class("csr")(values, indices, indptr, a.shape)


def add_traced(a, b, a_values, b_values, nnz: int):
    """`a + b` with the values given (`a_values`, `b_values`: each matrix's, cast and
    signed), for traced structures whose columns strictly increase within rows and a static
    `nnz`: more distinct positions than `nnz` raise at run time (`eqx.error_if`)."""
    m = a.shape[0]
    a_source, b_source, indices, indptr = union_of(a, b, nnz)
    values = summed_sources(a_values, b_values, a_source, b_source)
    values = eqx.error_if(
        values, indptr[m] > nnz, f"`nnz`={nnz} is smaller than the number of entries of the result"
    )
    index_dtype = index_dtype_for(a.shape, nnz)
    indptr = indptr.at[m].set(nnz)
    return format_class("csr")(
        values, indices.astype(index_dtype), indptr.astype(index_dtype), a.shape
    )


def union_of(a, b, nnz: int):
    """`_csr_union.union_structure` of two CSR matrices' structures, `nnz` slots, in an
    index dtype that counts the entries of both."""
    index_dtype = index_dtype_for(a.shape, max(nnz, a.nnz + b.nnz))
    arrays = (a.indices, a.indptr, b.indices, b.indptr)
    return union_structure(
        *(jnp.asarray(array).astype(index_dtype) for array in arrays),
        num_cols=a.shape[1],
        nnz=nnz,
    )


def operand_values(a, b, sign: int, dtype):
    """`a`'s values and `sign` times `b`'s, in `dtype` (`-` rather than a product, which
    would turn booleans into integers)."""
    a_values = stored_values(a).astype(dtype)
    b_values = stored_values(b).astype(dtype)
    return a_values, (b_values if sign > 0 else -b_values)


def summed_sources(a_values, b_values, a_source, b_source):
    """`a_values[a_source] + b_values[b_source]`, a source past the end reading zero."""

    def gathered(values, source):
        # Sources are never negative: no wrap of negative indices to read first.
        return values.at[source].get(mode="fill", fill_value=0, wrap_negative_indices=False)

    if a_values.dtype == jnp.bool_:
        return gathered(a_values, a_source) | gathered(b_values, b_source)
    wide = accumulation_dtype(a_values.dtype)
    total = gathered(a_values.astype(wide), a_source) + gathered(b_values.astype(wide), b_source)
    return total.astype(a_values.dtype)


@functools.partial(jax.jit, static_argnames="nnz")
def _summed_prefix(a_values, b_values, a_source, b_source, *, nnz: int):
    """`summed_sources` of the first `nnz` slots, one compiled program."""
    return summed_sources(a_values, b_values, a_source[:nnz], b_source[:nnz])


@functools.partial(jax.jit, static_argnames=("nnz", "dtype"))
def _trimmed(indices, indptr, *, nnz: int, dtype):
    """The union's columns and row pointers for a sum of `nnz` entries, in `dtype`: the
    first `nnz` slots, and `nnz` as the end of the last row (its padding entries)."""
    return indices[:nnz].astype(dtype), indptr.at[-1].set(nnz).astype(dtype)
