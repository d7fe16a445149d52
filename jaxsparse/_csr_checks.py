"""Checks of known CSR structures on the host, as scipy's constructor makes them, each
pair of index arrays checked once (`_structure_facts`)."""

import numpy as np

from ._base import is_concrete
from ._structure_facts import remembered


def check_known_structure(indices, indptr, shape) -> None:
    """`check_structure_on_host` on every member of known index arrays (a batch shares the
    shape), once per pair of arrays (`_structure_facts`)."""

    def check() -> bool:
        host_indptr = np.asarray(indptr).reshape(-1, shape[0] + 1)
        host_indices = np.asarray(indices).reshape(host_indptr.shape[0], indices.shape[-1])
        for member_indices, member_indptr in zip(host_indices, host_indptr, strict=True):
            check_structure_on_host(member_indices, member_indptr, shape)
        return True

    remembered(indices, indptr, ("valid", shape), check)


def check_structure_on_host(indices: np.ndarray, indptr: np.ndarray, shape) -> None:
    """scipy's structure checks on concrete index arrays, as ValueErrors."""
    m, n = shape
    if indptr[0] != 0:
        raise ValueError(f"`indptr` should start with 0, got indptr[0]={indptr[0]}.")
    if np.any(np.diff(indptr) < 0):
        raise ValueError("`indptr` must be a non-decreasing sequence.")
    if indptr[m] != len(indices):
        raise ValueError(
            f"last value of `indptr` should be nnz={len(indices)}, got indptr[-1]={indptr[m]}."
        )
    if len(indices) and (indices.min() < 0 or indices.max() >= n):
        raise ValueError(
            f"`indices` out of range: column indices must lie in [0, {n}) for shape={shape}, "
            f"got values in [{indices.min()}, {indices.max()}]."
        )


def known_valid(indices, indptr, shape) -> bool:
    """Whether the index arrays are known on the host (not traced) and pass
    `check_known_structure`: operations may then read the values as they are, without the
    run-time check that poisons those of an invalid structure with NaN."""
    if not is_concrete(indices, indptr):
        return False
    try:
        check_known_structure(indices, indptr, shape)
    except ValueError:
        return False
    return True
