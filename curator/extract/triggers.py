"""Extraction on what happens, not only on cadence: a type that `seq % extract_every` skips this step is still
extracted when the newest reply names one of its known entities (name or alias) or one of its trigger keywords
(schema field `trigger_keywords`), so a place that changes between its active turns is not missed."""

from __future__ import annotations

import re

from curator.cjk import has_cjk
from curator.schemas import Schema

from curator.store.graph import normalize_name
from curator.store.queries import GraphView


def active_types(schema: Schema, graph: GraphView, seq: int, reply: str) -> list[str]:
    """The types extracted at step `seq` given the newest reply's text, in schema order."""
    due = {name for name, spec in schema.types.items() if spec.extracted and seq % spec.extract_every == 0}
    skipped = [name for name, spec in schema.types.items() if name not in due and spec.extracted]
    return [name for name in schema.types if name in due or (name in skipped and triggered(schema, graph, name, reply))]


def triggered(schema: Schema, graph: GraphView, type_name: str, reply: str) -> bool:
    """Does `reply` name a known entity of the type, or one of its trigger keywords?"""
    spec = schema.types[type_name]
    text = normalize_name(reply)
    if any(_contains(text, normalize_name(k)) for k in spec.trigger_keywords if k.strip()):
        return True
    if spec.identity == "event":
        return False
    return any(_contains(text, name) for name in known_names(graph, type_name))


def known_names(graph: GraphView, type_name: str) -> list[str]:
    """The normalized names and aliases of the type's active nodes."""
    return graph.names_of_type(type_name)


def _contains(text: str, word: str) -> bool:
    if not word:
        return False
    if has_cjk(word):
        return word in text
    return re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text) is not None
