"""The systems compared: jaxsparse and its peers, each as forward and gradient callables.

Every system computes `Y = A @ X` (float32) and, where it has autodiff, the gradient step:
one jitted `jax.vjp` of `(values, X) -> A @ X` pulled back along a cotangent `W`, which
returns `Y` and the gradients with respect to the stored values and `X` (forward and
backward, with no scalar loss whose reduction would be timed too). scipy has no autodiff,
so it has no gradient step. The jax systems are jitted with the matrix values and
operands as arguments, so the first call compiles and later calls do not.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import sparse as jsparse

import jaxsparse as js

DENSE_LIMIT_BYTES = 1_000_000_000
# Products per jitted loop: XLA reuses the loop's buffers, so no call pays for faulting in
# a fresh output, as a single call does.
LOOP_PRODUCTS = 20


def next_operand(x, first, entry):
    """The operand of the next product in a loop: `x` with `x[0, 0]` set to `first` (its
    value before the loop) plus `entry * 0`, an entry of this product. The dependence keeps
    XLA from hoisting the product out of the loop; setting the entry to a value that does
    not read `x` lets XLA write that one element in place (`x.at[0, 0].add(...)` made it
    copy all of `x`, 32 MB per product at 10^6 rows and k = 8)."""
    return x.at[0, 0].set(first + entry * 0)


class System:
    """One way of computing the product: `forward()` and `gradient()` return callables
    that run to completion and return `Y`, and `(Y, dX)` for the gradient step; `loop()`
    one that runs `LOOP_PRODUCTS` products in a jitted `lax.fori_loop` and returns the
    last `Y`, and `gradient_loop()` one that runs as many gradient steps so and returns
    the last `(Y, dX)` (None for systems outside JAX)."""

    def __init__(self, name, forward, gradient=None, loop=None, gradient_loop=None):
        self.name = name
        self._forward = forward
        self._gradient = gradient
        self._loop = loop
        self._gradient_loop = gradient_loop

    def forward(self):
        return self._forward

    def gradient(self):
        return self._gradient

    def loop(self):
        return self._loop

    def gradient_loop(self):
        return self._gradient_loop


def _jax_system(name, build_matrix, values, structure, x, w):
    """A jax system from `build_matrix(values, *structure) -> matrix supporting @`."""

    @jax.jit
    def forward(values, structure, x):
        return build_matrix(values, *structure) @ x

    def step(values, x, structure, w):
        def product(values, x):
            return build_matrix(values, *structure) @ x

        y, pullback = jax.vjp(product, values, x)
        return y, pullback(w)

    forward_and_backward = jax.jit(step)

    @jax.jit
    def steps_in_loop(values, structure, x, w):
        first, first_w = x[0, 0], w[0, 0]

        def body(_, carry):
            # Both X and W change from step to step, so that no part of the step (such as
            # A^T @ W) is the same in every step and could be hoisted out of the loop.
            x, w, _ = carry
            y, (d_values, dx) = step(values, x, structure, w)
            entry = y[0, 0] + jnp.ravel(d_values)[0] + dx[0, 0]
            return next_operand(x, first, entry), next_operand(w, first_w, entry), (y, dx)

        m, n = build_matrix(values, *structure).shape
        out = (jnp.zeros((m, x.shape[1]), x.dtype), jnp.zeros((n, x.shape[1]), x.dtype))
        return lax.fori_loop(0, LOOP_PRODUCTS, body, (x, w, out))[2]

    @jax.jit
    def products_in_loop(values, structure, x):
        first = x[0, 0]

        def body(_, carry):
            x, _ = carry
            y = build_matrix(values, *structure) @ x
            return next_operand(x, first, y[0, 0]), y

        y = jnp.zeros((build_matrix(values, *structure).shape[0], x.shape[1]), x.dtype)
        return lax.fori_loop(0, LOOP_PRODUCTS, body, (x, y))[1]

    def run_forward():
        return jax.block_until_ready(forward(values, structure, x))

    def run_loop():
        return jax.block_until_ready(products_in_loop(values, structure, x))

    def run_gradient():
        y, (_, dx) = jax.block_until_ready(forward_and_backward(values, x, structure, w))
        return y, dx

    def run_gradient_loop():
        return jax.block_until_ready(steps_in_loop(values, structure, x, w))

    return System(name, run_forward, run_gradient, run_loop, run_gradient_loop)


def systems_for(dia, csr, x: np.ndarray, w: np.ndarray, fmt: str) -> list[System]:
    """The systems for one matrix: `dia` (scipy DIA or None), `csr` (scipy CSR)."""
    m, n = csr.shape
    xj, wj = jax.device_put(x), jax.device_put(w)
    out = []
    if fmt == "dia":
        a = js.DIAMatrix.from_scipy(dia)
        offsets, shape = a.offsets, a.shape
        out.append(
            _jax_system(
                "jaxsparse",
                lambda data: js.DIAMatrix(data, offsets, shape),
                a.data,
                (),
                xj,
                wj,
            )
        )
    else:
        a = js.CSRMatrix.from_scipy(csr)
        shape = a.shape
        out.append(
            _jax_system(
                "jaxsparse",
                lambda data, indices, indptr: js.CSRMatrix(data, indices, indptr, shape),
                a.data,
                (a.indices, a.indptr),
                xj,
                wj,
            )
        )
    if dia is not None:
        out.append(System("scipy-dia", lambda: dia @ x))
    out.append(System("scipy-csr", lambda: csr @ x))
    bcsr = jsparse.BCSR.from_scipy_sparse(csr)
    out.append(
        _jax_system(
            "jax-bcsr",
            lambda data, indices, indptr: jsparse.BCSR((data, indices, indptr), shape=(m, n)),
            bcsr.data,
            (bcsr.indices, bcsr.indptr),
            xj,
            wj,
        )
    )
    bcoo = jsparse.BCOO.from_scipy_sparse(csr)
    out.append(
        _jax_system(
            "jax-bcoo",
            lambda data, indices: jsparse.BCOO((data, indices), shape=(m, n)),
            bcoo.data,
            (bcoo.indices,),
            xj,
            wj,
        )
    )
    if m * n * x.itemsize < DENSE_LIMIT_BYTES:
        dense = jax.device_put(csr.toarray())
        out.append(_jax_system("dense-jnp", lambda values: values, dense, (), xj, wj))
    return out
