"""Nodes and edges as the engine hands them out, and their mapping to and from table rows."""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from curator.store.db import Row

if TYPE_CHECKING:
    from curator.schemas import TypeSpec

_SPACES = re.compile(r"\s+")
_ALIAS_SPLIT = re.compile(r"[,，、;；/|\n]+")


def normalize_name(text: str) -> str:
    """How names are compared: Unicode-normalized, trimmed, inner spaces folded, case-folded."""
    return _SPACES.sub(" ", unicodedata.normalize("NFKC", text)).strip().casefold()


def split_aliases(text: str) -> list[str]:
    """An alias field holds several names separated by commas (Latin or CJK), semicolons, slashes or lines."""
    return [part for part in (p.strip() for p in _ALIAS_SPLIT.split(text)) if part]


def names_of(title: str, fields: dict[str, str], spec: TypeSpec | None) -> set[str]:
    """The names a node answers to, normalized: its title, its type's primary-key fields and its aliases (`spec`,
    the type's schema entry; None: the title alone). The store's `node_names` and recall's state both use it."""
    names = {normalize_name(title)}
    if spec:
        for name in spec.primary_key:
            names.add(normalize_name(fields.get(name, "")))
        for name in spec.alias_fields:
            names.update(normalize_name(a) for a in split_aliases(fields.get(name, "")))
    names.discard("")
    return names


@dataclass
class Node:
    id: str
    type: str
    title: str
    fields: dict[str, str]
    level: int
    parent: str | None
    floor_from: int
    floor_to: int
    importance: float
    access_count: int
    last_access: str | None
    archived: bool
    scope: dict[str, Any]
    story_time: dict[str, Any]
    created_at: str
    updated_at: str
    children: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        # A shallow copy of each container: dataclasses.asdict deep-copies and costs 6x more on big exports.
        data = dict(self.__dict__)
        for key in ("fields", "scope", "story_time"):
            data[key] = dict(data[key])
        data["children"] = list(self.children)
        return data


@dataclass
class Edge:
    id: str
    source: str
    target: str
    relation: str
    strength: float
    valid_from: int | None
    valid_to: int | None
    created_at: str
    updated_at: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


NODE_COLUMNS = (
    "id", "type", "title", "fields_json", "level", "parent_id", "floor_from", "floor_to", "importance",
    "access_count", "last_access", "archived", "scope_layer", "scope_owner", "scope_region", "story_label",
    "story_segment", "created_at", "updated_at",
)
EDGE_COLUMNS = ("id", "source", "target", "relation", "strength", "valid_from", "valid_to", "created_at", "updated_at")


def node_from_row(row: Row | dict[str, Any], children: list[str] | None = None) -> Node:
    return Node(
        id=row["id"],
        type=row["type"],
        title=row["title"],
        fields=json.loads(row["fields_json"]),
        level=row["level"],
        parent=row["parent_id"],
        floor_from=row["floor_from"],
        floor_to=row["floor_to"],
        importance=row["importance"],
        access_count=row["access_count"],
        last_access=row["last_access"],
        archived=bool(row["archived"]),
        scope={"layer": row["scope_layer"], "owner": row["scope_owner"], "region": row["scope_region"]},
        story_time={"label": row["story_label"], "segment": row["story_segment"]},
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        children=children or [],
    )


def edge_from_row(row: Row | dict[str, Any]) -> Edge:
    return Edge(**{c: row[c] for c in EDGE_COLUMNS})


def row_dict(row: Row | None, columns: tuple[str, ...]) -> dict[str, Any] | None:
    return None if row is None else {c: row[c] for c in columns}
