"""Preconditioned conjugate gradients on a 3-D variable-coefficient diffusion problem.

`-div(k grad u) = b` on a `side^3` grid with `u = 0` on the walls, where the conductivity
`k = exp(g)` comes from a smoothed random field `g` (about three decades of contrast). The
7-point finite-volume matrix (face conductivities by harmonic means) is a symmetric
positive definite `DIAMatrix`. CG runs to a relative residual of 1e-8 with no
preconditioner, with `js.linalg.jacobi` and with `js.linalg.spilu0` (ILU(0), which for this
symmetric matrix is IC(0)), counting iterations; every solution is checked against
`scipy.sparse.linalg.spsolve`.

Run it with `python examples/diffusion_ilu.py [side]`.
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg

import jaxsparse as js

jax.config.update("jax_enable_x64", True)


def diffusion_3d(side: int, rng):
    """`-div(k grad u)` on a `side^3` grid with zero Dirichlet walls, `k = exp(g)` for a
    smoothed Gaussian field `g` of unit deviation, face coefficients by harmonic means; a
    scipy `dia_array`."""
    g = rng.standard_normal((side, side, side))
    for axis in range(3):
        for _ in range(3):
            g = (g + np.roll(g, 1, axis) + np.roll(g, -1, axis)) / 3
    k = np.exp(g / g.std())
    diagonal = np.zeros((side, side, side))
    diagonals, offsets = [], []
    for axis, stride in ((2, 1), (1, side), (0, side * side)):
        following = np.roll(k, -1, axis)
        face = 2 * k * following / (k + following)
        last = [slice(None)] * 3
        last[axis] = side - 1
        face[tuple(last)] = 0
        first = [slice(None)] * 3
        first[axis] = 0
        wall = np.zeros_like(k)
        wall[tuple(first)] = 2 * k[tuple(first)]
        wall[tuple(last)] += 2 * k[tuple(last)]
        diagonal += face + np.roll(face, 1, axis) + wall
        band = -face.reshape(-1)[:-stride]
        diagonals += [band, band]
        offsets += [stride, -stride]
    return sp.diags_array([diagonal.reshape(-1), *diagonals], offsets=[0, *offsets]).todia()


@jax.jit
def pcg(A, b, M, tol):
    """Conjugate gradients until `||r|| <= tol ||b||` (`M`: a preconditioner or `None`).

    **Returns:** `(x, iterations)`.
    """
    apply = (lambda r: r) if M is None else M

    def body(state):
        x, r, p, rz, iterations = state
        q = A @ p
        alpha = rz / jnp.vdot(p, q)
        x, r = x + alpha * p, r - alpha * q
        z = apply(r)
        rz_next = jnp.vdot(r, z)
        return x, r, z + (rz_next / rz) * p, rz_next, iterations + 1

    def unfinished(state):
        _, r, _, _, iterations = state
        return (jnp.linalg.norm(r) > tol * jnp.linalg.norm(b)) & (iterations < 20_000)

    z = apply(b)
    start = (jnp.zeros_like(b), b, z, jnp.vdot(b, z), jnp.zeros((), jnp.int32))
    x, *_, iterations = jax.lax.while_loop(unfinished, body, start)
    return x, iterations


def main(side: int = 24) -> dict:
    rng = np.random.default_rng(0)
    S = diffusion_3d(side, rng)
    A = js.DIAMatrix.from_scipy(S)
    b = jnp.asarray(rng.standard_normal(S.shape[0]))
    reference = scipy.sparse.linalg.spsolve(S.tocsc(), np.asarray(b))
    preconditioners = {
        "none": None,
        "Jacobi": js.linalg.jacobi(A),
        "ILU(0)": js.linalg.spilu0(A),
    }
    iterations, errors = {}, {}
    for name, M in preconditioners.items():
        x, count = pcg(A, b, M, 1e-8)
        iterations[name] = int(count)
        errors[name] = float(np.linalg.norm(np.asarray(x) - reference) / np.linalg.norm(reference))
        print(f"{name:>7}: {iterations[name]:5d} iterations, relative error {errors[name]:.1e}")
    print(f"ILU(0) takes {iterations['none'] / iterations['ILU(0)']:.1f}x fewer iterations")
    return {"iterations": iterations, "errors": errors}


if __name__ == "__main__":
    result = main(int(sys.argv[1]) if len(sys.argv) > 1 else 24)
    assert max(result["errors"].values()) < 1e-5
    assert result["iterations"]["ILU(0)"] * 3 <= result["iterations"]["none"]
    print("All checks passed")
