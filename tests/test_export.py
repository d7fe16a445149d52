"""`jax.export` of sparse programs, in this process: serialization round trips matching
scipy, what `"auto"` lowers for export on each platform, symbolic shapes, and one module
parameter per pytree leaf (`keep_unused=True`) or the kept ones (`module_kept_var_idx`).

Running artifacts in other processes and JAX versions: `test_export_elsewhere.py`.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from exporting import SIDES, operand_shapes, product_and_gradients, random_operands, scipy_answer
from foreign_caller import run_stablehlo
from helpers import MATRICES, assert_close, cases, random_csr, random_dia, random_values
from jax import export
from lowering import DIA_KERNEL_CALLS, KERNEL_CALLS, NEEDS_CROSS_LOWERING, abstract_mesh

import jaxsparse as js
from jaxsparse import _backend, _csr_ops, _dia_ops
from jaxsparse.kernels import mosaic_gpu_dia

# Exports from this (CPU) machine: on a GPU machine too, the default device is the CPU.
pytestmark = pytest.mark.on_cpu

F64 = jnp.float64
EXPORT_CASES = [
    case
    for case in MATRICES
    if case.name
    in ("dia-tall-beyond-matrix", "dia-wide-beyond-matrix", "csr-power-law", "csr-repeated-columns")
]
TABLES = {"dia": _dia_ops.IMPLEMENTATIONS, "csr": _csr_ops.IMPLEMENTATIONS}


def small_matrix(fmt, rng, dtype=F64, index_dtype=np.int32):
    """A matrix and its scipy twin, with slots outside the matrix (DIA) or repeats (CSR)."""
    if fmt == "dia":
        return random_dia(rng, (7, 5), (-2, 0, 1, 6), dtype)
    if fmt == "dia-many-diagonals":  # past the unrolled diagonals: the looped XLA path
        return random_dia(rng, (40, 40), tuple(range(-20, 20)), dtype)
    return random_csr(
        rng, (7, 5), density=0.5, dtype=dtype, index_dtype=index_dtype, repeat_columns=True
    )


def round_trip(exported: export.Exported) -> export.Exported:
    return export.deserialize(exported.serialize())


def assert_answers(got, expected, dtype=F64):
    for actual, want in zip(got, expected, strict=True):
        assert_close(actual, want, dtype)


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("case", cases(EXPORT_CASES))
def test_products_and_gradients_export_with_default_checks_and_match_scipy(case, side):
    rng = np.random.default_rng(0)
    matrix, twin = case.make(rng, F64)
    dense, cotangent = random_operands(rng, side, case.shape, F64)
    exported = export.export(jax.jit(product_and_gradients(side)))(matrix, dense, cotangent)
    assert exported.platforms == ("cpu",)
    # Pure StableHLO: not even a custom call that the default checks would accept.
    assert "stablehlo.custom_call" not in exported.mlir_module()
    got = round_trip(exported).call(matrix, dense, cotangent)
    assert_answers(got, scipy_answer(side, twin, dense, cotangent))


@pytest.mark.parametrize(
    ("fmt", "index_dtype"), [("dia", None), ("csr", np.int32), ("csr", np.int64)]
)
def test_format_shape_offsets_and_index_dtype_survive_a_round_trip(fmt, index_dtype):
    rng = np.random.default_rng(1)
    matrix, _ = small_matrix(fmt, rng, index_dtype=index_dtype or np.int32)
    x = jnp.asarray(random_values(rng, (5, 2), F64))
    exported = export.export(jax.jit(lambda a, x: (a @ x, a.T)))(matrix, x)
    restored = round_trip(exported)
    assert restored.in_tree == exported.in_tree and restored.out_tree == exported.out_tree
    (argument, _), _ = jax.tree.unflatten(restored.in_tree, restored.in_avals)
    product, transposed = restored.call(matrix, x)
    assert type(argument) is type(matrix) and argument.shape == matrix.shape
    assert type(transposed) is type(matrix) and transposed.shape == matrix.shape[::-1]
    if fmt == "dia":
        assert argument.offsets == matrix.offsets
        assert transposed.offsets == tuple(-off for off in matrix.offsets)
    else:
        for result in (argument, transposed):
            assert result.indices.dtype == result.indptr.dtype == index_dtype
    np.testing.assert_allclose(product, matrix.todense() @ x, atol=1e-12)
    np.testing.assert_array_equal(transposed.todense(), matrix.todense().T)


def test_an_artifact_from_a_jaxsparse_with_other_static_fields_is_refused():
    matrix, _ = small_matrix("dia", np.random.default_rng(2))
    blob = export.export(jax.jit(lambda a: a.data))(matrix).serialize()
    assert blob.count(b'"offsets"') == 1
    with pytest.raises(ValueError, match="static fields .*'offsetz'.* expects .*'offsets'"):
        export.deserialize(bytearray(bytes(blob).replace(b'"offsets"', b'"offsetz"')))


@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_auto_exports_only_xla_on_cpu_whatever_else_runs_there(fmt, monkeypatch):
    """A CPU family that `"auto"` prefers at run time (`native`; here also a stand-in
    `cpu` family) never lowers for export: only `xla` does."""
    calls = {family: [] for family in ("native", "cpu", "xla")}
    table = TABLES[fmt]["matmul"]
    for family in calls:
        original = table.get(family, table["xla"])

        def spy(*args, _family=family, _original=original, **params):
            calls[_family].append(params)
            return _original(*args, **params)

        monkeypatch.setitem(table, family, spy)
    monkeypatch.setitem(_backend.PREFERENCES, ("auto", "cpu"), ("native", "cpu", "xla"))
    matrix, _ = small_matrix(fmt, np.random.default_rng(3))
    x = jnp.ones((5, 2), F64)
    program = jax.jit(lambda a, x: a @ x)
    expected = matrix.todense() @ x
    np.testing.assert_allclose(program(matrix, x), expected, atol=1e-12)
    assert [len(c) for c in calls.values()] == [1, 0, 0]
    exported = export.export(program)(matrix, x)
    assert [len(c) for c in calls.values()] == [1, 0, 1]
    np.testing.assert_allclose(round_trip(exported).call(matrix, x), expected, atol=1e-12)


@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_one_artifact_for_cpu_and_cuda_exports_on_this_machine_and_runs_here(fmt):
    rng = np.random.default_rng(11)
    matrix, twin = small_matrix(fmt, rng)
    dense, cotangent = random_operands(rng, "A@X", matrix.shape, F64)
    program = jax.jit(product_and_gradients("A@X"))
    exported = export.export(program, platforms=("cpu", "cuda"))(matrix, dense, cotangent)
    restored = round_trip(exported)
    assert restored.platforms == ("cpu", "cuda")
    # Only the cuda branch of a DIA product holds a kernel, Mosaic GPU's guaranteed one,
    # where this JAX has Mosaic GPU.
    calls = set(re.findall(r"stablehlo\.custom_call @([\w$.]+)", restored.mlir_module()))
    mosaic_gpu = fmt == "dia" and mosaic_gpu_dia.supports(F64, "cuda")
    assert calls == ({DIA_KERNEL_CALLS["cuda"]} if mosaic_gpu else set())
    got = restored.call(matrix, dense, cotangent)
    assert_answers(got, scipy_answer("A@X", twin, dense, cotangent))


def test_choose_implementation_for_export_keeps_the_exportable_families():
    def family(name):
        return lambda *args, **params: name

    implementations = {name: family(name) for name in ("native", "mosaic_tpu", "triton", "xla")}

    def chosen(platform, **kwargs):
        implementation = _backend.choose_implementation(
            "op", implementations, {}, backend="auto", platform=platform, dtype=F64, **kwargs
        )
        return implementation()

    assert chosen("cpu") == "native"
    assert chosen("cpu", for_export=True) == "xla"
    assert chosen("cuda") == "triton"
    assert chosen("cuda", for_export=True) == "xla"
    assert chosen("tpu", for_export=True) == "mosaic_tpu"
    assert chosen("tpu", for_export=True, symbolic_shapes=True) == "xla"


@NEEDS_CROSS_LOWERING
@pytest.mark.parametrize("side", ["A@X", "x@A"])
@pytest.mark.parametrize("platform", ["tpu", "cuda"])
@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_auto_exports_guaranteed_kernels_for_accelerators(fmt, platform, side):
    """On TPU the Mosaic kernels (`tpu_custom_call`, guaranteed); on CUDA the Mosaic GPU
    DIA kernels (`mosaic_gpu_v2`, guaranteed) and pure StableHLO for CSR, since the Triton
    kernels' custom call has no guarantee. All with default checks."""
    rng = np.random.default_rng(4)
    shape = (256, 256)
    if fmt == "dia":
        matrix, _ = random_dia(rng, shape, (-16, -1, 0, 1, 16), jnp.float32)
    else:
        matrix, _ = random_csr(rng, shape, density=0.05, dtype=jnp.float32)
    dense, cotangent = random_operands(rng, side, shape, jnp.float32, k=8)
    with abstract_mesh(platform):
        exported = export.export(jax.jit(product_and_gradients(side)), platforms=(platform,))(
            matrix, dense, cotangent
        )
    restored = round_trip(exported)
    assert restored.platforms == (platform,)
    text = restored.mlir_module()
    if platform == "tpu":  # the product and both gradients each run a kernel
        assert text.count(KERNEL_CALLS["tpu"]) >= 3
    elif fmt == "dia":
        assert text.count(DIA_KERNEL_CALLS["cuda"]) >= 3
    else:
        assert "stablehlo.custom_call" not in text


@NEEDS_CROSS_LOWERING
@pytest.mark.parametrize("fmt", ["csr"])  # DIA runs Mosaic GPU there: test_mosaic_gpu_dia.py
def test_pallas_on_gpu_exports_only_with_disabled_checks(fmt):
    rng = np.random.default_rng(5)
    matrix, _ = small_matrix(fmt, rng, jnp.float32)
    x = jnp.ones((5, 4), jnp.float32)
    triton = KERNEL_CALLS["cuda"]

    def program():  # a fresh function each time: a cached lowering would not warn again
        return jax.jit(lambda a, x: js.matmul(a, x, backend="pallas"))

    with abstract_mesh("cuda"):
        with (
            pytest.warns(UserWarning, match=re.escape(f"custom_call('{triton}')")),
            pytest.raises(ValueError, match="no compatibility guarantees"),
        ):
            export.export(program(), platforms=("cuda",))(matrix, x)
        with pytest.warns(UserWarning, match="disabled_checks"):
            exported = export.export(
                program(),
                platforms=("cuda",),
                disabled_checks=[export.DisabledSafetyCheck.custom_call(triton)],
            )(matrix, x)
    restored = round_trip(exported)
    assert triton in restored.mlir_module()
    assert restored.disabled_safety_checks == (export.DisabledSafetyCheck.custom_call(triton),)


@pytest.mark.parametrize(
    ("fmt", "side"),
    [
        (fmt, side)
        for fmt in ("dia", "csr", "dia-many-diagonals")
        for side in ("A@X", "X@A")
        if fmt != "dia-many-diagonals" or side == "A@X"
    ],
)
def test_symbolic_column_count(fmt, side):
    rng = np.random.default_rng(6)
    matrix, twin = small_matrix(fmt, rng)
    (k,) = export.symbolic_shape("k")
    dense_shape, cotangent_shape = operand_shapes(side, matrix.shape, k)
    specs = (jax.ShapeDtypeStruct(dense_shape, F64), jax.ShapeDtypeStruct(cotangent_shape, F64))
    exported = export.export(jax.jit(product_and_gradients(side)))(matrix, *specs)
    restored = round_trip(exported)
    assert "k" in str(restored.in_avals[-1].shape)
    for columns in (1, 4):
        dense, cotangent = random_operands(rng, side, matrix.shape, F64, k=columns)
        got = restored.call(matrix, dense, cotangent)
        assert_answers(got, scipy_answer(side, twin, dense, cotangent))


@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_symbolic_batch_of_operands_under_vmap(fmt):
    rng = np.random.default_rng(7)
    matrix, twin = small_matrix(fmt, rng)
    m, n = matrix.shape
    (b,) = export.symbolic_shape("b")
    batched = jax.vmap(product_and_gradients("A@x"), in_axes=(None, 0, 0))
    specs = (jax.ShapeDtypeStruct((b, n), F64), jax.ShapeDtypeStruct((b, m), F64))
    restored = round_trip(export.export(jax.jit(batched))(matrix, *specs))
    for size in (1, 3):
        xs, gs = random_values(rng, (size, n), F64), random_values(rng, (size, m), F64)
        got = restored.call(matrix, xs, gs)
        for i in range(size):
            assert_answers([out[i] for out in got], scipy_answer("A@x", twin, xs[i], gs[i]))


@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_symbolic_batch_of_matrix_values_under_vmap(fmt):
    rng = np.random.default_rng(8)
    matrix, twin = small_matrix(fmt, rng)
    (b,) = export.symbolic_shape("b")
    batched = jax.vmap(lambda data, x: matrix.with_data(data) @ x)
    specs = (
        jax.ShapeDtypeStruct((b, *matrix.data.shape), F64),
        jax.ShapeDtypeStruct((b, matrix.shape[1]), F64),
    )
    restored = round_trip(export.export(jax.jit(batched))(*specs))
    scales = (1.0, -2.0)
    x = random_values(rng, (len(scales), matrix.shape[1]), F64)
    got = restored.call(jnp.stack([scale * matrix.data for scale in scales]), x)
    for i, scale in enumerate(scales):
        np.testing.assert_allclose(got[i], scale * (twin @ x[i]), atol=1e-12)


@NEEDS_CROSS_LOWERING
@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_symbolic_shapes_skip_the_tpu_kernels_under_auto_and_raise_under_pallas(fmt):
    rng = np.random.default_rng(9)
    matrix, _ = small_matrix(fmt, rng, jnp.float32)
    (k,) = export.symbolic_shape("k")
    spec = jax.ShapeDtypeStruct((matrix.shape[1], k), jnp.float32)
    with abstract_mesh("tpu"):
        exported = export.export(jax.jit(lambda a, x: a @ x), platforms=("tpu",))(matrix, spec)
        assert KERNEL_CALLS["tpu"] not in round_trip(exported).mlir_module()
        pallas = jax.jit(lambda a, x: js.matmul(a, x, backend="pallas"))
        with pytest.raises(ValueError, match="need static shapes.*'auto' or 'xla'"):
            export.export(pallas, platforms=("tpu",))(matrix, spec)


# Unused inputs. The gradient of `sum(A @ x)` in A's values never reads the values, and in
# `x` never reads `x`; `extra` is never read. Leaves: DIA `[data, x, extra]`, CSR
# `[data, indices, indptr, x, extra]`.
READ_LEAVES = {
    ("dia", "values"): (1,),
    ("dia", "operand"): (0,),
    ("csr", "values"): (1, 2, 3),
    ("csr", "operand"): (0, 1, 2),
}


def gradient_of_sum(wrt: str):
    def gradient(matrix, x, extra):
        del extra
        if wrt == "values":
            return jax.grad(lambda data: jnp.sum(matrix.with_data(data) @ x))(matrix.data)
        return jax.grad(lambda x: jnp.sum(matrix @ x))(x)

    return gradient


def main_parameter_types(module_text: str) -> list[str]:
    """The tensor types of the parameters of the module's `main`, in order."""
    signature = next(line for line in module_text.splitlines() if "func.func public @main(" in line)
    return re.findall(r"%arg\d+: (tensor<[^>]*>)", signature)


def tensor_type(array) -> str:
    element = {"float64": "f64", "float32": "f32", "int32": "i32", "int64": "i64"}
    return f"tensor<{''.join(f'{d}x' for d in array.shape)}{element[np.dtype(array.dtype).name]}>"


@pytest.mark.parametrize("keep_unused", [True, False], ids=["keep_unused", "drop_unused"])
@pytest.mark.parametrize(("fmt", "wrt"), list(READ_LEAVES))
def test_module_parameters_are_the_leaves_and_run_by_position(fmt, wrt, keep_unused):
    """With `keep_unused=True`, one module parameter per leaf, in `jax.tree.leaves` order;
    without, exactly the leaves the program reads, as `module_kept_var_idx` says. Either
    way, the bare module (not `Exported.call`) fed those leaves by position gives the
    gradient scipy gives."""
    rng = np.random.default_rng(10)
    matrix, twin = small_matrix(fmt, rng)
    x = random_values(rng, (matrix.shape[1],), F64)
    extra = jnp.zeros((2,), jnp.float32)
    leaves = jax.tree.leaves((matrix, x, extra))
    program = jax.jit(gradient_of_sum(wrt), keep_unused=keep_unused)
    exported = export.export(program)(matrix, x, extra)
    kept = tuple(range(len(leaves))) if keep_unused else READ_LEAVES[fmt, wrt]
    assert exported.module_kept_var_idx == kept
    restored = round_trip(exported)
    arguments = [leaves[i] for i in kept]
    assert main_parameter_types(restored.mlir_module()) == [tensor_type(a) for a in arguments]
    (got,) = run_stablehlo(restored.mlir_module_serialized, arguments)
    _, d_values, d_dense = scipy_answer("A@x", twin, x, np.ones(matrix.shape[0]))
    assert_close(got, d_values if wrt == "values" else d_dense, F64)
