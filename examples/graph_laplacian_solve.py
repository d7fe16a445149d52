"""Fit the conductances of a resistor network to measured potentials, differentiating
through a sparse LU of a weighted graph Laplacian (CSR).

A random geometric graph: nodes in the unit square, an edge between nodes closer than a
radius, each with a conductance `w_e > 0`. Injecting currents `s` and grounding every
node weakly (conductance `g` to ground) gives the potentials `x` of
`(L(w) + g I) x = s`, `L(w)` the weighted Laplacian. Its CSR structure is fixed; only its
values depend on `w`, through a scatter of each edge's conductance onto four stored entries.
`js.linalg.spsolve` factors it with SuperLU on the host, and `jax.grad` with respect to `w`
is one adjoint solve from the same factors, landing on the stored entries.

The inverse problem: from potentials measured for a few injection patterns, recover
`log w`. Checks (returned by `main`): the solve against `scipy.sparse.linalg.spsolve`, and
the gradient against central finite differences of the misfit computed with scipy.
Run it with `python examples/graph_laplacian_solve.py`.
"""

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse
import scipy.sparse.linalg

import jaxsparse as js

GROUND = 0.05


def random_geometric_graph(rng, nodes: int, radius: float) -> np.ndarray:
    """Edges `(E, 2)`, `i < j`, between nodes closer than `radius`."""
    points = rng.random((nodes, 2))
    distance = np.linalg.norm(points[:, None] - points[None], axis=-1)
    i, j = np.nonzero(np.triu(distance < radius, k=1))
    return np.stack([i, j], axis=1)


class Laplacian:
    """The CSR structure of `L(w) + g I` for a fixed edge list, and where each edge's
    conductance lands among its stored entries."""

    def __init__(self, edges: np.ndarray, nodes: int):
        i, j = edges.T
        diagonal = np.arange(nodes)
        rows = np.concatenate([i, j, diagonal])
        cols = np.concatenate([j, i, diagonal])
        pattern = scipy.sparse.csr_array((np.ones(rows.size), (rows, cols)), shape=(nodes, nodes))
        pattern.sort_indices()
        self.indices, self.indptr, self.shape = pattern.indices, pattern.indptr, pattern.shape
        position = {
            (row, col): p
            for row in range(nodes)
            for p, col in zip(
                range(pattern.indptr[row], pattern.indptr[row + 1]),
                pattern.indices[pattern.indptr[row] : pattern.indptr[row + 1]],
                strict=True,
            )
        }
        self.off_diagonal = np.array([[position[a, b], position[b, a]] for a, b in edges])
        self.on_diagonal = np.array([[position[a, a], position[b, b]] for a, b in edges])
        self.ground = np.array([position[k, k] for k in diagonal])

    def matrix(self, conductances) -> js.CSRMatrix:
        data = jnp.zeros(self.indices.size, conductances.dtype)
        data = data.at[self.off_diagonal].add(-conductances[:, None])
        data = data.at[self.on_diagonal].add(conductances[:, None])
        data = data.at[self.ground].add(GROUND)
        return js.CSRMatrix(data, self.indices, self.indptr, self.shape)


def misfit(log_w, laplacian, currents, measured):
    x = js.linalg.spsolve(laplacian.matrix(jnp.exp(log_w)), currents)
    return jnp.sum((x - measured) ** 2) / jnp.sum(measured**2)


def _scipy_misfit(log_w, laplacian, currents, measured) -> float:
    matrix = laplacian.matrix(jnp.exp(jnp.asarray(log_w))).to_scipy().tocsc()
    x = scipy.sparse.linalg.spsolve(matrix, currents)
    return float(np.sum((x - measured) ** 2) / np.sum(measured**2))


def main(nodes: int = 120, patterns: int = 6, descent_steps: int = 60, seed: int = 0):
    rng = np.random.default_rng(seed)
    edges = random_geometric_graph(rng, nodes, radius=0.18)
    laplacian = Laplacian(edges, nodes)
    true_log_w = rng.normal(0.0, 0.5, len(edges))
    currents = rng.standard_normal((nodes, patterns))
    truth = laplacian.matrix(jnp.exp(jnp.asarray(true_log_w)))
    measured = js.linalg.spsolve(truth, jnp.asarray(currents))
    expected = scipy.sparse.linalg.spsolve(truth.to_scipy().tocsc(), currents)
    solve_error = float(np.max(np.abs(measured - expected)) / np.max(np.abs(expected)))

    value_and_grad = jax.jit(jax.value_and_grad(misfit), static_argnums=1)
    log_w = jnp.zeros(len(edges))
    initial, gradient = value_and_grad(log_w, laplacian, currents, measured)
    eps = 1e-5
    fd_errors = []
    for _ in range(3):
        direction = rng.standard_normal(len(edges))
        plus = _scipy_misfit(log_w + eps * direction, laplacian, currents, np.asarray(measured))
        minus = _scipy_misfit(log_w - eps * direction, laplacian, currents, np.asarray(measured))
        finite_difference = (plus - minus) / (2 * eps)
        fd_errors.append(
            abs(float(jnp.sum(gradient * direction)) - finite_difference) / abs(finite_difference)
        )

    # Gradient descent with a step that halves whenever the misfit would rise.
    step, loss = 1.0, initial
    for _ in range(descent_steps):
        candidate = log_w - step * gradient / jnp.linalg.norm(gradient)
        candidate_loss, candidate_gradient = value_and_grad(
            candidate, laplacian, currents, measured
        )
        if candidate_loss < loss:
            log_w, loss, gradient = candidate, candidate_loss, candidate_gradient
            step *= 1.2
        else:
            step *= 0.5
    return {
        "solve_error": solve_error,
        "gradient_fd_error": max(fd_errors),
        "initial_loss": float(initial),
        "final_loss": float(loss),
        "edges": len(edges),
    }


if __name__ == "__main__":
    jax.config.update("jax_enable_x64", True)
    result = main()
    print(f"{result['edges']} edges")
    print(f"solve vs scipy, max relative error: {result['solve_error']:.1e}")
    print(
        f"gradient vs scipy finite differences, relative error: {result['gradient_fd_error']:.1e}"
    )
    print(f"misfit {result['initial_loss']:.3e} -> {result['final_loss']:.3e}")
