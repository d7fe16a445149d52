"""A tour of jaxsparse in one page: build, multiply under `jit`, differentiate, check.

A 1-D Laplacian from `scipy.sparse.diags` becomes a `DIAMatrix`; `A @ B` runs inside
`jax.jit`; `jax.grad` of a least-squares loss flows to the diagonals `A.data` and to the
dense operand `B`. Every number is checked against scipy (the product) or against the
closed-form gradient computed with scipy and numpy in float64. The same matrix then
appears as a `CSRMatrix`.

Run it with `python examples/quickstart.py` (or `make demo`).
"""

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse

import jaxsparse as js

DTYPE = np.float32


def dia_entries(dense: np.ndarray, offsets) -> np.ndarray:
    """The entries of `dense` on the diagonals `offsets`, laid out like DIA `data`.

    `out[d, j] = dense[j - offsets[d], j]` (scipy's convention); slots outside the matrix
    stay zero, as their gradients in jaxsparse do.
    """
    n_rows, n_cols = dense.shape
    cols = np.arange(n_cols)
    out = np.zeros((len(offsets), n_cols), dense.dtype)
    for d, offset in enumerate(offsets):
        rows = cols - offset
        inside = (rows >= 0) & (rows < n_rows)
        out[d, inside] = dense[rows[inside], cols[inside]]
    return out


def relative_error(actual, expected) -> float:
    """max |actual - expected| / max |expected|, in float64."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    return float(np.max(np.abs(actual - expected)) / np.max(np.abs(expected)))


def main(n: int = 64, k: int = 3, seed: int = 0, verbose: bool = False) -> dict:
    """Build, multiply and differentiate a DIA Laplacian; check each result against scipy.

    **Arguments:**

    - `n`: the size of the `(n, n)` Laplacian.
    - `k`: the number of columns of the dense operand `B`.
    - `seed`: seed of the random `B` and target `Y`.
    - `verbose`: print the tour.

    **Returns:** a dict of relative errors (`product`, `grad_data`, `grad_B`, `csr_product`,
    `csr_grad_data`), each a float.
    """
    say = print if verbose else (lambda *args: None)
    rng = np.random.default_rng(seed)

    # 1. A scipy matrix becomes a DIAMatrix: data[d, j] == S[j - offsets[d], j].
    S = scipy.sparse.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n), dtype=DTYPE)
    A = js.DIAMatrix.from_scipy(S)
    say(f"1-D Laplacian from scipy.sparse.diags: {A}")
    say(f"   A.data has shape {A.data.shape}: one row per diagonal, one column per column")

    # 2. The product, compiled. A is a pytree: its offsets and shape are static metadata.
    B = rng.standard_normal((n, k)).astype(DTYPE)
    product = jax.jit(lambda A, B: A @ B)(A, B)
    S64 = S.astype(np.float64)
    errors = {"product": relative_error(product, S64 @ B.astype(np.float64))}
    say(f"\n2. A @ B under jax.jit: shape {product.shape}, dtype {product.dtype}")
    say(f"   max relative error vs scipy: {errors['product']:.1e}")

    # 3. Gradients of L = 0.5 * ||A @ B - Y||^2 with respect to A (its leaf A.data) and B.
    Y = rng.standard_normal((n, k)).astype(DTYPE)

    def loss(A, B):
        return 0.5 * jnp.sum((A @ B - Y) ** 2)

    grad_A, grad_B = jax.jit(jax.grad(loss, argnums=(0, 1)))(A, B)
    # Closed form: with R = A B - Y, dL/dA = R B^T (kept on A's diagonals) and dL/dB = A^T R.
    R = S64 @ B.astype(np.float64) - Y
    errors["grad_data"] = relative_error(grad_A.data, dia_entries(R @ B.T, A.offsets))
    errors["grad_B"] = relative_error(grad_B, S64.T @ R)
    say("\n3. jax.grad of 0.5 * ||A @ B - Y||^2:")
    say(f"   dL/dA.data: shape {grad_A.data.shape}, max relative error vs the diagonals")
    say(f"   of R B^T (R = A B - Y): {errors['grad_data']:.1e}")
    say(f"   dL/dB: shape {grad_B.shape}, max relative error vs A^T R: {errors['grad_B']:.1e}")

    # 4. The same matrix in CSR, the format for general patterns (graphs, meshes).
    C = js.CSRMatrix.from_scipy(S.tocsr())
    x = rng.standard_normal(n).astype(DTYPE)
    errors["csr_product"] = relative_error(jax.jit(lambda C, x: C @ x)(C, x), S64 @ x)
    # C's integer leaves (indices, indptr) take no gradient, so differentiate its values
    # through `with_data` (or use `equinox.filter_grad(loss)(C)`).
    # dL/dC.data[p] = r[row(p)] * x[indices[p]]: the dense gradient sampled on C's pattern.
    grad_C_data = jax.grad(lambda data: 0.5 * jnp.sum((C.with_data(data) @ x - Y[:, 0]) ** 2))(
        C.data
    )
    r = S64 @ x - Y[:, 0]
    rows = np.repeat(np.arange(n), np.diff(np.asarray(C.indptr)))
    errors["csr_grad_data"] = relative_error(grad_C_data, r[rows] * x[np.asarray(C.indices)])
    say(f"\n4. The same matrix as CSR: {C}")
    say(f"   C @ x: max relative error vs scipy: {errors['csr_product']:.1e}")
    say(f"   dL/dC.data: max relative error vs the sampled gradient: {errors['csr_grad_data']:.1e}")
    return errors


if __name__ == "__main__":
    tolerance = 1e-5
    errors = main(verbose=True)
    worst = max(errors, key=errors.get)
    status = "passed" if errors[worst] < tolerance else "FAILED"
    print(f"\nAll checks {status}: largest relative error {errors[worst]:.1e} ({worst}),")
    print(f"tolerance {tolerance:.0e} (float32).")
