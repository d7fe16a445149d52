"""The argument checks every DIA kernel family shares (Triton, Mosaic GPU, the TPU window
kernels): static offsets, and the shapes, batch axes and dtypes of a product's arrays
(`_primitive.py`, "Batches")."""


def check_offsets(offsets) -> None:
    """Offsets must be distinct Python ints (static: the kernels unroll or tabulate them)."""
    if not all(isinstance(off, int) for off in offsets):
        raise ValueError(f"`offsets` must be a tuple of Python ints, got {offsets!r}")
    if len(set(offsets)) != len(offsets):
        raise ValueError(f"`offsets` contains duplicate values: {offsets!r}")


def check_product(data, operand, name: str, offsets, shape, operand_rows: int) -> tuple:
    """Check `data` (`(ndiag, n)` or `(B, ndiag, n)`) and a dense operand `name` of
    `operand_rows` rows (`(rows, k)`, or `(B, rows, k)` with batched `data`).

    **Returns:** the batch shape, `()` or `(B,)`.
    """
    check_offsets(offsets)
    n = shape[1]
    if data.ndim not in (2, 3) or data.shape[-2:] != (len(offsets), n):
        raise ValueError(
            f"`data` has shape {data.shape}; expected (len(offsets), n) or "
            f"(B, len(offsets), n) for {shape=}"
        )
    if operand.ndim not in (2, 3) or operand.shape[-2] != operand_rows:
        raise ValueError(f"`{name}` has shape {operand.shape}; expected ({operand_rows}, k)")
    if operand.ndim == 3 and (data.ndim != 3 or operand.shape[0] != data.shape[0]):
        raise ValueError(f"a batched `{name}` ({operand.shape}) needs `data` of its batch size")
    if data.dtype != operand.dtype:
        raise TypeError(f"`data` ({data.dtype}) and `{name}` ({operand.dtype}) must share a dtype")
    return data.shape[:-2]


def check_sddmm(g, x, offsets, shape) -> tuple:
    """Check the data gradient's `g` (`(m, k)` or `(B, m, k)`) and `x` (`(n, k)` or
    `(B, n, k)`); a 2-D one is shared by the batch.

    **Returns:** the batch shape, `()` or `(B,)`.
    """
    check_offsets(offsets)
    m, n = shape
    if g.ndim not in (2, 3) or g.shape[-2] != m:
        raise ValueError(f"`g` has shape {g.shape}; expected ({m}, k) or (B, {m}, k)")
    if x.ndim not in (2, 3) or x.shape[-2:] != (n, g.shape[-1]):
        raise ValueError(f"`x` has shape {x.shape}; expected ({n}, {g.shape[-1]}) or (B, ...)")
    if g.ndim == x.ndim == 3 and g.shape[0] != x.shape[0]:
        raise ValueError(f"`g` ({g.shape}) and `x` ({x.shape}) must have one batch size")
    if g.dtype != x.dtype:
        raise TypeError(f"`g` ({g.dtype}) and `x` ({x.dtype}) must share a dtype")
    return g.shape[:-2] or x.shape[:-2]
