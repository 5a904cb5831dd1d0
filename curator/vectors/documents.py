"""The text that stands for a node: what is embedded and searched for it (its document), and for an event the
messages it came from (its source). Kept apart from the vector index so that tools can use it without Chroma."""

from __future__ import annotations

import re

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
EMBEDDED_SOURCE_WEIGHT = 512  # what of a source is embedded: about 128 tokens (a CJK character weighs 4)
MESSAGE_WEIGHT = 256  # what of one message is embedded: about 64 tokens, the share a message had in a source


def source_document(node: Node, lines: dict[int, str], event_types: set[str]) -> str:
    """The messages an event came from: its floors and the one before, as "name: text" lines ("" for others)."""
    return "\n".join(lines[f] for f in source_floors(node, lines, event_types))[:SOURCE_CHARS]


def source_floors(node: Node, lines: dict[int, str], event_types: set[str]) -> list[int]:
    """The floors of an event's source messages (its floors and the one before); none for other nodes."""
    if node.type not in event_types or node.floor_to - node.floor_from + 1 > SOURCE_SPAN:
        return []
    return [f for f in range(max(0, node.floor_from - 1), node.floor_to + 1) if f in lines]


def message_document(line: str) -> str:
    """What is embedded of one message (`vectors/messages.py`): its start, near 64 tokens."""
    return embedded_source(line, MESSAGE_WEIGHT)


_WIDE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")


def embedded_source(source: str, budget: int = EMBEDDED_SOURCE_WEIGHT) -> str:
    """The part of a source that is embedded: the start of each of its messages, an equal share of about 128
    tokens each (a share one message leaves unused goes to the others). BM25 still reads the whole source; the
    embedding of ~600 tokens (two model windows, quadratic attention) cost 10x more and said little more."""
    lines = source.split("\n")
    out, left = [], budget
    for position, line in enumerate(lines):
        share = left // (len(lines) - position)
        cut, used = 0, 0
        for cut, char in enumerate(line, 1):
            used += 4 if _WIDE.match(char) else 1
            if used > share:
                cut -= 1
                used -= 4 if _WIDE.match(char) else 1
                break
        else:
            cut = len(line)
        out.append(line[:cut])
        left -= used
    return "\n".join(out)
