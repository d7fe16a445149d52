"""Recover a 2-D diffusion coefficient from a steady state, differentiating through a
sparse direct solve.

The forward model is `-div(kappa grad u) = f` on the unit square with `u = 0` outside,
finite volumes on an `nx x ny` grid of cells: a 5-point `DIAMatrix` `A(kappa)` (offsets
`-ny, -1, 0, 1, ny`) whose diagonals are built from `kappa` at the cell faces, and
`u = js.linalg.spsolve(A, f)`, a banded LU on the CPU's native kernels.

The inverse problem: from noisy observations of `u` for a few sources `f`, find
`log kappa`. `jax.grad` of the misfit is one adjoint solve per source from the same
factors, with the gradient landing on the five stored diagonals and flowing on to
`log kappa`; plain Adam updates it.

Checks (returned by `main`): the forward solve against `scipy.sparse.linalg.spsolve`, and
the gradient against central finite differences of the misfit computed with scipy.
Run it with `python examples/diffusion_inverse_spsolve.py`.
"""

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse.linalg

import jaxsparse as js


def diffusion_matrix(kappa) -> js.DIAMatrix:
    """`A(kappa)` for cell coefficients `kappa` of shape `(nx, ny)`, grid step `1 / nx`.

    A face between two cells takes their mean coefficient; a face on the boundary, the
    cell's own. `data[d, col] == A[col - offsets[d], col]`: the diagonal at offset `+1`
    holds, in column `(i, j)`, the coupling to the cell `(i, j - 1)` before it.
    """
    nx, ny = kappa.shape
    inverse_h2 = jnp.asarray(nx * nx, kappa.dtype)
    along_rows = 0.5 * (kappa[:, :-1] + kappa[:, 1:])  # faces between (i, j) and (i, j + 1)
    across_rows = 0.5 * (kappa[:-1, :] + kappa[1:, :])  # faces between (i, j) and (i + 1, j)
    main = (
        jnp.pad(along_rows, ((0, 0), (1, 0)))
        + jnp.pad(along_rows, ((0, 0), (0, 1)))
        + jnp.pad(across_rows, ((1, 0), (0, 0)))
        + jnp.pad(across_rows, ((0, 1), (0, 0)))
    )
    main = main + _boundary_faces(kappa)
    data = inverse_h2 * jnp.stack(
        [
            -jnp.pad(across_rows, ((0, 1), (0, 0))),  # offset -ny: A[(i + 1, j), (i, j)]
            -jnp.pad(along_rows, ((0, 0), (0, 1))),  # offset -1: A[(i, j + 1), (i, j)]
            main,
            -jnp.pad(along_rows, ((0, 0), (1, 0))),  # offset +1: A[(i, j - 1), (i, j)]
            -jnp.pad(across_rows, ((1, 0), (0, 0))),  # offset +ny: A[(i - 1, j), (i, j)]
        ]
    ).reshape(5, nx * ny)
    return js.DIAMatrix(data, offsets=(-ny, -1, 0, 1, ny), shape=(nx * ny, nx * ny))


def _boundary_faces(kappa):
    """Each cell's coefficient once per side it has on the boundary."""
    nx, ny = kappa.shape
    sides = np.zeros((nx, ny))
    sides[0, :] += 1
    sides[-1, :] += 1
    sides[:, 0] += 1
    sides[:, -1] += 1
    return kappa * jnp.asarray(sides, kappa.dtype)


def sources(nx: int, ny: int, count: int) -> np.ndarray:
    """`count` smooth right-hand sides, `(nx * ny, count)`."""
    x, y = np.meshgrid((np.arange(nx) + 0.5) / nx, (np.arange(ny) + 0.5) / ny, indexing="ij")
    centers = np.linspace(0.25, 0.75, count)
    return np.stack(
        [np.exp(-((x - c) ** 2 + (y - 1 + c) ** 2) / 0.02).ravel() for c in centers], axis=1
    )


def true_log_kappa(nx: int, ny: int) -> np.ndarray:
    x, y = np.meshgrid((np.arange(nx) + 0.5) / nx, (np.arange(ny) + 0.5) / ny, indexing="ij")
    return np.log(1.0 + 0.8 * np.exp(-((x - 0.6) ** 2 + (y - 0.4) ** 2) / 0.03))


def misfit(log_kappa, f, observed):
    u = js.linalg.spsolve(diffusion_matrix(jnp.exp(log_kappa)), f)
    return jnp.sum((u - observed) ** 2) / jnp.sum(observed**2)


def _scipy_misfit(log_kappa, f, observed) -> float:
    matrix = diffusion_matrix(jnp.exp(jnp.asarray(log_kappa))).to_scipy().tocsc()
    u = scipy.sparse.linalg.spsolve(matrix, f)
    return float(np.sum((u - observed) ** 2) / np.sum(observed**2))


def main(nx: int = 16, ny: int = 16, n_sources: int = 3, adam_steps: int = 100, seed: int = 0):
    rng = np.random.default_rng(seed)
    f = sources(nx, ny, n_sources)
    truth = diffusion_matrix(jnp.exp(jnp.asarray(true_log_kappa(nx, ny))))
    clean = js.linalg.spsolve(truth, jnp.asarray(f))
    expected = scipy.sparse.linalg.spsolve(truth.to_scipy().tocsc(), f)
    solve_error = float(np.max(np.abs(clean - expected)) / np.max(np.abs(expected)))
    observed = clean + 0.002 * float(jnp.max(jnp.abs(clean))) * rng.standard_normal(clean.shape)

    value_and_grad = jax.jit(jax.value_and_grad(misfit))
    log_kappa = jnp.zeros((nx, ny))
    initial, gradient = value_and_grad(log_kappa, f, observed)

    # The gradient along random directions against central differences by scipy.
    eps = 1e-5
    fd_errors = []
    for _ in range(3):
        direction = rng.standard_normal((nx, ny))
        plus = _scipy_misfit(log_kappa + eps * direction, f, np.asarray(observed))
        minus = _scipy_misfit(log_kappa - eps * direction, f, np.asarray(observed))
        finite_difference = (plus - minus) / (2 * eps)
        directional = float(jnp.sum(gradient * direction))
        fd_errors.append(abs(directional - finite_difference) / abs(finite_difference))

    # Adam on log kappa.
    learning_rate, beta1, beta2 = 0.05, 0.9, 0.999
    first = jnp.zeros_like(log_kappa)
    second = jnp.zeros_like(log_kappa)
    loss = initial
    for step in range(1, adam_steps + 1):
        loss, gradient = value_and_grad(log_kappa, f, observed)
        first = beta1 * first + (1 - beta1) * gradient
        second = beta2 * second + (1 - beta2) * gradient**2
        update = (first / (1 - beta1**step)) / (jnp.sqrt(second / (1 - beta2**step)) + 1e-8)
        log_kappa = log_kappa - learning_rate * update
    final = float(misfit(log_kappa, f, observed))
    return {
        "solve_error": solve_error,
        "gradient_fd_error": max(fd_errors),
        "initial_loss": float(initial),
        "final_loss": final,
        "kappa_error": float(
            np.linalg.norm(np.exp(log_kappa) - np.exp(true_log_kappa(nx, ny)))
            / np.linalg.norm(np.exp(true_log_kappa(nx, ny)))
        ),
    }


if __name__ == "__main__":
    jax.config.update("jax_enable_x64", True)
    result = main()
    print(f"forward solve vs scipy, max relative error: {result['solve_error']:.1e}")
    print(
        f"gradient vs scipy finite differences, relative error: {result['gradient_fd_error']:.1e}"
    )
    print(f"misfit {result['initial_loss']:.3e} -> {result['final_loss']:.3e}")
    print(f"relative error of the recovered kappa: {result['kappa_error']:.3f}")
