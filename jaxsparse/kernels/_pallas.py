"""What the Pallas kernel files share: block sizes, the platform a kernel is built for,
and the batch axis of block specs.

Every Pallas kernel function takes `interpret` and `platform` (the backend table binds
both, `_backend.py`). `platform` is the one whose lowering the tiles are chosen for; `None`
means `"cpu"` (interpret mode) when interpreting, else the first platform the file
compiles for. `"cpu"` always means interpret mode: Pallas has no CPU compiler.
"""

import dataclasses
from typing import Self

import jax.numpy as jnp
from jax.experimental import pallas as pl

INTERPRET_PLATFORM = "cpu"


def is_power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def check_platform(platform: str, platforms: tuple[str, ...]) -> str:
    """`platform`, if it is one of `platforms`; else a `ValueError` naming it."""
    if platform not in platforms:
        raise ValueError(f"{platform=} must be one of {platforms}")
    return platform


def resolve_platform(platform: str | None, interpret: bool, platforms: tuple[str, ...]) -> str:
    """The platform a kernel's tiles are chosen for (see the module docstring).

    **Arguments:**

    - `platform`: the requested one, or `None`.
    - `interpret`: whether the kernel runs in interpret mode.
    - `platforms`: the platforms the kernel file takes, the one it compiles for by default
      first, `"cpu"` (interpret mode) among them.

    **Returns:** the platform, checked against `platforms`.
    """
    if platform is None:
        platform = INTERPRET_PLATFORM if interpret else platforms[0]
    return check_platform(platform, platforms)


def squeezed(batched) -> tuple:
    """Block dimensions for a leading batch axis: one squeezed dimension where the array
    has it (`batched` true, or a non-empty batch shape), else none."""
    return (pl.squeezed,) if batched else ()


def batch_indices(batched: bool, indices) -> tuple:
    """An index map's leading batch indices, for an array with the batch axis; else none."""
    return tuple(indices) if batched else ()


def pad_last_two(array, rows: tuple[int, int], cols: tuple[int, int]):
    """Pad the last two axes (rows, columns) of a possibly batched array."""
    return jnp.pad(array, ((0, 0),) * (array.ndim - 2) + (rows, cols))


def tile(*, minimum: int = 1, power_of_two: bool = True):
    """A field of a `BlockSizes`: `None` (pick the default) or an int at least `minimum`,
    a power of two unless `power_of_two=False`."""
    return dataclasses.field(
        default=None, metadata={"minimum": minimum, "power_of_two": power_of_two}
    )


def switch():
    """A field of a `BlockSizes`: `None` (pick the default), `True` or `False`."""
    return dataclasses.field(default=None, metadata={"switch": True})


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """The base of a kernel file's block sizes: a frozen dataclass whose fields are
    declared with `tile(...)`, checked here. A kernel file subclasses it with its fields and
    a `get_default` classmethod; `None` fields are taken from the default by `filled`."""

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value, rules = getattr(self, field.name), field.metadata
            if value is None:
                continue
            if rules.get("switch"):
                if not isinstance(value, bool):
                    raise TypeError(f"{field.name}={value!r} must be True, False or None")
                continue
            if rules["power_of_two"] and not is_power_of_two(value):
                raise ValueError(f"{field.name}={value} must be a positive power of 2")
            if value < rules["minimum"]:
                raise ValueError(f"{field.name}={value} must be at least {rules['minimum']}")

    def filled_from(self, default: Self) -> Self:
        """These block sizes with each `None` field taken from `default`."""
        return dataclasses.replace(
            self,
            **{
                field.name: getattr(default, field.name)
                for field in dataclasses.fields(self)
                if getattr(self, field.name) is None
            },
        )
