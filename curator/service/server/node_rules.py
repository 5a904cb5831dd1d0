"""What the API refuses when nodes are created or edited by hand, as the agent's write tools do: a second entity
with a name (or alias) another node of its type already has, a rename onto a taken name, an empty title."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from curator.errors import CuratorError
from curator.store.graph import split_aliases

if TYPE_CHECKING:
    from curator.schemas import Schema
    from curator.store.queries import GraphView


class NameTaken(CuratorError):
    """Another node of the type already has this name."""


def check_title(title: str | None) -> None:
    if title is not None and not title.strip():
        raise CuratorError("the title is empty", "Give a title with some text, or leave `title` out.")


def check_names(graph: GraphView, schema: Schema, type_name: str, values: dict[str, Any],
                exclude_id: str | None = None) -> None:
    """Refuse names (primary key values and aliases) of an entity type that another node of the type has."""
    spec = schema.types.get(type_name)
    if spec is None or spec.identity != "entity":
        return
    names = [values[k] for k in spec.primary_key if isinstance(values.get(k), str) and values[k].strip()]
    names += [a for f in spec.alias_fields if isinstance(values.get(f), str) for a in split_aliases(values[f])]
    for name in names:
        for node in graph.find_by_name(name, [type_name]):
            if node.id != exclude_id:
                raise NameTaken(f"a {type_name} named {name!r} exists already: {node.id} ({node.title!r})",
                                f"Edit {node.id} instead (PATCH .../nodes/{node.id}), or choose another name.")
