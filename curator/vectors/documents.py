"""The text that stands for a node: what is embedded and searched for it (its document), and for an event the
messages it came from (its source). Kept apart from the vector index so that tools can use it without Chroma."""

from __future__ import annotations

from curator.schemas import Schema

from curator.store.graph import Node


def node_document(node: Node, schema: Schema) -> str:
    """The text embedded for a node: its embedded fields (or all fields if the type marks none), after the title
    when the title says something the fields do not (not for template titles like "Summary 12")."""
    spec = schema.type(node.type)
    names = (spec.embedded_fields or spec.field_names) if spec else tuple(node.fields)
    values = [node.fields[n].strip() for n in names if node.fields.get(n, "").strip()]
    generated = spec is not None and spec.title_template is not None
    if not generated and node.title and not any(node.title in v for v in values):
        values.insert(0, node.title)
    return "\n".join(values)


SOURCE_SPAN = 4  # an event over more floors than this (a summary) has no one source worth scoring
SOURCE_CHARS = 2000


def source_document(node: Node, lines: dict[int, str], event_types: set[str]) -> str:
    """The messages an event came from: its floors and the one before, as "name: text" lines ("" for others)."""
    if node.type not in event_types or node.floor_to - node.floor_from + 1 > SOURCE_SPAN:
        return ""
    floors = range(max(0, node.floor_from - 1), node.floor_to + 1)
    return "\n".join(lines[f] for f in floors if f in lines)[:SOURCE_CHARS]
