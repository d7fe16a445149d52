"""Learn a reaction coefficient through a lineax solve of a sparse operator.

The steady reaction-diffusion equation `-u'' + k(x) u = f` on `(0, 1)`, `u = 0` at both
ends, on `n` interior points: `A(k) = L / h^2 + diag(k)`, with `L` the 1-D Laplacian
stencil `(-1, 2, -1)`. `A` is assembled with sparse arithmetic on `DIAMatrix` values
(`L * (1 / h^2) + diag(k)`, offsets `(-1, 0, 1)` known statically), so it is built inside
`jax.jit` and `jax.grad`. For `k >= 0` it is symmetric positive definite, so
`js.lineax_operator(A, symmetric=True, positive_semidefinite=True)` solves with
`lineax.CG`.

The solution is checked against `scipy.sparse.linalg.spsolve`, and the gradient of
`L(k) = 0.5 * ||u(k) - u_target||^2` in `k` (lineax differentiates the solve implicitly)
against the adjoint formula evaluated with scipy: `lambda = A^-1 (u - u_target)`,
`dL/dk = -lambda * u`. A few steps of gradient descent then move `k` towards the
coefficient that made `u_target`.

Needs lineax (`pip install jaxsparse[lineax]`). Run it with
`python examples/lineax_reaction_diffusion.py`.
"""

import jax
import jax.numpy as jnp
import lineax
import numpy as np
import scipy.sparse
import scipy.sparse.linalg

import jaxsparse as js

jax.config.update("jax_enable_x64", True)


def operator(k: jax.Array) -> js.DIAMatrix:
    """`A(k) = L / h^2 + diag(k)`, as a DIA matrix built by sparse arithmetic."""
    n = k.shape[0]
    h = 1.0 / (n + 1)
    stencil = jnp.asarray([-1.0, 2.0, -1.0])[:, None] * jnp.ones((3, n))
    laplacian = js.DIAMatrix(stencil, (-1, 0, 1), (n, n))
    return laplacian * (1.0 / h**2) + js.DIAMatrix(k, (0,), (n, n))


@jax.jit
def solve(k: jax.Array, f: jax.Array) -> jax.Array:
    """`u = A(k)^-1 f` by lineax's conjugate gradients."""
    op = js.lineax_operator(operator(k), symmetric=True, positive_semidefinite=True)
    return lineax.linear_solve(op, f, lineax.CG(rtol=1e-10, atol=1e-10)).value


def loss(k, f, u_target):
    return 0.5 * jnp.sum((solve(k, f) - u_target) ** 2)


def main(n: int = 64, steps: int = 20) -> dict:
    x = np.linspace(0.0, 1.0, n + 2)[1:-1]
    f = jnp.asarray(np.sin(np.pi * x) + 1.0)
    k_true = jnp.asarray(50.0 * np.exp(-20.0 * (x - 0.5) ** 2))
    u_target = solve(k_true, f)
    k = jnp.full((n,), 10.0)

    u = solve(k, f)
    reference_operator = scipy.sparse.csc_array(operator(k).to_scipy())
    u_scipy = scipy.sparse.linalg.spsolve(reference_operator, np.asarray(f))
    solve_error = float(np.max(np.abs(u - u_scipy)) / np.max(np.abs(u_scipy)))

    grad = jax.grad(loss)(k, f, u_target)
    adjoint = scipy.sparse.linalg.spsolve(reference_operator, np.asarray(u - u_target))
    grad_reference = -adjoint * np.asarray(u)
    grad_error = float(np.max(np.abs(grad - grad_reference)) / np.max(np.abs(grad_reference)))

    initial_loss = float(loss(k, f, u_target))
    step = jax.jit(lambda k: k - 2e5 * jax.grad(loss)(k, f, u_target))
    for _ in range(steps):
        k = step(k)
    final_loss = float(loss(k, f, u_target))

    print(f"lineax CG solve vs scipy spsolve: relative error {solve_error:.2e}")
    print(f"dL/dk vs the adjoint formula: relative error {grad_error:.2e}")
    print(f"loss {initial_loss:.3e} -> {final_loss:.3e} after {steps} gradient steps")
    return {
        "solve_error": solve_error,
        "grad_error": grad_error,
        "initial_loss": initial_loss,
        "final_loss": final_loss,
    }


if __name__ == "__main__":
    main()
