"""Build a 3-D diffusion operator from 1-D pieces inside `jax.jit`, solve with it, and
learn through it.

On an `N x N x N` grid with `u = 0` on the boundary, the 7-point operator with
conductivities `c = (c_x, c_y, c_z)` along the three axes is

    A(c) = c_x T (x) I (x) I + c_y I (x) T (x) I + c_z I (x) I (x) T,

with `T = tridiag(-1, 2, -1)` the 1-D Laplacian and `(x)` the Kronecker product.
`js.diags`, `js.eye` and `js.kron` build it as a `DIAMatrix` whose 7 offsets
`(0, +-1, +-N, +-N^2)` follow from the factors' offsets at trace time, so the construction
runs inside `jax.jit` with `c` traced: the operator is checked against scipy's, built the
same way with `scipy.sparse.kron`.

Then `A(c) u = b` is solved by `jax.scipy.sparse.linalg.cg`, and `jax.grad` of
`L = 0.5 * ||u - u_target||^2` flows through the solve and through `js.kron` into `c`; it
is checked against the adjoint formula evaluated with scipy in float64:
`lambda = A^-T (u - u_target)`, `dL/dc_k = -lambda . (A_k u)` for `A_k` the term of `c_k`.

Run it with `python examples/poisson_3d.py`.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse
import scipy.sparse.linalg
from jax.scipy.sparse.linalg import cg

import jaxsparse as js

DTYPE = np.float32


@functools.partial(jax.jit, static_argnums=0)
def diffusion_operator(N: int, conductivities) -> js.DIAMatrix:
    """`A(c)` on an `N^3` grid, a `DIAMatrix` with 7 diagonals (jit-able in `c`)."""
    T = js.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(N, N), dtype=DTYPE)
    I = js.eye(N, dtype=DTYPE)  # noqa: E741 (the identity's usual name)
    terms = (js.kron(js.kron(T, I), I), js.kron(js.kron(I, T), I), js.kron(js.kron(I, I), T))
    c_x, c_y, c_z = conductivities
    return c_x * terms[0] + c_y * terms[1] + c_z * terms[2]


def scipy_terms(N: int) -> list[scipy.sparse.csr_array]:
    """The three terms of `A(c)` (one per axis), built by scipy in float64."""
    T = scipy.sparse.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(N, N))
    I = scipy.sparse.eye_array(N)  # noqa: E741
    kron = scipy.sparse.kron
    return [
        scipy.sparse.csr_array(t)
        for t in (kron(kron(T, I), I), kron(kron(I, T), I), kron(kron(I, I), T))
    ]


def solve(A, b, tol: float):
    """`A^-1 b` by conjugate gradients."""
    return cg(lambda v: A @ v, b, tol=tol, maxiter=10 * b.shape[0])[0]


def relative_error(actual, expected) -> float:
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    return float(np.linalg.norm(actual - expected) / np.linalg.norm(expected))


def main(N: int = 16, conductivities=(1.0, 2.0, 0.5), tol: float = 1e-6, verbose=False):
    """Build `A(c)` under `jit`, solve, differentiate in `c`; check each against scipy.

    **Arguments:**

    - `N`: grid points per side (the matrix is `N^3 x N^3`).
    - `conductivities`: `(c_x, c_y, c_z)`.
    - `tol`: CG's relative tolerance (float32: keep it above ~1e-7).
    - `verbose`: print the results.

    **Returns:** a dict of floats: `operator` (largest entry of `|A - A_scipy|`, relative
    to the largest of `A_scipy`), `solution` (vs spsolve) and `grad_c` (vs the adjoint
    formula), both relative errors in the 2-norm; and `offsets`, the operator's offsets.
    """
    say = print if verbose else (lambda *args: None)
    c = jnp.asarray(conductivities, DTYPE)
    A = diffusion_operator(N, c)
    terms = scipy_terms(N)
    S = sum(float(c_k) * term for c_k, term in zip(conductivities, terms, strict=True))
    operator_error = float(abs(A.to_scipy() - S).max() / abs(S).max())
    say(f"3-D diffusion operator built under jax.jit: {A}")
    say(f"  largest |A - A_scipy| / largest |A_scipy|: {operator_error:.1e}")

    h = 1.0 / (N + 1)
    x = np.linspace(h, 1.0 - h, N)
    X, Y, Z = np.meshgrid(x, x, x, indexing="ij")
    source = np.exp(-40 * ((X - 0.3) ** 2 + (Y - 0.6) ** 2 + (Z - 0.5) ** 2))
    b = jnp.asarray(h**2 * source.ravel(), DTYPE)
    b64 = np.asarray(b, np.float64)
    expected = scipy.sparse.linalg.spsolve(S.tocsc(), b64)
    solution_error = relative_error(jax.jit(solve, static_argnums=2)(A, b, tol), expected)
    say(f"cg solution, relative error vs scipy spsolve: {solution_error:.1e}")

    target = 0.5 * expected[::-1]
    target_jax = jnp.asarray(target, DTYPE)

    def loss(c):
        u = solve(diffusion_operator(N, c), b, tol)
        return 0.5 * jnp.sum((u - target_jax) ** 2)

    grad_c = jax.jit(jax.grad(loss))(c)
    adjoint = scipy.sparse.linalg.spsolve(S.T.tocsc(), expected - target)
    grad_c_adjoint = np.array([-adjoint @ (term @ expected) for term in terms])
    grad_error = relative_error(grad_c, grad_c_adjoint)
    say(f"dL/dc through cg and js.kron: {np.asarray(grad_c)}")
    say(f"  adjoint formula:            {grad_c_adjoint}, relative error {grad_error:.1e}")
    return dict(
        operator=operator_error, solution=solution_error, grad_c=grad_error, offsets=A.offsets
    )


if __name__ == "__main__":
    main(verbose=True)
