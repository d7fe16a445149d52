"""The spectral norm `||A||_2`, the largest singular value, for `norm(A, 2)`.

Lanczos (`thick_restart_lanczos`) finds the largest eigenvalue of the smaller Gram matrix,
`A^H A` for a tall `A` and `A A^H` for a wide one, through products with `A` and `A^H`:
the Gram matrix is never formed. The norm is then `||A v||` (or `||A^H u||`) for the
eigenvector found, which is accurate to rounding where the square root of the eigenvalue
would lose half the digits of a small norm. Its derivative in the values is
`Re(u^H dA v)` for the top singular pair `(u, v)`, where the largest singular value is
simple (as every derivative of an eigenvalue, it is not defined where it is repeated).
"""

import equinox as eqx
import jax
import jax.numpy as jnp

from ._eigsh_lanczos import start_vector, thick_restart_lanczos
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
    tall = m >= n
    size = min(m, n)
    if size == 1:  # one column or row: its Euclidean norm, no iteration
        w = jnp.ones((1,), A.dtype)
    else:
        gram = (lambda x: A.H @ (A @ x)) if tall else (lambda x: A @ (A.H @ x))
        result = thick_restart_lanczos(
            gram,
            start_vector(None, size, A.dtype),
            k=1,
            ncv=min(size, _NCV),
            which="LA",
            tol=100 * float(jnp.finfo(A.dtype).eps),
            maxiter=10 * size,
        )
        w = eqx.error_if(
            result.vectors[:, 0],
            ~result.converged,
            "norm(A, 2): the largest singular value did not converge.",
        )
    image = A @ w if tall else A.H @ w
    value = jnp.linalg.norm(image).astype(real)
    scaled = image / jnp.where(value > 0, value, 1).astype(A.dtype)
    return (value, scaled, w) if tall else (value, w, scaled)
