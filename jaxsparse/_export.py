"""Sparse matrices in the signatures of `jax.export`ed functions.

`jax.export` writes an exported function's argument and result pytrees into the serialized
artifact, and needs every custom node type registered for that
(`jax.export.register_pytree_node_serialization`). Every format is registered when its
class is defined (`SparseMatrix.__init_subclass__` calls `register_serialization`), under
the name `jaxsparse.<ClassName>`, with its static fields (`shape`, DIA's `offsets`) as JSON
auxiliary data. The arrays (values, CSR index arrays) are pytree leaves, so their shapes
and dtypes, the index dtype included, travel in the artifact's argument and result avals.

Deserializing such an artifact needs these registrations, so the process calling it with
`Exported.call` must `import jaxsparse`. A caller without jaxsparse feeds the flattened
leaves to the module instead (README, "Exporting and calling from elsewhere").
"""

import dataclasses
import json

import jax
from jax import export

# A node rebuilt from its auxiliary data alone gets leaves as its children.
_LEAF = jax.tree.structure(0)


def register_serialization(cls: type) -> None:
    """Register the Equinox module `cls` for `jax.export` serialization.

    **Arguments:**

    - `cls`: a format class whose static fields hold ints and (nested) tuples of ints.
    """

    def serialize_auxdata(aux) -> bytes:
        # `aux` is Equinox's auxiliary data, whose layout is Equinox's business: rebuild the
        # module it describes (with empty leaves) and read the static fields off it.
        dynamic, static = _field_names(cls)
        node = jax.tree_util.PyTreeDef.from_node_data_and_children(
            jax.tree_util.default_registry, (cls, aux), [_LEAF] * len(dynamic)
        )
        matrix = node.unflatten([None] * len(dynamic))
        return json.dumps({name: getattr(matrix, name) for name in static}).encode()

    def deserialize_auxdata(blob: bytes) -> dict:
        metadata = {name: _as_tuples(value) for name, value in json.loads(blob).items()}
        _, static = _field_names(cls)
        if set(metadata) != set(static):
            raise ValueError(
                f"serialized {cls.__name__} has static fields {sorted(metadata)}, but this "
                f"version of jaxsparse expects {sorted(static)}."
            )
        return metadata

    def from_children(metadata: dict, children) -> object:
        # JAX only flattens the result (to rebuild the tree structure) and its leaves are
        # placeholders, so the fields are set as Equinox's own unflattening sets them,
        # without `__init__` and its checks on the arrays.
        dynamic, _ = _field_names(cls)
        matrix = object.__new__(cls)
        for name, value in (*zip(dynamic, children, strict=True), *metadata.items()):
            object.__setattr__(matrix, name, value)
        return matrix

    export.register_pytree_node_serialization(
        cls,
        serialized_name=f"jaxsparse.{cls.__name__}",
        serialize_auxdata=serialize_auxdata,
        deserialize_auxdata=deserialize_auxdata,
        from_children=from_children,
    )


def _field_names(cls) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """`(dynamic, static)` field names of an Equinox module class, in field order (the
    order of its pytree children). Read on use: a class being defined has no fields yet."""
    fields = dataclasses.fields(cls)
    static = tuple(f.name for f in fields if f.metadata.get("static", False))
    dynamic = tuple(f.name for f in fields if not f.metadata.get("static", False))
    return dynamic, static


def _as_tuples(value):
    """JSON's lists back into the tuples they were written from."""
    if isinstance(value, list):
        return tuple(_as_tuples(item) for item in value)
    return value
