"""The workspace of one curator run: a private in-memory copy of one chat's graph where the run's writes are
staged. Every write is applied to the copy at once (checked by the same code that checks a commit), so the
model's next read sees it; the real store changes only when the run ends and commits the staged ops as one
commit. A run that fails or is a dry run simply throws the copy away."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from curator.store.db import Connection
from curator.errors import CuratorError, OpError
from curator.store.commit_log import last_floor
from curator.store.ops import parse_ops
from curator.store.queries import GraphView
from curator.store.scratch import apply_ops, copy_graph
from curator.store.store import Store
from curator.schemas import Schema, TypeSpec
from curator.store.graph import Node


class ToolError(CuratorError):
    """A tool call that cannot be done as asked; the message says why and the hint what to call instead."""


@dataclass
class ToolCall:
    """One tool call of a run, as the trace shows it."""

    name: str
    args: dict[str, Any]
    result: Any
    ok: bool
    ms: float

    def to_dict(self) -> dict[str, Any]:
        return {"tool": self.name, "args": self.args, "ok": self.ok, "ms": round(self.ms, 3), "result": self.result}


@dataclass
class Workspace:
    """What every tool works on: the chat, its schema, the run's floor and cadence step, the staged copy."""

    store: Store
    chat_id: str
    schema: Schema
    conn: Connection
    anchor: int  # the floor this run curates; staged ops are anchored here
    seq: int  # the cadence step: a type is active when seq % extract_every == 0
    active_types: list[str]
    latest_floor: int
    index: Any = None  # a curator.vectors.index.VectorIndex, when the chat has one
    staged: list[dict[str, Any]] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    version: int = 0  # bumped by every staged write (read caches key on it)
    touched: dict[str, int] = field(default_factory=dict)  # node id -> the version that last changed it
    caches: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def open(cls, store: Store, chat_id: str, anchor: int, seq: int, active_types: list[str],
             latest_floor: int | None = None, index: Any = None) -> Workspace:
        """Copy the chat's graph tables into a fresh in-memory database (`curator/store/scratch.py`)."""
        chat = store.chat(chat_id)
        conn = copy_graph(store, chat_id)
        if latest_floor is None:
            latest_floor = max(anchor, last_floor(store, chat_id) or 0)
        return cls(store, chat_id, chat.schema, conn, anchor, seq, list(active_types), latest_floor, index)

    @property
    def graph(self) -> GraphView:
        """Read-only queries over the staged copy (what the store would hold if the run committed now)."""
        return GraphView(self.conn, self.chat_id)

    def stage(self, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Apply `ops` to the copy, all or nothing, and keep them for the run's commit. Raises OpError (for the
        model to read) when an op is invalid; the copy is then as it was. Returns the ops with ids filled in."""
        try:
            parsed = parse_ops(ops)
        except ValidationError as exc:
            err = exc.errors()[0]
            raise OpError(f"{'.'.join(str(p) for p in err['loc'][1:])}: {err['msg']}") from None
        done = apply_ops(self.conn, self.chat_id, self.schema, self.anchor, parsed)
        self.staged.extend(done)
        self.version += 1
        for op in done:
            for node_id in [op.get("id"), *op.get("children", [])] if op["op"] not in ("link", "unlink") else []:
                self.touched[node_id] = self.version
        return done

    def spec(self, type_name: str) -> TypeSpec:
        spec = self.schema.type(type_name)
        if spec is None:
            raise ToolError(f"unknown type {type_name!r}; this chat's types are: {', '.join(self.schema.types)}",
                            "Call memory_schema to see the types and their fields.")
        return spec

    def node(self, node_id: str, type_name: str | None = None, *, active: bool = False) -> Node:
        node = self.graph.get(node_id)
        if node is None:
            raise ToolError(f"node {node_id!r} does not exist",
                            "Use an id from memory_list_candidates, memory_find_by_name or a create_* result.")
        if type_name is not None and node.type != type_name:
            raise ToolError(f"node {node_id!r} is a {node.type!r}, not a {type_name!r}",
                            f"Use the {node.type} tools for it.")
        if active and node.archived:
            raise ToolError(f"node {node_id!r} is archived (folded into {node.parent or 'nothing'})",
                            "Work on its active summary instead.")
        return node

    def close(self) -> None:
        self.conn.close()

