"""Implementations of the sparse products, one format on one implementation family per file.

They take plain arrays and static Python ints, never Equinox modules, and every
implementation of one product shares its signature (see `jaxsparse._primitive`).
"""
