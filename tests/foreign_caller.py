"""Exported sparse programs run by a process of their own, as a caller elsewhere runs them.

    python foreign_caller.py call DIR     # never imports jaxsparse
    python foreign_caller.py export DIR   # exports with this interpreter's JAX and jaxsparse

`call`: for every `NAME.npz` in DIR (the flattened arguments `arr_0, arr_1, ...`, in
`jax.tree.leaves` order), runs `NAME.jax`, a serialized `jax.export.Exported` of a
function of those leaves, through `jax.export.deserialize(...).call(*leaves)`, and
`NAME.mlirbc`, its bare StableHLO module, through `run_stablehlo`. It writes the results
to `NAME.called.npz` and `NAME.raw.npz` and prints one JSON line: this JAX's version, the
calling convention versions it loads, and whether jaxsparse got imported.

`export`: for every case saved by `exporting.save_case` in DIR, exports
`exporting.product_and_gradients(side)` for it, with the matrix in the signature, and
writes the serialized artifact to `NAME.jax`.

Both enable 64-bit types, as the test suite does, so float64 programs keep their dtypes.
"""

import json
import pathlib
import sys

import jax
import numpy as np
from jax import export

jax.config.update("jax_enable_x64", True)


def run_stablehlo(module: bytes, arguments) -> list[np.ndarray]:
    """Compile a StableHLO module with the CPU PJRT client and run it.

    This is what a runtime that knows nothing of JAX's pytrees or of `Exported` does:
    `arguments` feed the parameters of the module's `main`, one each, in order. (jaxlib's
    client, not a public JAX API: the same calls work on JAX 0.10 and 0.12.)

    **Returns:** the results of `main`, in order, on the host.
    """
    import jax.extend
    from jaxlib import xla_client

    client = jax.extend.backend.get_backend("cpu")
    device = client.local_devices()[0]
    executable = client.compile_and_load(
        module, xla_client.DeviceList((device,)), xla_client.CompileOptions()
    )
    results = executable.execute_sharded([jax.device_put(a, device) for a in arguments])
    return [np.asarray(one[0]) for one in results.disassemble_into_single_device_arrays()]


def call(directory: pathlib.Path) -> None:
    for inputs in sorted(directory.glob("*.npz")):
        name = inputs.name.removesuffix(".npz")
        if name.endswith((".called", ".raw")):
            continue
        with np.load(inputs) as arrays:
            leaves = [arrays[f"arr_{i}"] for i in range(len(arrays.files))]
        exported = export.deserialize(bytearray((directory / f"{name}.jax").read_bytes()))
        called = jax.tree.leaves(exported.call(*leaves))
        np.savez(directory / f"{name}.called.npz", *[np.asarray(out) for out in called])
        raw = run_stablehlo((directory / f"{name}.mlirbc").read_bytes(), leaves)
        np.savez(directory / f"{name}.raw.npz", *raw)
    report = {
        "jax": jax.__version__,
        "calling_conventions": [
            export.minimum_supported_calling_convention_version,
            export.maximum_supported_calling_convention_version,
        ],
        "imported_jaxsparse": "jaxsparse" in sys.modules,
    }
    print(json.dumps(report))


def export_cases(directory: pathlib.Path) -> None:
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    import exporting

    for metadata in sorted(directory.glob("*.json")):
        name = metadata.name.removesuffix(".json")
        side, matrix, dense, cotangent = exporting.load_case(directory, name)
        program = jax.jit(exporting.product_and_gradients(side))
        exported = export.export(program)(matrix, dense, cotangent)
        (directory / f"{name}.jax").write_bytes(exported.serialize())
    print(json.dumps({"jax": jax.__version__}))


if __name__ == "__main__":
    command, directory = sys.argv[1], pathlib.Path(sys.argv[2])
    {"call": call, "export": export_cases}[command](directory)
