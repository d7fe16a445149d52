"""Backend choice end to end: what "auto", "pallas", "interpret" and "xla" run, and that
`jaxsparse.matmul(..., backend="pallas")` and its gradient lower for GPU and TPU here."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import random_csr, random_dia

import jaxsparse as js
from jaxsparse.kernels import csr as csr_kernels
from jaxsparse.kernels import dia as dia_kernels

NEEDS_CROSS_LOWERING = pytest.mark.skipif(
    jax.__version_info__ < (0, 12),
    reason="lowering for a platform this machine lacks (AbstractDevice) needs JAX >= 0.12",
)
TRITON_CALL = "__gpu$xla.gpu.triton"
TPU_CALL = "tpu_custom_call"


def small_matrix(fmt, dtype=jnp.float32):
    rng = np.random.default_rng(0)
    if fmt == "dia":
        return random_dia(rng, (12, 10), (-1, 0, 2), dtype)[0]
    return random_csr(rng, (12, 10), density=0.3, dtype=dtype)[0]


@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_pallas_backend_on_cpu_fails_loudly(fmt):
    matrix = small_matrix(fmt)
    with pytest.raises(Exception, match="(?i)interpret mode|cpu"):
        js.matmul(matrix, jnp.ones((10, 2), jnp.float32), backend="pallas").block_until_ready()


@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_interpret_backend_runs_the_pallas_kernels(fmt, monkeypatch):
    """The interpret backend calls the format's kernel module; "xla" and "auto" on CPU never do."""
    module = dia_kernels if fmt == "dia" else csr_kernels
    name = "dia_matmul" if fmt == "dia" else "csr_matmul"
    calls = []
    original = getattr(module, name)

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    matrix = small_matrix(fmt)
    x = jnp.asarray(np.random.default_rng(1).standard_normal((10, 2)), jnp.float32)
    expected = matrix.todense() @ x
    for backend in ("xla", "auto", None):
        np.testing.assert_allclose(js.matmul(matrix, x, backend=backend), expected, rtol=1e-5)
    assert calls == []
    np.testing.assert_allclose(js.matmul(matrix, x, backend="interpret"), expected, rtol=1e-5)
    assert len(calls) == 1 and calls[0]["interpret"] is True


def test_environment_variable_overrides_auto(monkeypatch):
    calls = []
    original = dia_kernels.dia_matmul
    monkeypatch.setattr(
        dia_kernels, "dia_matmul", lambda *a, **k: calls.append(k) or original(*a, **k)
    )
    matrix = small_matrix("dia")
    monkeypatch.setenv("JAXSPARSE_BACKEND", "interpret")
    out = matrix @ jnp.ones((10,), jnp.float32)
    assert len(calls) == 1
    np.testing.assert_allclose(out, matrix.todense() @ jnp.ones(10, jnp.float32), rtol=1e-5)
    assert js.matmul(matrix, jnp.ones(10, jnp.float32), backend="xla").shape == (12,)
    assert len(calls) == 1


@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_complex_values_take_the_xla_path_under_interpret(fmt):
    module = dia_kernels if fmt == "dia" else csr_kernels
    assert not module.pallas_supports(jnp.complex64, "cpu")
    matrix = small_matrix(fmt, jnp.complex64)
    x = jnp.ones((10,), jnp.complex64) * (1 + 2j)
    np.testing.assert_allclose(
        js.matmul(matrix, x, backend="interpret"), matrix.todense() @ x, rtol=1e-5
    )
    product = lambda d: js.matmul(matrix.with_data(d), x, backend="interpret")  # noqa: E731
    gradient = jax.grad(lambda d: jnp.sum(jnp.abs(product(d)) ** 2))
    np.testing.assert_allclose(
        gradient(matrix.data),
        jax.grad(lambda d: jnp.sum(jnp.abs(matrix.with_data(d).todense() @ x) ** 2))(matrix.data),
        rtol=1e-4,
    )


# Abstract devices to lower for: the platform's Pallas lowering reads the device kind.
ABSTRACT_DEVICES = {"cuda": ("NVIDIA H100", 132), "tpu": ("TPU v5p", 1)}


def lower(fn, args, platform):
    """The StableHLO text of `fn` lowered for `platform`, from this CPU machine."""
    avals = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args]
    if platform == "cpu":
        return jax.jit(fn).trace(*avals).lower(lowering_platforms=("cpu",)).as_text()
    kind, cores = ABSTRACT_DEVICES[platform]
    device = jax.sharding.AbstractDevice(device_kind=kind, num_cores=cores, platform=platform)
    mesh = jax.sharding.AbstractMesh((1,), ("x",), abstract_device=device)
    with jax.sharding.use_abstract_mesh(mesh):
        return jax.jit(fn).trace(*avals).lower(lowering_platforms=(platform,)).as_text()


def stencil_offsets(side):
    return (-side, -1, 0, 1, side)


def dia_product_and_gradient(offsets, shape, backend):
    def product(data, x):
        return js.matmul(js.DIAMatrix(data, offsets, shape), x, backend=backend)

    def gradient(data, x):
        return jax.grad(lambda d, x: jnp.sum(product(d, x)), argnums=(0, 1))(data, x)

    return product, gradient


def csr_product_and_gradient(shape, backend):
    def product(data, indices, indptr, x):
        return js.matmul(js.CSRMatrix(data, indices, indptr, shape), x, backend=backend)

    def gradient(data, indices, indptr, x):
        loss = lambda d, x: jnp.sum(product(d, indices, indptr, x))  # noqa: E731
        return jax.grad(loss, argnums=(0, 1))(data, x)

    return product, gradient


def custom_calls(text, marker):
    return text.count(marker)


@NEEDS_CROSS_LOWERING
@pytest.mark.parametrize("platform", ["cuda", "tpu"])
@pytest.mark.parametrize("k", [1, 128])
@pytest.mark.parametrize("backend", ["pallas", "auto"])
def test_dia_product_and_gradient_lower_for_accelerators(platform, k, backend):
    rows = 2**20
    offsets, shape = stencil_offsets(1024), (rows, rows)
    product, gradient = dia_product_and_gradient(offsets, shape, backend)
    data = jnp.zeros((len(offsets), rows), jnp.float32)
    x = jnp.zeros((rows, k), jnp.float32)
    marker = TRITON_CALL if platform == "cuda" else TPU_CALL
    product_text = lower(product, (data, x), platform)
    assert custom_calls(product_text, marker) >= 1
    # The gradient runs the sampled product and the forward kernel on A^T.
    gradient_text = lower(gradient, (data, x), platform)
    assert custom_calls(gradient_text, marker) >= 2
    assert "dia_sddmm" in gradient_text and "dia_matmul" in gradient_text


@NEEDS_CROSS_LOWERING
@pytest.mark.parametrize("platform", ["cuda", "tpu"])
@pytest.mark.parametrize("k", [1, 128])
def test_csr_product_and_gradient_lower_for_accelerators(platform, k):
    rows, nnz = 10**6, 10**7
    product, gradient = csr_product_and_gradient((rows, rows), "pallas")
    args = (
        jnp.zeros((nnz,), jnp.float32),
        jnp.zeros((nnz,), jnp.int32),
        jnp.zeros((rows + 1,), jnp.int32),
        jnp.zeros((rows, k), jnp.float32),
    )
    marker = TRITON_CALL if platform == "cuda" else TPU_CALL
    assert custom_calls(lower(product, args, platform), marker) >= 1
    assert custom_calls(lower(gradient, args, platform), marker) >= 2


@NEEDS_CROSS_LOWERING
def test_auto_lowers_xla_for_cpu_and_pallas_for_gpu():
    offsets, shape = (-1, 0, 1), (4096, 4096)
    product, _ = dia_product_and_gradient(offsets, shape, "auto")
    args = (jnp.zeros((3, 4096), jnp.float32), jnp.zeros((4096, 1), jnp.float32))
    assert TRITON_CALL in lower(product, args, "cuda")
    cpu_text = lower(product, args, "cpu")
    assert TRITON_CALL not in cpu_text and TPU_CALL not in cpu_text


@NEEDS_CROSS_LOWERING
def test_complex_lowers_to_xla_on_gpu():
    offsets, shape = (-1, 0, 1), (4096, 4096)
    product, _ = dia_product_and_gradient(offsets, shape, "pallas")
    args = (jnp.zeros((3, 4096), jnp.complex64), jnp.zeros((4096, 1), jnp.complex64))
    assert TRITON_CALL not in lower(product, args, "cuda")
