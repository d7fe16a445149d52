"""Matrices with more diagonals than `MAX_UNROLLED_DIAGONALS`: products and gradients loop
over the diagonals, so the traced and lowered programs do not grow with their number.
(Their values are checked against scipy with the rest of the registry: its
`dia-many-diagonals` matrix takes the loops everywhere.)"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close, random_dia, random_values
from lowering import DIA_KERNEL_CALLS, NEEDS_CROSS_LOWERING, lower

import jaxsparse as js
from jaxsparse._dia_layout import MAX_UNROLLED_DIAGONALS
from jaxsparse.kernels.mosaic_tpu_dia import (
    dia_matmul_mosaic_tpu,
    dia_matmul_t_mosaic_tpu,
    dia_sddmm_mosaic_tpu,
)
from jaxsparse.kernels.triton_dia import dia_matmul_t_triton, dia_matmul_triton, dia_sddmm_triton

N = 600


def band(count: int) -> tuple[int, ...]:
    """`count` offsets of a band around the main diagonal, all inside an `N x N` matrix."""
    return tuple(range(-(count // 2), count - count // 2))


def product_and_gradient(offsets, backend):
    """A loss of `A @ x` and its gradient in `A`'s values and `x`, for `jax.jit`."""

    def loss(data, x):
        matrix = js.DIAMatrix(data, offsets, (N, N))
        return jnp.sum(jnp.sin(js.matmul(matrix, x, backend=backend)))

    def both(data, x):
        return loss(data, x), jax.grad(loss, argnums=(0, 1))(data, x)

    avals = (
        jax.ShapeDtypeStruct((len(offsets), N), jnp.float32),
        jax.ShapeDtypeStruct((N, 3), jnp.float32),
    )
    return both, avals


def operation_count(text: str) -> int:
    """Operations in a StableHLO module's text (one per line that runs one)."""
    return sum(" = stablehlo." in line or "stablehlo.return" in line for line in text.splitlines())


# "auto" asserts what runs on a CPU (the native kernels): a test of CPU behaviour.
@pytest.mark.parametrize("backend", ["xla", pytest.param("auto", marks=pytest.mark.on_cpu)])
def test_lowered_program_does_not_grow_with_the_diagonals(backend):
    """Above the threshold, 5x the diagonals lower to as many operations; below it, the
    unrolled XLA program grows (so the count would see growth). On a CPU "auto" runs the
    native kernels, which take the offsets as an attribute: no growth at any count."""
    counts = {}
    for count in (MAX_UNROLLED_DIAGONALS // 2, MAX_UNROLLED_DIAGONALS, 80, 400):
        function, avals = product_and_gradient(band(count), backend)
        counts[count] = operation_count(lower(function, avals, "cpu"))
    assert counts[80] == counts[400]
    if backend == "xla":
        assert counts[MAX_UNROLLED_DIAGONALS] > counts[MAX_UNROLLED_DIAGONALS // 2]
    else:
        assert len(set(counts.values())) == 1


def test_products_switch_to_the_loop_above_the_threshold():
    """On the XLA path, one diagonal more than the threshold loops (a `while` in the
    lowered module) and gives the unrolled products' numbers."""
    rng = np.random.default_rng(0)
    unrolled, _ = random_dia(rng, (70, 60), band(MAX_UNROLLED_DIAGONALS), jnp.float64)
    looped = js.DIAMatrix(
        jnp.concatenate([unrolled.data, jnp.zeros((1, 60))]),
        (*unrolled.offsets, 50),
        unrolled.shape,
    )
    x = jnp.asarray(random_values(rng, (60, 2), jnp.float64))
    g = jnp.asarray(random_values(rng, (70, 2), jnp.float64))
    for matrix, loops in ((unrolled, False), (looped, True)):
        offsets = matrix.offsets
        text = lower(
            lambda d, x, o=offsets: js.matmul(js.DIAMatrix(d, o, (70, 60)), x, backend="xla"),
            (matrix.data, x),
            "cpu",
        )
        assert ("stablehlo.while" in text) is loops

    def results(matrix):
        out, vjp = jax.vjp(
            lambda d, x: js.matmul(js.DIAMatrix(d, matrix.offsets, (70, 60)), x, backend="xla"),
            matrix.data,
            x,
        )
        data_gradient, x_gradient = vjp(g)
        return out, data_gradient[: unrolled.data.shape[0]], x_gradient

    for got, want in zip(results(looped), results(unrolled), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-12)


def _kernel_size(fn, offsets, platform):
    """Equations in the kernel body of `fn`'s `pallas_call` for `offsets`."""
    first = (N, 3) if fn in (dia_sddmm_mosaic_tpu, dia_sddmm_triton) else (len(offsets), N)
    avals = (jax.ShapeDtypeStruct(first, jnp.float32), jax.ShapeDtypeStruct((N, 3), jnp.float32))
    options = dict(offsets=offsets, shape=(N, N), platform=platform, interpret=True)
    jaxpr = jax.make_jaxpr(functools.partial(fn, **options))(*avals)
    (call,) = [e for e in jaxpr.eqns if e.primitive.name == "pallas_call"]
    return len(call.params["jaxpr"].eqns)


WINDOW_KERNELS = [dia_matmul_mosaic_tpu, dia_matmul_t_mosaic_tpu, dia_sddmm_mosaic_tpu]
TRITON_KERNELS = [dia_matmul_triton, dia_matmul_t_triton, dia_sddmm_triton]


@pytest.mark.parametrize(
    ("fn", "platform"),
    [(fn, "tpu") for fn in WINDOW_KERNELS] + [(fn, "cpu") for fn in TRITON_KERNELS],
    ids=lambda p: getattr(p, "__name__", p),
)
def test_kernel_bodies_do_not_grow_with_the_diagonals(fn, platform):
    assert _kernel_size(fn, band(80), platform) == _kernel_size(fn, band(400), platform)


@NEEDS_CROSS_LOWERING
@pytest.mark.parametrize("platform", ["cuda", "tpu"])
def test_1000_diagonals_lower_for_accelerators(platform):
    """The product and both gradients of a 1000-diagonal matrix, lowered with the kernels."""
    function, avals = product_and_gradient(band(1000), "pallas")
    text = lower(function, avals, platform)
    assert DIA_KERNEL_CALLS[platform] in text
    # Mosaic GPU (cuda) loops inside its kernels, named as the unrolled ones.
    if platform == "tpu":
        kernels = ("dia_matmul_loop", "dia_sddmm_loop")
    else:
        kernels = ("dia_matmul_mosaic_gpu", "dia_sddmm_mosaic_gpu")
    for kernel in kernels:
        assert kernel in text


def test_interpreted_kernels_at_1000_diagonals():
    rng = np.random.default_rng(1)
    matrix, twin = random_dia(rng, (N, N), band(1000), jnp.float32)
    x = jnp.asarray(random_values(rng, (N, 2), jnp.float32))
    out = js.matmul(matrix, x, backend="interpret")
    assert_close(out, twin @ np.asarray(x, np.float64), jnp.float32)
