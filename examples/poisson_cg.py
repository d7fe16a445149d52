"""Solve a 2-D Poisson problem with conjugate gradients, and differentiate the solve.

`-div(c grad u) = f` on the unit square with `u = 0` on the boundary, for a constant
conductivity `c`, on an `N x N` grid: the 5-point stencil `A` (4 on the diagonal, -1 for
each neighbour) gives `c A u = h^2 f`. `A` is a `DIAMatrix` with offsets `(-N, -1, 0, 1, N)`
and also a `CSRMatrix`; `jax.scipy.sparse.linalg.cg` takes either as `lambda v: A @ v`.
Both solutions are checked against `scipy.sparse.linalg.spsolve`.

Then `jax.grad` goes through the solve: for `L = 0.5 * ||u - u_target||^2`, the gradient
with respect to the right-hand side `b` and to `c` (which scales `A.data`). `cg` is
differentiated implicitly (one more CG solve, with the transposed operator), and both
gradients are checked against the adjoint formula evaluated with scipy in float64:
`lambda = (c A)^-T (u - u_target)`, `dL/db = lambda`, `dL/dc = -lambda . (A u)`, and
`dL/dc` once more against a central finite difference of scipy solves.

Run it with `python examples/poisson_cg.py`.
"""

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse
import scipy.sparse.linalg
from jax.scipy.sparse.linalg import cg

import jaxsparse as js

DTYPE = np.float32


def poisson_2d(N: int) -> scipy.sparse.csr_array:
    """The 5-point Laplacian (positive definite) on an `N x N` grid, row-major order."""
    T = scipy.sparse.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(N, N))
    identity = scipy.sparse.eye_array(N)
    return scipy.sparse.csr_array(scipy.sparse.kron(identity, T) + scipy.sparse.kron(T, identity))


def solve(A, b, tol: float):
    """`A^-1 b` by conjugate gradients, with `A` any jaxsparse matrix (or dense array)."""
    return cg(lambda v: A @ v, b, tol=tol, maxiter=10 * b.shape[0])[0]


def relative_error(actual, expected) -> float:
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    return float(np.linalg.norm(actual - expected) / np.linalg.norm(expected))


def main(N: int = 32, conductivity: float = 1.5, tol: float = 1e-6, verbose: bool = False):
    """Solve with DIA and CSR, differentiate through the DIA solve, check all against scipy.

    **Arguments:**

    - `N`: grid points per side (the matrix is `N^2 x N^2`).
    - `conductivity`: the constant `c` multiplying the stencil.
    - `tol`: CG's relative tolerance (float32: keep it above ~1e-7).
    - `verbose`: print the results.

    **Returns:** a dict of floats, each a relative error in the 2-norm: `dia_solution`,
    `csr_solution` (vs spsolve), `grad_b`, `grad_c` (vs the adjoint formula),
    `grad_c_finite_difference` (vs a central difference).
    """
    say = print if verbose else (lambda *args: None)
    h = 1.0 / (N + 1)
    x = np.linspace(h, 1.0 - h, N)
    X, Y = np.meshgrid(x, x, indexing="ij")
    source = np.exp(-50 * ((X - 0.3) ** 2 + (Y - 0.6) ** 2)) - np.exp(
        -50 * ((X - 0.7) ** 2 + (Y - 0.3) ** 2)
    )
    b = jnp.asarray(h**2 * source.ravel(), DTYPE)

    S = poisson_2d(N)
    A = js.DIAMatrix.from_scipy(S.astype(DTYPE))
    A_csr = js.CSRMatrix.from_scipy(S.astype(DTYPE))
    say(f"2-D Poisson, {N} x {N} grid:\n  {A}\n  {A_csr}")
    say(f"  (DIA also counts the {A.nnz - A_csr.nnz} zero slots where the +-1 diagonals cross")
    say("  from one grid row to the next, as scipy's dia_array does)")

    S_c = conductivity * S
    b64 = np.asarray(b, np.float64)
    expected = scipy.sparse.linalg.spsolve(S_c.tocsc(), b64)
    c = jnp.asarray(conductivity, DTYPE)
    solve_jit = jax.jit(solve, static_argnums=2)
    errors = {
        "dia_solution": relative_error(solve_jit(c * A, b, tol), expected),
        "csr_solution": relative_error(solve_jit(c * A_csr, b, tol), expected),
    }
    say(f"cg(lambda v: A @ v, b), relative error vs scipy spsolve (tol={tol:.0e}):")
    say(f"  DIAMatrix: {errors['dia_solution']:.1e}")
    say(f"  CSRMatrix: {errors['csr_solution']:.1e}")

    # A target the solution should reach: the solution of a different source.
    target = 0.5 * expected[::-1]
    target_jax = jnp.asarray(target, DTYPE)

    def loss(b, c):
        u = solve(c * A, b, tol)  # c * A is A.with_data(c * A.data)
        return 0.5 * jnp.sum((u - target_jax) ** 2)

    grad_b, grad_c = jax.jit(jax.grad(loss, argnums=(0, 1)))(b, c)

    def loss_scipy(c):
        u = scipy.sparse.linalg.spsolve((c * S).tocsc(), b64)
        return 0.5 * np.sum((u - target) ** 2)

    adjoint = scipy.sparse.linalg.spsolve(S_c.T.tocsc(), expected - target)
    grad_c_adjoint = -adjoint @ (S @ expected)
    step = 1e-3 * conductivity
    grad_c_fd = (loss_scipy(conductivity + step) - loss_scipy(conductivity - step)) / (2 * step)
    errors["grad_b"] = relative_error(grad_b, adjoint)
    errors["grad_c"] = relative_error(grad_c, grad_c_adjoint)
    errors["grad_c_finite_difference"] = relative_error(grad_c, grad_c_fd)
    say("jax.grad of L = 0.5 * ||u - u_target||^2 through cg:")
    say(f"  dL/db: relative error vs the adjoint (c A)^-T (u - u_target): {errors['grad_b']:.1e}")
    say(f"  dL/dc = {float(grad_c):.6e}")
    say(f"    adjoint -lambda . (A u): {grad_c_adjoint:.6e}, rel. error {errors['grad_c']:.1e}")
    say(
        f"    central difference:      {grad_c_fd:.6e}, "
        f"rel. error {errors['grad_c_finite_difference']:.1e}"
    )
    return errors


if __name__ == "__main__":
    main(verbose=True)
