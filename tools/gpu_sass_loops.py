"""The loops of a compiled GPU kernel, read from its machine code (SASS): what each loop
iteration executes.

`make gpu-compile GPU_COMPILE_ARGS="--loops --only CSR"` prints, for every Pallas Triton
kernel it compiles, one line per loop. A loop is a backward branch: its instructions are
those from the branch's target to the branch (an inner loop's are counted in the loops
around it as well). Per loop:

- `instructions`;
- `barriers`: block-wide `BAR.SYNC`, which Triton emits where a value moves between
  threads through shared memory (a layout conversion, a reduction over the block) and
  around atomics in acquire-release order;
- `loads`: global loads (`LDG`), of which `vector loads` move 64 or 128 bits;
- `shared`: shared-memory stores and loads (`STS`, `LDS`);
- `fences`: memory barriers (`MEMBAR`), one before every atomic in acquire-release order.

The disassembler is cuobjdump (with nvdisasm) from NVIDIA's pip wheels, which the
`gpu-compile` extra installs.
"""

import dataclasses
import os
import re
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path

# One instruction of `cuobjdump -sass`: `/*0c70*/  @!P6 LDG.E R59, desc[...] ;`.
_INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_BACKWARD_BRANCH_TARGET = re.compile(r"\bBRA\s+(0x[0-9a-f]+)")
# Where the CUDA 13 wheels put their executables.
_WHEEL_BIN = Path(sysconfig.get_paths()["purelib"], "nvidia", "cu13", "bin")


@dataclasses.dataclass(frozen=True)
class Loop:
    """One loop of a kernel's machine code; addresses are byte offsets in the function."""

    start: int
    end: int
    instructions: int
    barriers: int
    loads: int
    vector_loads: int
    shared: int
    fences: int

    def describe(self) -> str:
        return (
            f"{self.start:#06x}-{self.end:#06x}: {self.instructions} instructions, "
            f"{self.barriers} barriers, {self.loads} loads ({self.vector_loads} vector), "
            f"{self.shared} shared, {self.fences} fences"
        )


def loops(sass: str) -> list[Loop]:
    """The loops of one function's `cuobjdump -sass` listing, in the order of their
    backward branches."""
    code = [
        (int(match[1], 16), match[2])
        for line in sass.splitlines()
        if (match := _INSTRUCTION.match(line))
    ]
    found = []
    for address, text in code:
        branch = _BACKWARD_BRANCH_TARGET.search(text)
        if branch is None or int(branch[1], 16) >= address:
            continue
        start = int(branch[1], 16)
        body = [instruction for at, instruction in code if start <= at <= address]
        # Predicated-off accesses (`@!PT LDS RZ, [RZ]`) pad fences and move nothing.
        moving = [instruction for instruction in body if not instruction.startswith("@!PT")]
        found.append(
            Loop(
                start=start,
                end=address,
                instructions=len(body),
                barriers=sum("BAR.SYNC" in instruction for instruction in body),
                loads=sum(" LDG" in f" {instruction}" for instruction in moving),
                vector_loads=sum(
                    re.search(r"\bLDG\S*\.(64|128)\b", instruction) is not None
                    for instruction in moving
                ),
                shared=sum(
                    re.search(r"\b(STS|LDS)\b", instruction) is not None for instruction in moving
                ),
                fences=sum("MEMBAR" in instruction for instruction in body),
            )
        )
    return found


def disassemble(cubin: bytes) -> str:
    """`cuobjdump -sass` of a cubin, by the wheels' cuobjdump and nvdisasm."""
    search = os.pathsep.join((str(_WHEEL_BIN), os.environ.get("PATH", "")))
    cuobjdump = shutil.which("cuobjdump", path=search)
    if cuobjdump is None:
        raise FileNotFoundError(
            "cuobjdump: not in the environment (the gpu-compile extra's nvidia-cuda-cuobjdump)"
        )
    with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
        file.write(cubin)
        file.flush()
        run = subprocess.run(
            [cuobjdump, "-sass", file.name],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PATH": search},
        )
    return run.stdout
