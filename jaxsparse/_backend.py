"""Which implementation of a sparse kernel runs where.

A product is traced with a requested backend (`"auto"`, `"pallas"`, `"interpret"` or
`"xla"`) and lowered for a platform (`"cpu"`, `"cuda"`, `"rocm"`, `"tpu"`). The choice of
implementation is made at lowering time, from both, so one traced program lowered for a
GPU runs the Pallas kernels and the same program lowered for the CPU runs XLA:

| requested   | cpu                     | cuda / rocm / tpu         |
|-------------|-------------------------|---------------------------|
| "auto"      | XLA reference           | Pallas kernels (*)        |
| "pallas"    | Pallas, compiled: fails | Pallas kernels (*)        |
| "interpret" | Pallas interpret mode (*) | Pallas interpret mode (*) |
| "xla"       | XLA reference           | XLA reference             |

(*) or the XLA reference for a dtype the kernels cannot take there, as each format's
`pallas_supports` states (complex values, for instance, always run on XLA).

`"pallas"` on CPU is not rerouted: it fails at lowering with Pallas's own message, so a
program never silently runs something other than what was asked for. The environment
variable `JAXSPARSE_BACKEND` replaces `"auto"` (and `None`) for a whole run.
"""

import os

BACKENDS = ("auto", "pallas", "interpret", "xla")
BACKEND_ENV_VAR = "JAXSPARSE_BACKEND"
ACCELERATOR_PLATFORMS = ("cuda", "rocm", "tpu")
PLATFORMS = ("cpu", *ACCELERATOR_PLATFORMS)


def resolve_backend(backend: str | None) -> str:
    """Validate a requested backend; `None` and `"auto"` yield to `JAXSPARSE_BACKEND`."""
    if backend is None:
        backend = "auto"
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"`backend` must be None or one of {BACKENDS}, got {backend!r}.")
    if backend == "auto":
        from_env = os.environ.get(BACKEND_ENV_VAR, "auto")
        if from_env not in BACKENDS:
            raise ValueError(
                f"Environment variable {BACKEND_ENV_VAR} must be one of {BACKENDS}, "
                f"got {from_env!r}."
            )
        return from_env
    return backend


def choose_implementation(backend: str, platform: str, pallas_supports) -> str:
    """The implementation (`"xla"`, `"pallas"` or `"interpret"`) for a lowering.

    **Arguments:**

    - `backend`: a resolved backend name (see `resolve_backend`).
    - `platform`: the platform being lowered for.
    - `pallas_supports`: `platform -> bool`, whether the format's Pallas kernels take the
      operands' dtype on that platform (`"cpu"` standing for interpret mode).
    """
    if backend == "xla":
        return "xla"
    if backend == "interpret":
        return "interpret" if pallas_supports("cpu") else "xla"
    if backend == "auto" and platform not in ACCELERATOR_PLATFORMS:
        return "xla"
    if platform in ACCELERATOR_PLATFORMS and not pallas_supports(platform):
        return "xla"
    return "pallas"
