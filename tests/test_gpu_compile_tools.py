"""The readers behind `make gpu-compile` (`tools/`), on hand-built inputs: a cubin's
registers, stack and shared memory, XLA's kernel cache, ptxas' report, the loops of a
disassembly; which kernel families it compiles; and which errors it counts as the library
declining a dtype.

The compile itself needs the CUDA plugin (`make gpu-compile`); nothing here does.
"""

import importlib
import struct
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import jaxsparse as js
from jaxsparse import _backend, _csr_ops, _dia_ops, _families

TOOLS = Path(__file__).resolve().parents[1] / "tools"
KERNEL = "dia_matmul"


@pytest.fixture(scope="module")
def tools():
    """`gpu_compile`, `gpu_compile_cases`, `gpu_kernel_resources`: scripts that import
    each other by name, as `python tools/gpu_compile.py` runs them."""
    sys.path.insert(0, str(TOOLS))
    try:
        names = ("gpu_compile", "gpu_compile_cases", "gpu_kernel_resources")
        return tuple(importlib.import_module(name) for name in names)
    finally:
        sys.path.remove(str(TOOLS))


def _cubin(kernel: str, registers: int, frame: int, shared: int) -> bytes:
    """A minimal ELF64 cubin: `.symtab` with the kernel's symbol (index 1), `.nv.info`
    with its register count and frame size (after a record of another format and one of
    another symbol), and a `NOBITS` `.nv.shared.<kernel>` of `shared` bytes."""
    strtab = b"\0" + kernel.encode() + b"\0"
    symtab = bytes(24) + struct.pack("<IBBHQQ", 1, 0x12, 0, 0, 0, 0)
    info = (
        struct.pack("<BBH", 0x03, 0x1B, 255)  # a 16-bit value record, skipped
        + struct.pack("<BBHII", 0x04, 0x2F, 8, 7, 99)  # another symbol's register count
        + struct.pack("<BBHII", 0x04, 0x2F, 8, 1, registers)
        + struct.pack("<BBHII", 0x04, 0x11, 8, 1, frame)
    )
    names = [".shstrtab", ".strtab", ".symtab", ".nv.info", f".nv.shared.{kernel}"]
    shstrtab = b"\0" + b"".join(name.encode() + b"\0" for name in names)
    name_offsets = [1 + sum(len(n) + 1 for n in names[:i]) for i in range(len(names))]
    contents = [(3, shstrtab), (3, strtab), (2, symtab), (0x70000000, info), (8, b"")]
    body, offsets, offset = b"", [], 64
    for _, data in contents:
        offsets.append(offset)
        body += data
        offset += len(data)
    header = b"\x7fELF\x02\x01\x01" + bytes(9) + struct.pack("<HHI", 1, 190, 1)
    header += struct.pack("<QQQIHHHHHH", 0, 0, 64 + len(body), 0, 64, 0, 0, 64, 6, 1)
    sections = bytes(64)
    for (kind, data), name, at in zip(contents, name_offsets, offsets, strict=True):
        size = shared if kind == 8 else len(data)
        sections += struct.pack("<IIQQQQIIQQ", name, kind, 0, 0, at, size, 0, 0, 1, 0)
    return header + body + sections


def _protobuf(*fields) -> bytes:
    """A protobuf message of `(field, int | bytes)` pairs."""
    out = b""
    for field, value in fields:
        if isinstance(value, int):
            out += _varint(field << 3) + _varint(value)
        else:
            out += _varint(field << 3 | 2) + _varint(len(value)) + value
    return out


def _varint(value: int) -> bytes:
    out = b""
    while value >= 0x80:
        out += bytes([value & 0x7F | 0x80])
        value >>= 7
    return out + bytes([value])


def test_cubin_gives_registers_stack_and_static_shared_memory(tools):
    *_, resources = tools
    assert resources.read_cubin(_cubin(KERNEL, 40, 16, 1024), KERNEL) == (40, 16, 1024)
    with pytest.raises(ValueError, match="no such function"):
        resources.read_cubin(_cubin(KERNEL, 40, 16, 1024), "csr_matmul")
    with pytest.raises(ValueError, match="not a 64-bit"):
        resources.read_cubin(b"\x7fELF\x01" + bytes(60), KERNEL)


def test_kernel_cache_tells_triton_kernels_from_xla_fusions(tools):
    *_, resources = tools
    triton = _protobuf(
        (1, b'{debug = false, grid_x = 1024 : i32, ir = "ML\\EFR", name = "dia_matmul"}'),
        (2, _protobuf((1, 1024), (2, 128))),
        (4, 2048),
        (5, _cubin(KERNEL, 255, 8, 1024)),
    )
    fusion = _protobuf(
        (1, b"MlirKernelFusion(0x16,1x256w){ pad }"),
        (2, _protobuf((1, 10260), (2, 128))),
        (5, _cubin("loop_pad_fusion", 16, 0, 0)),
    )
    cache = _protobuf(
        (1, _protobuf((1, b"loop_pad_fusion"), (2, fusion))),
        (1, _protobuf((1, KERNEL.encode()), (2, triton))),
        (2, 3),
    )
    product, pad = resources.read_kernel_cache(cache)  # sorted by name
    assert (pad.name, pad.kind, pad.registers, pad.dynamic_shared_bytes) == (
        "loop_pad_fusion",
        "xla",
        16,
        0,
    )
    assert (product.kind, product.blocks, product.threads, product.registers) == (
        "triton",
        1024,
        128,
        255,
    )
    assert (product.stack_bytes, product.shared_bytes) == (8, 1024 + 2048)


def test_ptxas_report_as_mosaic_gpu_prints_it(tools):
    *_, resources = tools
    report = """Resources(smem_scratch_bytes=0)
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'kernel_mosaic_gpu_kernel' for 'sm_90a'
ptxas info    : Function properties for kernel_mosaic_gpu_kernel
ptxas         .     24 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 2 barriers, 17 bytes smem
ptxas info    : Compile time = 6.310 ms
info    : used 12 registers, used 2 barriers, 0 stack, 1025 bytes smem, 544 bytes cmem[0]
"""
    (kernel,) = resources.read_ptxas_report(report)
    assert (kernel.name, kernel.kind, kernel.registers) == (
        "kernel_mosaic_gpu_kernel",
        "mosaic_gpu",
        12,
    )
    assert (kernel.stack_bytes, kernel.static_shared_bytes, kernel.dynamic_shared_bytes) == (
        24,
        17,
        None,
    )


def test_limits_flag_what_cannot_launch(tools):
    gpu_compile, _, resources = tools
    limits = {
        "threads_per_block_limit": 1024,
        "registers_per_block_limit": 65536,
        "shared_memory_per_core": 233472,
    }
    fine = resources.KernelResources(KERNEL, "triton", 255, 8, 1024, 2048, 128, 1024)
    assert gpu_compile.limit_problems(fine, limits) == []
    too_wide = resources.KernelResources(KERNEL, "triton", 64, 0, 1024, 300000, 2048, 1)
    problems = gpu_compile.limit_problems(too_wide, limits)
    assert len(problems) == 3 and "2048 threads per block > 1024" in problems[0]


def test_compiles_every_gpu_kernel_family_of_each_format(tools):
    _, cases, _ = tools
    preferred = _backend.PREFERENCES["pallas", "cuda"] + _backend.PREFERENCES["auto", "cuda"]
    gpu = set(preferred) & {name for name, f in _families.FAMILIES.items() if f.pallas}
    for table in (_dia_ops.IMPLEMENTATIONS, _csr_ops.IMPLEMENTATIONS):
        families = cases.gpu_kernel_families(table)
        assert families
        assert set(families) == gpu & {f for member in table.values() for f in member}
    assert cases.gpu_kernel_families({"matmul": {"xla": None, "native": None}}) == ()


def test_compiles_the_csr_kernels_unrolled_and_chunked(tools):
    """The Triton CSR product and gradient step at each of `CSR_UNROLLS` and `KS`, both
    with rows taken by chunks (one matrix and a batch), and the sorted transposed product,
    after the public programs; each traces to the shapes of its results."""
    _, cases, _ = tools
    found = cases.csr_tile_programs()
    operations = ("A @ X", "gradient step (values, X)")
    chunks = f"chunks of {cases.CSR_CHUNK_STEPS} steps"
    assert {(p.operation, p.k) for p in found} == {
        (f"{operation}, unroll {unroll}", k)
        for operation in operations
        for unroll in cases.CSR_UNROLLS
        for k in cases.KS
    } | {
        (f"{batch}{operation}, {chunks}", k)
        for operation in operations
        for batch in ("", f"batch of {cases.BATCH} ")
        for k in cases.KS
    } | {("A.T @ G, sorted per call", 8)}
    assert all(p.family == "triton" and p.dtype == "float32" for p in found)
    matrix = cases.matrices()[-1]
    (m, n), values = matrix.shape, matrix.values_shape
    wants = {
        "A @ X, unroll 2": (m, 8),
        "gradient step (values, X), unroll 2": (values, (n, 8)),
        f"A @ X, {chunks}": (m, 8),
        f"batch of {cases.BATCH} A @ X, {chunks}": (cases.BATCH, m, 8),
        f"gradient step (values, X), {chunks}": (values, (n, 8)),
        f"batch of {cases.BATCH} gradient step (values, X), {chunks}": (
            (cases.BATCH, *values),
            (cases.BATCH, n, 8),
        ),
        "A.T @ G, sorted per call": (n, 8),
    }
    for program in (p for p in found if p.k == 8 and p.operation in wants):
        shapes = jax.tree.map(lambda a: a.shape, jax.eval_shape(program.function, *program.avals))
        assert shapes == wants[program.operation], program.label


def test_only_the_librarys_refusal_counts_as_declined(tools, monkeypatch):
    gpu_compile, *_ = tools
    # Every dtype has an interpreted kernel: make the kernel families decline complex64.
    for family in ("triton", "mosaic_tpu"):
        monkeypatch.setitem(_dia_ops.SUPPORTS, family, lambda dtype, platform: False)
    A = js.DIAMatrix(jnp.ones((3, 8), jnp.complex64), offsets=(-1, 0, 1), shape=(8, 8))

    def product(A, x):
        return js.matmul(A, x, backend="interpret")

    with pytest.raises(TypeError) as refusal:
        jax.jit(product).lower(A, jnp.ones((8, 2), jnp.complex64))
    assert gpu_compile.declined_by_library(refusal.value)
    with pytest.raises(TypeError) as other:
        jax.jit(product).lower(A, "not an array")
    assert not gpu_compile.declined_by_library(other.value)


SASS = """
        /*0000*/                   LDC R1, c[0x0][0x28] ;                  /* 0x00000a00ff017b82 */
        /*0010*/              @!P0 LDG.E R4, desc[UR8][R6.64] ;            /* 0x0000000806048981 */
        /*0020*/                   LDG.E.128 R8, desc[UR8][R2.64] ;        /* 0x0000000802087981 */
        /*0030*/                   STS [R7+UR4], R20 ;                     /* 0x0000001407007988 */
        /*0040*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;           /* 0x0000000000007b1d */
        /*0050*/              @!PT LDS RZ, [RZ] ;                          /* 0x00000000ff00f984 */
        /*0060*/                   MEMBAR.ALL.GPU ;                        /* 0x0000000000007992 */
        /*0070*/               @P2 BRA 0x10 ;                              /* 0xfffffff400c02947 */
        /*0080*/                   BRA 0x90 ;                              /* 0x0000000000007947 */
        /*0090*/                   EXIT ;                                  /* 0x000000000000794d */
"""


def test_loops_of_a_disassembly_count_what_an_iteration_runs():
    """A backward branch makes a loop from its target to itself; a forward one does not.
    Its barrier, loads (one of them a vector), shared access and fence are counted; the
    predicated-off `LDS` that pads a fence moves nothing."""
    sys.path.insert(0, str(TOOLS))
    try:
        sass_loops = importlib.import_module("gpu_sass_loops")
    finally:
        sys.path.remove(str(TOOLS))
    (loop,) = sass_loops.loops(SASS)
    assert (loop.start, loop.end, loop.instructions) == (0x10, 0x70, 7)
    assert (loop.barriers, loop.loads, loop.vector_loads) == (1, 2, 1)
    assert (loop.shared, loop.fences) == (1, 1)
    assert "7 instructions, 1 barriers" in loop.describe()
