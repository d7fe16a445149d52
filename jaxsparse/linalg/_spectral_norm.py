"""The spectral norm `||A||_2`, the largest singular value, for `norm(A, 2)`.

Lanczos (`thick_restart_lanczos`) finds the largest eigenvalue of the smaller Gram matrix,
`A^H A` for a tall `A` and `A A^H` for a wide one, through products with `A` and `A^H`:
the Gram matrix is never formed, and the matrix is scaled to entries of at most 1 first
(the Gram matrix squares them). The norm is then `||A v||` (or `||A^H u||`) for the
eigenvector found: its error is about the square of the vector's over the gap to the next
singular value, so residuals of `sqrt(eps)` give it to rounding where that gap is not
small (clustered top values converge to their cluster). Its derivative in the values is
`Re(u^H dA v)` for the top singular pair `(u, v)`, where the largest singular value is
simple (as every derivative of an eigenvalue, it is not defined where it is repeated).
"""

import equinox as eqx
import jax
import jax.numpy as jnp

from .._coordinates import entries
from .._csr import CSRMatrix
from ._eigsh_lanczos import start_vector, thick_restart_lanczos
from ._gram_operator import GramOperator
from ._working_dtype import working_dtype

# The Krylov basis's size: the largest eigenvalue of a Gram matrix is well separated in
# relative terms, so a short basis converges in few restarts.
_NCV = 20


def spectral_norm(matrix) -> jax.Array:
    """`||matrix||_2` of one (unbatched) matrix, in its real working dtype (float32 for
    half precisions)."""
    dtype = working_dtype(matrix.dtype)
    return _compiled_largest_singular_value(matrix.astype(dtype))


@eqx.filter_custom_jvp
def _largest_singular_value(A):
    return _top_singular_triplet(A)[0]


@_largest_singular_value.def_jvp
def _largest_singular_value_jvp(primals, tangents):
    (A,), (A_dot,) = primals, tangents
    value, u, v = _top_singular_triplet(A)
    if A_dot is None or A_dot.data is None:
        return value, jnp.zeros_like(value)
    return value, jnp.real(jnp.vdot(u, A.with_data(A_dot.data) @ v))


_compiled_largest_singular_value = eqx.filter_jit(_largest_singular_value)


def _top_singular_triplet(A):
    """`(sigma, u, v)`: the largest singular value and unit singular vectors `A v = sigma
    u` (zero vectors `u` for a zero matrix)."""
    m, n = A.shape
    real = jnp.finfo(A.dtype).dtype
    if min(m, n) == 0:
        return jnp.zeros((), real), jnp.zeros((m,), A.dtype), jnp.zeros((n,), A.dtype)
    # Entries scaled to at most 1: the Gram matrix squares them, and so does `||A v||`,
    # where large ones would overflow and small ones underflow.
    values = A.data if isinstance(A, CSRMatrix) else entries(A)[2]
    largest = jnp.max(jnp.abs(values), initial=0)
    scale = jnp.where(largest > 0, largest, 1).astype(real)
    data = eqx.error_if(A.data, ~jnp.isfinite(largest), "norm(A, 2): `A` holds inf or nan.")
    A = A.with_data(data / scale.astype(A.dtype))
    tall = m >= n
    w = jnp.ones((1,), A.dtype) if min(m, n) == 1 else _top_gram_vector(A, tall)
    image = A @ w if tall else A.H @ w
    length = jnp.linalg.norm(image).astype(real)
    scaled = image / jnp.where(length > 0, length, 1).astype(A.dtype)
    return (scale * length, scaled, w) if tall else (scale * length, w, scaled)


def _top_gram_vector(A, tall: bool) -> jax.Array:
    """The top eigenvector of the smaller Gram matrix of `A`, `A^H A` if `tall`."""
    size = A.shape[1] if tall else A.shape[0]
    result = thick_restart_lanczos(
        GramOperator(A, tall).__matmul__,
        start_vector(None, size, A.dtype),
        k=1,
        ncv=min(size, _NCV),
        which="LA",
        # Residuals of `sqrt(eps)`: `||A w||` errs by about their square over the gap to the
        # next singular value, and where the top ones cluster the vector converges slowly.
        tol=float(jnp.finfo(A.dtype).eps) ** 0.5,
        maxiter=10 * size,
    )
    return eqx.error_if(
        result.vectors[:, 0],
        ~result.converged,
        "norm(A, 2): the largest singular value did not converge.",
    )
