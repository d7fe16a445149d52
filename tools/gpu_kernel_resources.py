"""What a compiled GPU kernel uses: registers per thread, stack, shared memory, launch shape.

Two sources, one per way a kernel reaches machine code:

- **Kernels that XLA compiles** (Pallas Triton kernels, and XLA's own fusions): XLA writes
  every kernel's cubin, launch dimensions and dynamic shared memory to the file named by its
  `xla_gpu_kernel_cache_file` option, a `CompilationCacheProto` read here in protobuf's wire
  format (`read_kernel_cache`). A cubin is an ELF file: its `.nv.info` section holds each
  function's registers per thread (`EIATTR_REGCOUNT`) and stack frame (`EIATTR_FRAME_SIZE`,
  local memory per thread, where register spills go), and its `.nv.shared.<kernel>` section
  the static shared memory (on sm_90 it includes the 1 KiB the driver reserves per block).
- **Mosaic GPU kernels**, which jaxlib compiles inside its custom call: with
  `MOSAIC_GPU_DUMP_PTXAS=1` it prints ptxas' verbose report, parsed by `read_ptxas_report`.
  Their dynamic shared memory (scratch) is not in that report.
"""

import dataclasses
import re
import struct

# `.nv.info` attribute records: format byte, attribute byte, 16-bit value or payload size.
_EIFMT_SVAL = 0x04
_EIATTR_FRAME_SIZE = 0x11
_EIATTR_REGCOUNT = 0x2F
# Protobuf wire types.
_VARINT, _LENGTH_DELIMITED = 0, 2
# A Triton custom call's backend config, which is the cache's fingerprint of its kernel,
# carries the kernel's IR; XLA's own fusions are fingerprinted by their fused HLO.
_TRITON_FINGERPRINT = ' ir = "'


@dataclasses.dataclass(frozen=True)
class KernelResources:
    """What one compiled kernel uses; `None` where its source does not say.

    - `name`: the kernel's name (a Pallas kernel's `name=`).
    - `kind`: `"triton"` (a Pallas Triton kernel), `"xla"` (an XLA fusion) or
      `"mosaic_gpu"`.
    - `registers`: registers per thread.
    - `stack_bytes`: stack frame per thread (local memory; spills land here).
    - `static_shared_bytes`, `dynamic_shared_bytes`: shared memory per block.
    - `threads`, `blocks`: threads per block and blocks per launch.
    """

    name: str
    kind: str
    registers: int
    stack_bytes: int
    static_shared_bytes: int
    dynamic_shared_bytes: int | None
    threads: int | None
    blocks: int | None

    @property
    def shared_bytes(self) -> int:
        """Static plus dynamic shared memory per block (dynamic counted 0 if unknown)."""
        return self.static_shared_bytes + (self.dynamic_shared_bytes or 0)


def read_kernel_cache(data: bytes) -> list[KernelResources]:
    """The kernels in an XLA kernel cache file (`xla_gpu_kernel_cache_file`).

    **Arguments:**

    - `data`: the file's bytes, a serialized `CompilationCacheProto`: field 1 maps the
      kernel's name to an entry with its fingerprint (1), launch dimensions (2: blocks,
      threads per block), dynamic shared memory (4) and cubin (5).

    **Returns:** one `KernelResources` per kernel, sorted by name.
    """
    kernels = []
    for name, entry in _cache_entries(data):
        launch = dict(_fields(entry.get(2, b"")))
        registers, stack_bytes, static_shared = read_cubin(entry[5], name)
        kind = "triton" if _is_triton(entry) else "xla"
        kernels.append(
            KernelResources(
                name=name,
                kind=kind,
                registers=registers,
                stack_bytes=stack_bytes,
                static_shared_bytes=static_shared,
                dynamic_shared_bytes=entry.get(4, 0),
                threads=launch.get(2),
                blocks=launch.get(1),
            )
        )
    return sorted(kernels, key=lambda kernel: kernel.name)


def read_triton_cubins(data: bytes) -> dict[str, bytes]:
    """The cubin of each Pallas Triton kernel in an XLA kernel cache file (see
    `read_kernel_cache`), by kernel name."""
    return {name: entry[5] for name, entry in _cache_entries(data) if _is_triton(entry)}


def _cache_entries(data: bytes):
    """`(kernel name, entry fields)` of each kernel of a kernel cache file."""
    for field, value in _fields(data):
        if field != 1 or isinstance(value, int):
            continue
        pair = dict(_fields(value))
        yield pair[1].decode(), dict(_fields(pair[2]))


def _is_triton(entry: dict) -> bool:
    return _TRITON_FINGERPRINT in entry.get(1, b"").decode(errors="replace")


def read_cubin(cubin: bytes, kernel: str) -> tuple[int, int, int]:
    """Registers per thread, stack frame bytes and static shared memory bytes of `kernel`.

    **Arguments:**

    - `cubin`: a 64-bit little-endian ELF file of NVIDIA machine code.
    - `kernel`: the name of the kernel's function symbol in it.

    **Returns:** `(registers, stack_bytes, static_shared_bytes)`.
    """
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2 or cubin[5] != 1:
        raise ValueError(f"kernel {kernel!r}: not a 64-bit little-endian ELF cubin")
    sections = _sections(cubin)
    symbols = _symbol_names(cubin, sections)
    attributes = _info_attributes(sections.get(".nv.info", b""))
    wanted = [index for index, name in symbols.items() if name == kernel]
    if not wanted:
        raise ValueError(f"kernel {kernel!r}: no such function in its cubin")
    registers = attributes.get((_EIATTR_REGCOUNT, wanted[0]), 0)
    stack_bytes = attributes.get((_EIATTR_FRAME_SIZE, wanted[0]), 0)
    return registers, stack_bytes, len(sections.get(f".nv.shared.{kernel}", b""))


def read_ptxas_report(report: str) -> list[KernelResources]:
    """The kernels in ptxas' verbose report (`ptxas -v`), as Mosaic GPU prints it.

    **Arguments:**

    - `report`: the text; lines other than ptxas' are ignored.

    **Returns:** one `KernelResources` (`kind="mosaic_gpu"`, no launch shape) per entry
    function, in the report's order.
    """
    kernels, current = [], None
    for line in report.splitlines():
        if match := re.search(r"Compiling entry function '([^']+)'", line):
            current = {"name": match[1], "stack_bytes": 0, "static_shared_bytes": 0}
        elif current and (match := re.search(r"(\d+) bytes stack frame", line)):
            current["stack_bytes"] = int(match[1])
        elif current and (match := re.search(r"Used (\d+) registers", line)):
            smem = re.search(r"(\d+) bytes smem", line)
            kernels.append(
                KernelResources(
                    kind="mosaic_gpu",
                    registers=int(match[1]),
                    dynamic_shared_bytes=None,
                    threads=None,
                    blocks=None,
                    **{**current, "static_shared_bytes": int(smem[1]) if smem else 0},
                )
            )
            current = None
    return kernels


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def _fields(message: bytes) -> list[tuple[int, int | bytes]]:
    """`(field number, value)` of a protobuf message holding varints and byte strings."""
    fields, at = [], 0
    while at < len(message):
        key, at = _varint(message, at)
        field, wire_type = key >> 3, key & 7
        if wire_type == _VARINT:
            value, at = _varint(message, at)
        elif wire_type == _LENGTH_DELIMITED:
            size, at = _varint(message, at)
            value, at = message[at : at + size], at + size
        else:
            raise ValueError(f"unexpected protobuf wire type {wire_type} in a kernel cache")
        fields.append((field, value))
    return fields


def _sections(elf: bytes) -> dict[str, bytes]:
    """Section name -> contents (a `NOBITS` section: as many zero bytes as its size)."""
    (header_offset,) = struct.unpack_from("<Q", elf, 0x28)
    entry_size, count, names_index = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [
        struct.unpack_from("<IIQQQQIIQQ", elf, header_offset + i * entry_size) for i in range(count)
    ]
    names_offset = headers[names_index][4]
    sections = {}
    for name, kind, _, _, offset, size, *_ in headers:
        start = names_offset + name
        label = elf[start : elf.index(b"\0", start)].decode()
        sections[label] = bytes(size) if kind == 8 else elf[offset : offset + size]
    return sections


def _symbol_names(elf: bytes, sections: dict[str, bytes]) -> dict[int, str]:
    """Symbol index -> name, from `.symtab` and `.strtab`."""
    table, names = sections.get(".symtab", b""), sections.get(".strtab", b"")
    symbols = {}
    for index in range(len(table) // 24):
        (name,) = struct.unpack_from("<I", table, index * 24)
        symbols[index] = names[name : names.index(b"\0", name)].decode()
    return symbols


def _info_attributes(info: bytes) -> dict[tuple[int, int], int]:
    """`(attribute, symbol index) -> value` of the per-function records in `.nv.info`."""
    attributes, at = {}, 0
    while at + 4 <= len(info):
        fmt, attribute, size = struct.unpack_from("<BBH", info, at)
        at += 4
        if fmt != _EIFMT_SVAL:
            continue
        if size == 8:
            symbol, value = struct.unpack_from("<II", info, at)
            attributes[attribute, symbol] = value
        at += size
    return attributes
