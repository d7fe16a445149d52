"""The derivatives of `eigs`'s eigenpairs, for simple eigenvalues.

With `u` the left eigenvector of `(lambda, v)` (`u^H A = lambda u^H`), differentiating
`A v = lambda v` gives

    d lambda = u^H dA v / (u^H v),    (A - lambda I) dv = -(I - v u^H / (u^H v)) dA v.

The second equation fixes `dv` up to a multiple of `v`. Its solution `z` with `u^H z = 0`
solves the bordered system `[[A - lambda I, v], [u^H, 0]] [z; mu] = [rhs; 0]`, which is
nonsingular for a simple eigenvalue: one sparse factorization per eigenpair
(`js.linalg.spsolve` of a CSR matrix of `nnz + 3n` entries). `eigs` returns unit vectors
whose largest entry `p` is real and positive, so `dv = z + c v` with the real part of `c`
keeping `||v|| = 1` and its imaginary part keeping `v[p]` real.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._csr import CSRMatrix
from ._spsolve import spsolve


def left_vectors(eigenpairs, A, sigma, values, vectors, settings) -> jax.Array:
    """For the eigenpairs `(values, vectors)`, the unit left eigenvectors `u_i`, from
    `eigenpairs` (`eigs`'s iteration) on `A^H` (one value more is asked of it, so a
    complex conjugate pair that `k` splits is found whole), each the one whose value is
    nearest `conj(lambda_i)`; and whether `lambda_i` counts as simple:

    - that value lies within `sqrt(tol)` (relative) of `conj(lambda_i)`: a defective
      eigenvalue's left and right iterations find values much further apart;
    - no other value on either side lies within the eigenvalues' resolution, `10 * tol`
      times the operator's norm over `|u_i^H v_i|` (the first-order error of an
      eigenvalue whose residual is within `tol`; through `1 / (lambda - sigma)` in
      shift-invert mode): closer values are one repeated eigenvalue as far as the
      iteration can tell."""
    n = A.shape[0]
    k = min(settings.k + 1, n - 2)
    left = dataclasses.replace(settings, k=k, ncv=min(n, max(settings.ncv, k + 2)))
    # The extra value need not converge: it may sit in a cluster the wanted ones do not.
    conjugates, found_vectors, _, norm = eigenpairs(
        A, sigma, left, adjoint=True, converging=settings.k
    )
    distance = jnp.abs(jnp.conj(conjugates)[None, :] - values[:, None])  # [i, j]
    nearest = jnp.argmin(distance, axis=1)
    u = found_vectors[:, nearest]
    scale = jnp.maximum(jnp.max(jnp.abs(values)), jnp.finfo(values.dtype).tiny)
    found = jnp.min(distance, axis=1) <= float(np.sqrt(settings.tol)) * scale
    overlap = jnp.abs(jnp.sum(jnp.conj(u) * vectors, axis=0))
    resolution = 10 * settings.tol * norm / jnp.maximum(overlap, jnp.finfo(overlap.dtype).tiny)
    if settings.shift_invert:
        resolution = resolution * jnp.abs(values - sigma.astype(values.dtype)) ** 2
    gaps = jnp.abs(values[None, :] - values[:, None])
    alone = (jnp.sum(gaps <= resolution[:, None], axis=1) == 1) & (
        jnp.sum(distance <= resolution[:, None], axis=1) <= 1
    )
    return u, found & alone


def eigenpair_tangents(A, values, vectors, left, matched, dA_vectors):
    """`(d lambda, dv)` of every eigenpair (the columns of `vectors`, unit, largest entry
    real and positive) for `dA_vectors = dA V` (see the module); `nan` for the pairs not
    `matched` to a left eigenvector. Those pairs compute with stand-ins (`u = v`, and an
    identity for the bordered matrix) that keep every number finite, so that in reverse
    mode they poison only the cotangents that reach them."""
    left = jnp.where(matched, left, vectors)
    overlaps = jnp.sum(jnp.conj(left) * vectors, axis=0)  # u_i^H v_i
    values_dot = jnp.sum(jnp.conj(left) * dA_vectors, axis=0) / overlaps
    rhs = -(dA_vectors - vectors * values_dot)
    bordered = _bordered_structure(lax.stop_gradient(A).tocsr().astype(vectors.dtype))
    solve = jax.vmap(_bordered_solve, in_axes=(None, 0, 1, 1, 0, 1), out_axes=1)
    z = solve(
        bordered,
        lax.stop_gradient(values),
        *(lax.stop_gradient(x) for x in (vectors, left)),
        matched,
        rhs,
    )
    largest = jnp.argmax(jnp.abs(vectors), axis=0)
    z_largest = jnp.take_along_axis(z, largest[None], axis=0)[0]
    v_largest = jnp.take_along_axis(vectors, largest[None], axis=0)[0].real
    c = lax.complex(
        -jnp.real(jnp.sum(jnp.conj(vectors) * z, axis=0)), -jnp.imag(z_largest) / v_largest
    )
    return _nan_unless(values_dot, matched), _nan_unless(z + vectors * c, matched)


def _nan_unless(tangent, kept):
    """`tangent` where `kept`, else `nan`, as a linear map whose transpose gives `nan` only
    where `kept` is false and the cotangent is not zero: a cotangent of zero on a
    discarded entry (an eigenvalue the loss does not use) leaves the others' gradients
    finite, where `0 * nan` would not."""
    scale = jnp.where(kept, 1, jnp.nan).astype(tangent.dtype)
    return lax.custom_linear_solve(
        lambda x: x / scale,
        tangent,
        solve=lambda _, b: b * scale,
        transpose_solve=lambda _, c: jnp.where(c == 0, 0, c * scale),
    )


@dataclasses.dataclass(frozen=True)
class _Bordered:
    """`A`'s values and where they, the shift, the border column and the border row go
    in the bordered CSR matrix's arrays."""

    data: jax.Array  # A's stored values
    moved: jax.Array  # their positions
    diagonal: jax.Array  # (n,): where -lambda goes in each row
    indices: jax.Array
    indptr: jax.Array


def _bordered_structure(A: CSRMatrix) -> _Bordered:
    """The structure of `[[A - lambda I, v], [u^H, 0]]`: each row of `A` gains two entries
    at its end (column `i`, repeated columns add up, and column `n`), and the last row
    holds columns `0 .. n - 1`."""
    n = A.shape[0]
    nnz = A.indices.shape[0]
    index = jnp.int64 if nnz + 3 * n + 1 >= np.iinfo(np.int32).max else jnp.int32
    indptr = A.indptr.astype(index)
    rows = jnp.arange(n, dtype=index)
    stored = jnp.arange(nnz, dtype=index)
    row_of = jnp.searchsorted(indptr, stored, side="right").astype(index) - 1
    moved = stored + 2 * row_of
    diagonal = indptr[1:] + 2 * rows
    indices = (
        jnp.zeros((nnz + 3 * n,), index)
        .at[moved]
        .set(A.indices.astype(index))
        .at[diagonal]
        .set(rows)
        .at[diagonal + 1]
        .set(n)
        .at[nnz + 2 * n :]
        .set(rows)
    )
    bordered_indptr = jnp.concatenate(
        [indptr + 2 * jnp.arange(n + 1, dtype=index), jnp.full((1,), nnz + 3 * n, index)]
    )
    return _Bordered(A.data, moved, diagonal, indices, bordered_indptr)


def _bordered_solve(bordered: _Bordered, value, v, u, matched, rhs) -> jax.Array:
    """`z` with `(A - value I) z + mu v = rhs` and `u^H z = 0`; where not `matched`, the
    solve of `[[I, e_0], [e_0^T, 0]]` instead (nonsingular, where the bordered matrix of a
    defective eigenvalue is not)."""
    n = v.shape[0]
    nnz = bordered.data.shape[0]
    first = jnp.zeros_like(v).at[0].set(1)
    value = jnp.where(matched, value, -1)
    v, u = jnp.where(matched, v, first), jnp.where(matched, u, first)
    data = (
        jnp.zeros(bordered.indices.shape, v.dtype)
        .at[bordered.moved]
        .set(jnp.where(matched, bordered.data, 0))
        .at[bordered.diagonal]
        .set(-value)
        .at[bordered.diagonal + 1]
        .set(v)
        .at[nnz + 2 * n :]
        .set(jnp.conj(u))
    )
    matrix = CSRMatrix((data, bordered.indices, bordered.indptr), shape=(n + 1, n + 1))
    return spsolve(matrix, jnp.concatenate([rhs, jnp.zeros((1,), rhs.dtype)]))[:n]
