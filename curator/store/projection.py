"""Applying ops to the graph tables, checking each against the schema, and capturing what undoes them.

The undo record of a commit is, for every row the commit touched, that row as it was before the commit
(or None when the commit created it). Restoring those rows reverts the commit exactly, whatever its ops did.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

from curator.store.db import Connection
from curator.schemas import Schema, TypeSpec

from curator.errors import OpError
from curator.store.graph import EDGE_COLUMNS, NODE_COLUMNS, names_of, row_dict
from curator.store.ops import (
    ArchiveNode,
    Compact,
    CreateNode,
    DeleteNode,
    Link,
    Scope,
    StoryTime,
    Unlink,
    UpdateNode,
    new_edge_id,
    new_node_id,
)

_ID = re.compile(r"^[A-Za-z0-9_.:\-]{1,64}$")
UndoRecord = list[list[Any]]  # [["n" | "e", id, row-before or None], ...]



def _upsert(table: str, columns: tuple[str, ...]) -> str:
    """Insert a row, or overwrite the one with the same (chat_id, id): the same statement on both engines."""
    return (f"INSERT INTO {table} (chat_id, {', '.join(columns)}) VALUES (?{', ?' * len(columns)}) "
            f"ON CONFLICT (chat_id, id) DO UPDATE SET "
            + ", ".join(f"{c} = excluded.{c}" for c in columns if c != "id"))


_PUT_NODE = _upsert("nodes", NODE_COLUMNS)
_PUT_EDGE = _upsert("edges", EDGE_COLUMNS)

class Applier:
    """Applies ops for one commit inside an open transaction; the caller commits or rolls back."""

    def __init__(self, conn: Connection, chat_id: str, schema: Schema, anchor_floor: int, at: str) -> None:
        self.conn, self.chat_id, self.schema = conn, chat_id, schema
        self.anchor, self.at = anchor_floor, at
        self._before: dict[tuple[str, str], dict[str, Any] | None] = {}
        self.touched_nodes: set[str] = set()  # what this applier wrote (and edges' ends): derived state follows
        self.touched_edges: set[str] = set()

    # ---- public -------------------------------------------------------------------------------
    def apply(self, ops: list[Any]) -> list[Any]:
        """Apply ops in order; returns them normalized (generated ids filled in) for the commit log."""
        done = []
        for index, op in enumerate(ops):
            try:
                done.append(getattr(self, "_" + op.op)(op))
            except OpError as exc:
                raise OpError(exc.reason, index=index, hint=exc.hint or None) from None
        return done

    def undo_record(self) -> UndoRecord:
        return [[kind, key, before] for (kind, key), before in self._before.items()]

    # ---- row helpers --------------------------------------------------------------------------
    def node_row(self, node_id: str) -> dict[str, Any] | None:
        row = self.conn.execute(
            f"SELECT {', '.join(NODE_COLUMNS)} FROM nodes WHERE chat_id=? AND id=?", (self.chat_id, node_id)
        ).fetchone()
        return row_dict(row, NODE_COLUMNS)

    def _edge_row(self, where: str, params: tuple[Any, ...]) -> dict[str, Any] | None:
        row = self.conn.execute(
            f"SELECT {', '.join(EDGE_COLUMNS)} FROM edges WHERE chat_id=? AND {where}", (self.chat_id, *params)
        ).fetchone()
        return row_dict(row, EDGE_COLUMNS)

    def _touch(self, kind: str, key: str, current: dict[str, Any] | None) -> None:
        self._before.setdefault((kind, key), None if current is None else dict(current))

    def put_node(self, row: dict[str, Any]) -> None:
        self.touched_nodes.add(row["id"])
        self.conn.execute(_PUT_NODE, (self.chat_id, *(row[c] for c in NODE_COLUMNS)))
        self.conn.execute("DELETE FROM node_names WHERE chat_id=? AND node_id=?", (self.chat_id, row["id"]))
        self.conn.executemany(
            "INSERT INTO node_names (chat_id, name, node_id) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
            [(self.chat_id, name, row["id"]) for name in self._names(row)],
        )

    def drop_node(self, node_id: str) -> None:
        self.touched_nodes.add(node_id)
        self.conn.execute("DELETE FROM nodes WHERE chat_id=? AND id=?", (self.chat_id, node_id))
        self.conn.execute("DELETE FROM node_names WHERE chat_id=? AND node_id=?", (self.chat_id, node_id))

    def put_edge(self, row: dict[str, Any]) -> None:
        self.touched_edges.add(row["id"])
        self.touched_nodes.update((row["source"], row["target"]))
        # SQLite's INSERT OR REPLACE also dropped another edge holding the same (source, target, relation), as a
        # restore can meet midway; one ON CONFLICT target can't say that, so the delete says it.
        self.conn.execute("DELETE FROM edges WHERE chat_id=? AND source=? AND target=? AND relation=? AND id<>?",
                          (self.chat_id, row["source"], row["target"], row["relation"], row["id"]))
        self.conn.execute(_PUT_EDGE, (self.chat_id, *(row[c] for c in EDGE_COLUMNS)))

    def drop_edge(self, edge_id: str) -> None:
        self.touched_edges.add(edge_id)
        self.conn.execute("DELETE FROM edges WHERE chat_id=? AND id=?", (self.chat_id, edge_id))

    def restore(self, undo: UndoRecord) -> None:
        """Put every row an earlier commit touched back as it was before that commit."""
        for kind, key, before in undo:
            if kind == "n":
                self.put_node(before) if before else self.drop_node(key)
            else:
                self.put_edge(before) if before else self.drop_edge(key)

    def _names(self, row: dict[str, Any]) -> set[str]:
        return names_of(row["title"], json.loads(row["fields_json"]), self.schema.type(row["type"]))

    # ---- checks -------------------------------------------------------------------------------
    def _spec(self, type_name: str) -> TypeSpec:
        spec = self.schema.type(type_name)
        if spec is None:
            known = ", ".join(self.schema.types)
            raise OpError(f"unknown type {type_name!r}; this chat's schema has: {known}")
        return spec

    def _existing(self, node_id: str, role: str = "node") -> dict[str, Any]:
        row = self.node_row(node_id)
        if row is None:
            raise OpError(f"{role} {node_id!r} does not exist")
        return row

    def _check_fields(self, spec: TypeSpec, names: list[str] | dict[str, Any], *, clearing: bool = False) -> None:
        unknown = [n for n in names if n not in spec.field_names]
        if unknown:
            raise OpError(
                f"unknown field(s) {', '.join(map(repr, unknown))} for type {spec.name!r}; "
                f"its fields are: {', '.join(spec.field_names)}"
            )
        if clearing:
            required = [n for n in names if n in spec.required_fields]
            if required:
                raise OpError(f"cannot clear required field(s) of {spec.name!r}: {', '.join(required)}")

    def _check_required(self, spec: TypeSpec, fields: dict[str, str]) -> None:
        missing = [n for n in spec.required_fields if not fields.get(n, "").strip()]
        if missing:
            raise OpError(f"type {spec.name!r} requires field(s): {', '.join(missing)}")

    def _new_id(self, given: str | None, make: Callable[[], str], exists: Callable[[str], object]) -> str:
        if given is None:
            return make()
        if not _ID.match(given):
            raise OpError(f"id {given!r} must be 1-64 characters of letters, digits and _ . : -")
        if exists(given):
            raise OpError(f"id {given!r} is already taken")
        return given

    def _title(self, spec: TypeSpec, title: str | None, fields: dict[str, str]) -> str:
        title = (title or (fields.get(spec.title_field, "") if spec.title_field else "")).strip()
        if not title:
            raise OpError(f"a {spec.name!r} node needs a title (the type has no title_field to take it from)")
        return title

    @staticmethod
    def _floors(floor_from: int, floor_to: int) -> None:
        if floor_from > floor_to:
            raise OpError(f"floor range {floor_from}-{floor_to} runs backwards")

    # ---- ops ----------------------------------------------------------------------------------
    def _create_node(self, op: CreateNode) -> CreateNode:
        spec = self._spec(op.type)
        self._check_fields(spec, op.fields)
        self._check_required(spec, op.fields)
        node_id = self._new_id(op.id, new_node_id, self.node_row)
        if op.parent is not None:
            self._existing(op.parent, "parent")
        floor_from = self.anchor if op.floor_from is None else op.floor_from
        floor_to = op.floor_to if op.floor_to is not None else floor_from
        self._floors(floor_from, floor_to)
        scope, story = op.scope or Scope(), op.story_time or StoryTime()
        row = {
            "id": node_id, "type": op.type, "title": self._title(spec, op.title, op.fields),
            "fields_json": _json_fields(op.fields), "level": op.level, "parent_id": op.parent,
            "floor_from": floor_from, "floor_to": floor_to, "importance": op.importance,
            "access_count": op.access_count, "last_access": None, "archived": int(op.archived),
            "scope_layer": scope.layer, "scope_owner": scope.owner, "scope_region": scope.region,
            "story_label": story.label, "story_segment": story.segment,
            "created_at": op.created_at or self.at, "updated_at": op.updated_at or self.at,
        }
        self._touch("n", node_id, None)
        self.put_node(row)
        return op if op.id else op.model_copy(update={"id": node_id})

    def _update_node(self, op: UpdateNode) -> UpdateNode:
        row = self._existing(op.id)
        spec = self._spec(row["type"])
        self._check_fields(spec, op.set_fields)
        self._check_fields(spec, op.clear_fields, clearing=True)
        new = dict(row)
        fields = json.loads(row["fields_json"])
        fields.update(op.set_fields)
        for name in op.clear_fields:
            fields.pop(name, None)
        self._check_required(spec, fields)
        new["fields_json"] = _json_fields(fields)
        if op.title is not None:
            new["title"] = self._title(spec, op.title, fields)
        elif spec.title_field and spec.title_field in op.set_fields:
            new["title"] = self._title(spec, None, fields)
        if "parent" in op.model_fields_set:
            self._check_parent(op.id, op.parent)
            new["parent_id"] = op.parent
        for name in ("level", "floor_from", "floor_to", "importance"):
            if getattr(op, name) is not None:
                new[name] = getattr(op, name)
        self._floors(new["floor_from"], new["floor_to"])
        if op.scope is not None:
            new.update(scope_layer=op.scope.layer, scope_owner=op.scope.owner, scope_region=op.scope.region)
        if op.story_time is not None:
            new.update(story_label=op.story_time.label, story_segment=op.story_time.segment)
        new["updated_at"] = self.at
        self._touch("n", op.id, row)
        self.put_node(new)
        return op

    def _check_parent(self, node_id: str, parent: str | None) -> None:
        seen = {node_id}
        while parent is not None:
            if parent in seen:
                raise OpError(f"making {node_id!r} a child of that parent would create a cycle")
            seen.add(parent)
            parent = self._existing(parent, "parent")["parent_id"]

    def _archive_node(self, op: ArchiveNode) -> ArchiveNode:
        row = self._existing(op.id)
        self._touch("n", op.id, row)
        self.put_node({**row, "archived": int(op.archived), "updated_at": self.at})
        return op

    def _delete_node(self, op: DeleteNode) -> DeleteNode:
        row = self._existing(op.id)
        for edge in self._incident_edges(op.id):
            self._touch("e", edge["id"], edge)
            self.drop_edge(edge["id"])
        for child_id in self._child_ids(op.id):
            child = self.node_row(child_id)
            if child is None:
                continue
            self._touch("n", child_id, child)
            self.put_node({**child, "parent_id": None, "updated_at": self.at})
        self._touch("n", op.id, row)
        self.drop_node(op.id)
        return op

    def _incident_edges(self, node_id: str) -> list[dict[str, Any]]:
        rows = self.conn.execute(
            f"SELECT {', '.join(EDGE_COLUMNS)} FROM edges WHERE chat_id=? AND (source=? OR target=?) ORDER BY id",
            (self.chat_id, node_id, node_id),
        ).fetchall()
        return [{c: r[c] for c in EDGE_COLUMNS} for r in rows]

    def _child_ids(self, node_id: str) -> list[str]:
        rows = self.conn.execute(
            "SELECT id FROM nodes WHERE chat_id=? AND parent_id=? ORDER BY id", (self.chat_id, node_id)
        ).fetchall()
        return [r[0] for r in rows]

    def _relation(self, name: str, source: str, target: str) -> tuple[str, str]:
        relation = self.schema.relation(name)
        if relation is None:
            known = ", ".join(r.name for r in self.schema.relations)
            raise OpError(f"unknown relation {name!r}; this chat's schema has: {known}")
        if relation.symmetric and source > target:
            source, target = target, source
        return source, target

    def _link(self, op: Link) -> Link:
        self._existing(op.source, "source node")
        self._existing(op.target, "target node")
        if op.source == op.target:
            raise OpError("an edge cannot link a node to itself")
        source, target = self._relation(op.relation, op.source, op.target)
        if op.valid_from is not None and op.valid_to is not None:
            self._floors(op.valid_from, op.valid_to)
        current = self._edge_row("source=? AND target=? AND relation=?", (source, target, op.relation))
        if current is not None:
            if op.id is not None and op.id != current["id"]:
                raise OpError(f"that edge already exists as {current['id']!r}")
            row = {**current, "strength": op.strength, "valid_from": op.valid_from, "valid_to": op.valid_to,
                   "updated_at": self.at}
            edge_id = current["id"]
        else:
            edge_id = self._new_id(op.id, new_edge_id, lambda e: self._edge_row("id=?", (e,)))
            row = {"id": edge_id, "source": source, "target": target, "relation": op.relation,
                   "strength": op.strength, "valid_from": op.valid_from, "valid_to": op.valid_to,
                   "created_at": op.created_at or self.at, "updated_at": op.updated_at or self.at}
        self._touch("e", edge_id, current)
        self.put_edge(row)
        return op.model_copy(update={"id": edge_id, "source": source, "target": target})

    def _unlink(self, op: Unlink) -> Unlink:
        if op.id is not None:
            current = self._edge_row("id=?", (op.id,))
            what = repr(op.id)
        elif op.source and op.target and op.relation:
            source, target = self._relation(op.relation, op.source, op.target)
            current = self._edge_row("source=? AND target=? AND relation=?", (source, target, op.relation))
            what = f"{op.source} -{op.relation}-> {op.target}"
        else:
            raise OpError("unlink needs an edge id, or source, target and relation")
        if current is None:
            raise OpError(f"edge {what} does not exist")
        self._touch("e", current["id"], current)
        self.drop_edge(current["id"])
        return op

    def _compact(self, op: Compact) -> Compact:
        spec = self._spec(op.type)
        self._check_fields(spec, op.fields)
        self._check_required(spec, op.fields)
        if len(set(op.children)) != len(op.children):
            raise OpError("children are listed more than once")
        children = [self._existing(c, "child") for c in op.children]
        for child in children:
            if child["type"] != op.type:
                raise OpError(f"child {child['id']!r} is a {child['type']!r}, not a {op.type!r}")
            if child["archived"]:
                raise OpError(f"child {child['id']!r} is archived; compact only active nodes")
        summary_id = self._new_id(op.id, new_node_id, self.node_row)
        first = min(children, key=lambda c: (c["floor_from"], c["id"]))
        same_scope = len({(c["scope_layer"], c["scope_owner"]) for c in children}) == 1  # one point of view
        same_region = same_scope and len({c["scope_region"] for c in children}) == 1
        row = {
            "id": summary_id, "type": op.type, "title": self._title(spec, op.title, op.fields),
            "fields_json": _json_fields(op.fields), "level": max(c["level"] for c in children) + 1,
            "parent_id": None, "floor_from": min(c["floor_from"] for c in children),
            "floor_to": max(c["floor_to"] for c in children), "importance": max(c["importance"] for c in children),
            "access_count": 0, "last_access": None, "archived": 0,
            "scope_layer": first["scope_layer"] if same_scope else "objective",
            "scope_owner": first["scope_owner"] if same_scope else None,
            "scope_region": first["scope_region"] if same_region else None,
            "story_label": first["story_label"], "story_segment": first["story_segment"],
            "created_at": self.at, "updated_at": self.at,
        }
        self._touch("n", summary_id, None)
        self.put_node(row)
        members = set(op.children)
        for child in children:
            self._touch("n", child["id"], child)
            self.put_node({**child, "parent_id": summary_id, "archived": 1, "updated_at": self.at})
            for edge in self._incident_edges(child["id"]):
                self._touch("e", edge["id"], edge)
                self.drop_edge(edge["id"])
                other = edge["target"] if edge["source"] == child["id"] else edge["source"]
                if other not in members:  # outside edges move up to the summary; inside ones go
                    self._move_edge(edge, child["id"], summary_id)
        return op if op.id else op.model_copy(update={"id": summary_id})

    def _move_edge(self, edge: dict[str, Any], old: str, new: str) -> None:
        source = new if edge["source"] == old else edge["source"]
        target = new if edge["target"] == old else edge["target"]
        relation = self.schema.relation(edge["relation"])
        if relation is not None and relation.symmetric and source > target:
            source, target = target, source
        current = self._edge_row("source=? AND target=? AND relation=?", (source, target, edge["relation"]))
        if current is not None:  # the summary already has this link from another child: keep the stronger
            self._touch("e", current["id"], current)
            self.put_edge({**current, "strength": max(current["strength"], edge["strength"]), "updated_at": self.at})
            return
        # Derived from the moved edge and the summary, so replaying the commit yields the same id.
        edge_id = "e_" + hashlib.blake2b(f"{edge['id']}>{new}".encode(), digest_size=6).hexdigest()
        self._touch("e", edge_id, None)
        self.put_edge({**edge, "id": edge_id, "source": source, "target": target, "updated_at": self.at})


def _json_fields(fields: dict[str, str]) -> str:
    return json.dumps(fields, ensure_ascii=False, sort_keys=True)
