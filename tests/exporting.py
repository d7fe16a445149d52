"""What the export tests export, and what scipy says it computes.

`product_and_gradients(side)` is the program: one of the four products (`A @ x`, `A @ X`,
`x @ A`, `X @ A`) with its gradients in `A`'s values and in the dense operand for a given
cotangent. `scipy_answer` computes the same three arrays from the scipy twin. Cases travel
to other processes as `save_case`/`load_case` files: the flattened leaves of
`(matrix, dense, cotangent)` and the matrix's static metadata.
"""

import json
import pathlib

import jax
import numpy as np
from helpers import as_float64, random_values

import jaxsparse as js

SIDES = ("A@x", "A@X", "x@A", "X@A")


def operand_shapes(side: str, shape, k: int = 3):
    """`(dense operand shape, cotangent shape)` of `side` for a matrix of `shape`."""
    m, n = shape
    return {
        "A@x": ((n,), (m,)),
        "A@X": ((n, k), (m, k)),
        "x@A": ((m,), (n,)),
        "X@A": ((k, m), (k, n)),
    }[side]


def random_operands(rng, side: str, shape, dtype, k: int = 3):
    """A random dense operand and cotangent for `side`, as numpy arrays of `dtype`."""
    dense_shape, cotangent_shape = operand_shapes(side, shape, k)
    return random_values(rng, dense_shape, dtype), random_values(rng, cotangent_shape, dtype)


def product(side: str, matrix, dense):
    return matrix @ dense if side.startswith("A") else dense @ matrix


def product_and_gradients(side: str):
    """`(matrix, dense, cotangent) -> (product, d values, d dense)` for `side`."""

    def run(matrix, dense, cotangent):
        def of_values(data, dense):
            return product(side, matrix.with_data(data), dense)

        out, vjp = jax.vjp(of_values, matrix.data, dense)
        return (out, *vjp(cotangent))

    return run


def scipy_answer(side: str, twin, dense, cotangent):
    """`product_and_gradients(side)` in float64 from the scipy twin of the matrix."""
    matrix = twin.toarray()
    dense, cotangent = as_float64(dense), as_float64(cotangent)
    if side.startswith("A"):  # vectors are columns
        columns = dense.reshape(len(dense), -1)
        d_matrix = cotangent.reshape(len(cotangent), -1) @ columns.T
        out, d_dense = matrix @ dense, matrix.T @ cotangent
    else:  # vectors are rows
        rows = dense.reshape(-1, dense.shape[-1])
        d_matrix = rows.T @ cotangent.reshape(-1, cotangent.shape[-1])
        out, d_dense = dense @ matrix, cotangent @ matrix.T
    return out, sampled_on_structure(twin, d_matrix), d_dense


def sampled_on_structure(twin, dense_gradient) -> np.ndarray:
    """The gradient in the stored values, from the gradient in the dense matrix: each slot
    gets the entry it stands for (DIA slots outside the matrix get 0)."""
    m, n = twin.shape
    if twin.format == "dia":
        cols = np.arange(twin.data.shape[1])
        rows = cols[None, :] - twin.offsets[:, None]
        inside = (rows >= 0) & (rows < m) & (cols[None, :] < n)
        return np.where(inside, dense_gradient[rows.clip(0, m - 1), cols.clip(0, n - 1)], 0.0)
    rows = np.repeat(np.arange(m), np.diff(twin.indptr))
    return dense_gradient[rows, twin.indices]


def save_case(directory: pathlib.Path, name: str, side: str, matrix, dense, cotangent) -> None:
    """`NAME.npz`: the leaves of `(matrix, dense, cotangent)` as `arr_0, arr_1, ...`;
    `NAME.json`: the side and the matrix's format and static metadata."""
    leaves = jax.tree.leaves((matrix, dense, cotangent))
    np.savez(directory / f"{name}.npz", *[np.asarray(leaf) for leaf in leaves])
    metadata = {"side": side, "format": matrix.format, "shape": matrix.shape}
    if matrix.format == "dia":
        metadata["offsets"] = matrix.offsets
    (directory / f"{name}.json").write_text(json.dumps(metadata))


def load_case(directory: pathlib.Path, name: str):
    """`(side, matrix, dense, cotangent)` from `save_case`'s files."""
    metadata = json.loads((directory / f"{name}.json").read_text())
    leaves = load_leaves(directory / f"{name}.npz")
    shape = tuple(metadata["shape"])
    if metadata["format"] == "dia":
        matrix = js.DIAMatrix(leaves[0], tuple(metadata["offsets"]), shape)
    else:
        matrix = js.CSRMatrix(*leaves[:3], shape)
    return metadata["side"], matrix, *leaves[-2:]


def load_leaves(path: pathlib.Path) -> list[np.ndarray]:
    with np.load(path) as arrays:
        return [arrays[f"arr_{i}"] for i in range(len(arrays.files))]
