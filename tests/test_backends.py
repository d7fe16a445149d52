"""Backend choice end to end: what "auto", "pallas", "interpret" and "xla" run, that an
explicit backend never runs another implementation, and that `jaxsparse.matmul(...,
backend="pallas")` and its gradient lower for GPU and TPU here."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import random_csr, random_dia
from lowering import DIA_KERNEL_CALLS, KERNEL_CALLS, NEEDS_CROSS_LOWERING, lower

import jaxsparse as js
from jaxsparse import _csr_ops, _dia_ops

TABLES = {"dia": _dia_ops.IMPLEMENTATIONS, "csr": _csr_ops.IMPLEMENTATIONS}
# The family each format's forward product runs in interpret mode on a CPU.
INTERPRETED = {"dia": "triton", "csr": "triton"}


def small_matrix(fmt, dtype=jnp.float32):
    rng = np.random.default_rng(0)
    if fmt == "dia":
        return random_dia(rng, (12, 10), (-1, 0, 2), dtype)[0]
    return random_csr(rng, (12, 10), density=0.3, dtype=dtype)[0]


def spy_on(monkeypatch, fmt, family):
    """Record the calls of one family's forward product (its table entry is replaced)."""
    calls = []
    original = TABLES[fmt]["matmul"][family]

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setitem(TABLES[fmt]["matmul"], family, spy)
    return calls


def product(backend):
    """A fresh jitted product, so that each call lowers (and so picks) anew."""
    return jax.jit(lambda a, x: js.matmul(a, x, backend=backend))


@pytest.mark.on_cpu
@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_pallas_backend_on_cpu_is_a_clear_error(fmt):
    matrix = small_matrix(fmt)
    with pytest.raises(ValueError, match="Pallas has no CPU compiler.*'interpret'"):
        js.matmul(matrix, jnp.ones((10, 2), jnp.float32), backend="pallas")


@pytest.mark.on_cpu
@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_auto_on_cpu_runs_native_kernels_and_interpret_the_pallas_ones(fmt, monkeypatch):
    kernel_calls = spy_on(monkeypatch, fmt, INTERPRETED[fmt])
    native_calls = spy_on(monkeypatch, fmt, "native")
    xla_calls = spy_on(monkeypatch, fmt, "xla")
    matrix = small_matrix(fmt)
    x = jnp.asarray(np.random.default_rng(1).standard_normal((10, 2)), jnp.float32)
    expected = matrix.todense() @ x
    np.testing.assert_allclose(product("xla")(matrix, x), expected, rtol=1e-5)
    assert (len(xla_calls), len(native_calls), len(kernel_calls)) == (1, 0, 0)
    for backend in ("auto", None):
        np.testing.assert_allclose(product(backend)(matrix, x), expected, rtol=1e-5)
    assert (len(xla_calls), len(native_calls), len(kernel_calls)) == (1, 2, 0)
    np.testing.assert_allclose(product("interpret")(matrix, x), expected, rtol=1e-5)
    assert (len(xla_calls), len(native_calls), len(kernel_calls)) == (1, 2, 1)
    assert kernel_calls[0]["interpret"] is True and kernel_calls[0]["platform"] == "cpu"


def test_environment_variable_overrides_auto(monkeypatch):
    calls = spy_on(monkeypatch, "dia", "triton")
    matrix = small_matrix("dia")
    monkeypatch.setenv("JAXSPARSE_BACKEND", "interpret")
    out = product(None)(matrix, jnp.ones((10,), jnp.float32))
    assert len(calls) == 1
    np.testing.assert_allclose(out, matrix.todense() @ jnp.ones(10, jnp.float32), rtol=1e-5)
    assert product("xla")(matrix, jnp.ones(10, jnp.float32)).shape == (12,)
    assert len(calls) == 1


@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_complex_values_run_the_kernels_on_real_planes(fmt, monkeypatch):
    """complex64 under "interpret" runs the format's kernel family (on real planes:
    `pallas_call`s of float32 values), nothing else, and matches the dense product and its
    gradient."""
    kernel_calls = spy_on(monkeypatch, fmt, INTERPRETED[fmt])
    xla_calls = spy_on(monkeypatch, fmt, "xla")
    native_calls = spy_on(monkeypatch, fmt, "native")
    matrix = small_matrix(fmt, jnp.complex64)
    rng = np.random.default_rng(2)
    x = jnp.asarray(rng.standard_normal((10, 3)) + 1j * rng.standard_normal((10, 3)), jnp.complex64)
    np.testing.assert_allclose(product("interpret")(matrix, x), matrix.todense() @ x, rtol=1e-5)
    assert (len(kernel_calls), len(xla_calls), len(native_calls)) == (1, 0, 0)
    implementation = TABLES[fmt]["matmul"][INTERPRETED[fmt]]
    structure = () if fmt == "dia" else (matrix.indices, matrix.indptr)
    params = dict(shape=matrix.shape, interpret=True, platform="cpu")
    if fmt == "dia":
        params["offsets"] = matrix.offsets
    jaxpr = jax.make_jaxpr(lambda d, x: implementation(d, x, *structure, **params))(matrix.data, x)
    calls = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "pallas_call"]
    assert calls
    for call in calls:
        assert {v.aval.dtype for v in call.invars} - {jnp.dtype(jnp.int32)} == {
            jnp.dtype(jnp.float32)
        }

    def loss(d, x, backend):
        return jnp.sum(jnp.abs(js.matmul(matrix.with_data(d), x, backend=backend)) ** 2)

    def dense(d, x):
        return jnp.sum(jnp.abs(matrix.with_data(d).todense() @ x) ** 2)

    for got, want in zip(
        jax.grad(loss, argnums=(0, 1))(matrix.data, x, "interpret"),
        jax.grad(dense, argnums=(0, 1))(matrix.data, x),
        strict=True,
    ):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


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
    marker = DIA_KERNEL_CALLS[platform]
    assert lower(product, (data, x), platform).count(marker) >= 1
    # The gradient runs the sampled product and the forward kernel on A^T.
    gradient_text = lower(gradient, (data, x), platform)
    assert gradient_text.count(marker) >= 2
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
    marker = KERNEL_CALLS[platform]
    assert lower(product, args, platform).count(marker) >= 1
    assert lower(gradient, args, platform).count(marker) >= 2


@NEEDS_CROSS_LOWERING
def test_auto_lowers_xla_for_cpu_and_pallas_for_gpu():
    offsets, shape = (-1, 0, 1), (4096, 4096)
    product, _ = dia_product_and_gradient(offsets, shape, "auto")
    args = (jnp.zeros((3, 4096), jnp.float32), jnp.zeros((4096, 1), jnp.float32))
    assert DIA_KERNEL_CALLS["cuda"] in lower(product, args, "cuda")
    cpu_text = lower(product, args, "cpu")
    markers = {*KERNEL_CALLS.values(), *DIA_KERNEL_CALLS.values()}
    assert all(marker not in cpu_text for marker in markers)


@NEEDS_CROSS_LOWERING
@pytest.mark.parametrize("fmt", ["dia", "csr"])
@pytest.mark.parametrize(
    ("dtype", "platform"),
    [(jnp.complex128, "tpu"), (jnp.float64, "tpu")],
    ids=["complex128-tpu", "float64-tpu"],
)
def test_dtypes_without_kernels_lower_to_xla_under_auto_and_raise_under_pallas(
    fmt, dtype, platform
):
    shape = (4096, 4096)
    if fmt == "dia":
        args = (jnp.zeros((3, 4096), dtype), jnp.zeros((4096, 1), dtype))
        auto = dia_product_and_gradient((-1, 0, 1), shape, "auto")[0]
        pallas = dia_product_and_gradient((-1, 0, 1), shape, "pallas")[0]
    else:
        args = (
            jnp.zeros((100,), dtype),
            jnp.zeros((100,), jnp.int32),
            jnp.zeros((4097,), jnp.int32),
            jnp.zeros((4096, 1), dtype),
        )
        auto = csr_product_and_gradient(shape, "auto")[0]
        pallas = csr_product_and_gradient(shape, "pallas")[0]
    auto_text = lower(auto, args, platform)
    assert KERNEL_CALLS[platform] not in auto_text
    assert DIA_KERNEL_CALLS[platform] not in auto_text
    name = np.dtype(dtype).name
    with pytest.raises(TypeError, match=f"{name} on platform '{platform}'"):
        lower(pallas, args, platform)


@NEEDS_CROSS_LOWERING
@pytest.mark.parametrize("platform", ["cuda", "tpu"])
@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_complex64_product_and_gradient_lower_to_the_kernels(fmt, platform):
    """complex64 reaches the accelerator kernels on real planes under "pallas" and "auto"."""
    shape, dtype = (4096, 4096), jnp.complex64
    if fmt == "dia":
        args = (jnp.zeros((3, 4096), dtype), jnp.zeros((4096, 2), dtype))
        functions = dia_product_and_gradient((-1, 0, 1), shape, "pallas")
    else:
        args = (
            jnp.zeros((100,), dtype),
            jnp.zeros((100,), jnp.int32),
            jnp.zeros((4097,), jnp.int32),
            jnp.zeros((4096, 2), dtype),
        )
        functions = csr_product_and_gradient(shape, "pallas")
    product = functions[0]

    def gradient(*args):
        def loss(values, x):
            return jnp.sum(jnp.abs(product(values, *args[1:-1], x)) ** 2)

        return jax.grad(loss, argnums=(0, 1))(args[0], args[-1])

    for function in (product, gradient):
        text = lower(function, args, platform)
        call = (DIA_KERNEL_CALLS if fmt == "dia" else KERNEL_CALLS)[platform]
        assert call in text
        assert "complex<f32>" not in text.split(call)[1].split("\n")[0]
