"""Graph export and import (`memory-curator/graph` JSON).

Import reads and checks the whole file before touching the store, then lands as one commit (origin
`import`), so a bad file changes nothing and a good one can be rolled back like any other commit.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from curator.schemas import Schema, SchemaError, schema_from_data

from curator.errors import ChatExists, CuratorError, ImportFileError, OpError
from curator.store.messages import latest_assistant_floor
from curator.store.ops import CreateNode, Link, Scope, StoryTime
from curator.store.store import CommitRecord, Store
from curator.textfile import read_utf8

FORMAT = "memory-curator/graph"
VERSION = 1
MAX_IMPORT_BYTES = 64 * 1024 * 1024
MAX_IMPORT_NODES = 200_000
ImportMode = Literal["restore", "bind_latest", "bind_floor"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NodeRecord(_Strict):
    id: str
    type: str
    title: str
    fields: dict[str, str] = {}
    level: int = Field(default=0, ge=0)
    parent: str | None = None
    children: list[str] = []  # informative; the parent links are what counts
    floor_from: int = Field(ge=0)
    floor_to: int = Field(ge=0)
    importance: float = Field(default=5.0, ge=0, le=10)
    access_count: int = Field(default=0, ge=0)
    last_access: str | None = None
    archived: bool = False
    scope: Scope = Scope()
    story_time: StoryTime = StoryTime()
    created_at: str | None = None
    updated_at: str | None = None


class EdgeRecord(_Strict):
    id: str
    source: str
    target: str
    relation: str
    strength: float = Field(default=0.8, ge=0, le=1)
    valid_from: int | None = Field(default=None, ge=0)
    valid_to: int | None = Field(default=None, ge=0)
    created_at: str | None = None
    updated_at: str | None = None


class GraphFile(_Strict):
    format: Literal["memory-curator/graph"]
    version: int
    exported_at: str | None = None
    chat: dict[str, Any] = {}
    schema_: dict[str, Any] = Field(alias="schema")
    nodes: list[NodeRecord]
    edges: list[EdgeRecord] = []


# ---- export ---------------------------------------------------------------------------------------
def export_graph(store: Store, chat_id: str) -> dict[str, Any]:
    """The chat's whole graph (active and archived nodes, edges) with its schema; no vectors."""
    chat = store.chat(chat_id)
    graph = store.graph(chat_id)
    messages = store.messages(chat_id)
    nodes = graph.nodes(archived=None)
    nodes.sort(key=lambda n: (n.floor_from, n.level, n.created_at, n.id))
    return {
        "format": FORMAT,
        "version": VERSION,
        "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "chat": {"id": chat_id, "floors": len(messages), "latest_assistant_floor": latest_assistant_floor(messages)},
        "schema": chat.schema.to_data(),
        "nodes": [_node_record(n.to_dict()) for n in nodes],
        "edges": [e.to_dict() for e in graph.edges()],
    }


def _node_record(node: dict[str, Any]) -> dict[str, Any]:
    node.pop("last_access", None)  # recall bookkeeping, not memory
    return node


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, indent=2) + "\n"


# ---- import ---------------------------------------------------------------------------------------
def read_graph_file(path: str | Path, max_bytes: int = MAX_IMPORT_BYTES) -> tuple[GraphFile, Schema, str]:
    """Read and check a graph file; raises ImportFileError naming the line, node or field at fault."""
    path = Path(path)
    return parse_graph(read_utf8(path, max_bytes, ImportFileError, "import",
                                 "Raise the limit with --max-bytes if the file is trusted."), str(path))


_CHAT_HINT = "This is a chat file, not a graph: load chats with `curator ingest FILE --chat ID`; nothing was imported."


def _looks_like_chat(text: str) -> bool:
    """A SillyTavern .jsonl or plain JSONL chat given where a graph file belongs."""
    try:
        first = json.loads(text.lstrip().split("\n", 1)[0])
    except json.JSONDecodeError:
        return False
    return isinstance(first, dict) and bool({"mes", "user_name", "chat_metadata", "role"} & set(first))


def parse_graph(text: str, source: str = "<graph>") -> tuple[GraphFile, Schema, str]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ImportFileError(f"{source}, line {exc.lineno}, column {exc.colno}: not valid JSON: {exc.msg}",
                              _CHAT_HINT if _looks_like_chat(text) else None) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ImportFileError(f"{source}: not a {FORMAT} file (its 'format' must be {FORMAT!r})",
                              _CHAT_HINT if _looks_like_chat(text) else None)
    if not isinstance(data.get("version"), int) or data["version"] > VERSION:
        raise ImportFileError(f"{source}: graph format version {data.get('version')!r} is not supported "
                              f"(this package reads up to {VERSION})", "Upgrade memory-curator to import it.")
    if isinstance(data.get("nodes"), list) and len(data["nodes"]) > MAX_IMPORT_NODES:
        raise ImportFileError(f"{source}: {len(data['nodes'])} nodes is over the limit of {MAX_IMPORT_NODES}")
    try:
        graph = GraphFile.model_validate(data)
    except ValidationError as exc:
        raise ImportFileError(_describe(exc, data, text, source)) from None
    try:
        schema = schema_from_data(graph.schema_, f"{source} (schema)")
    except SchemaError as exc:
        raise ImportFileError(str(exc)) from None
    _check_references(graph, schema, text, source)
    return graph, schema, source


def _describe(exc: ValidationError, data: dict[str, Any], text: str, source: str) -> str:
    lines = []
    for err in exc.errors()[:10]:
        loc = list(err["loc"])
        where = ".".join(str(p) for p in loc)
        if len(loc) >= 2 and loc[0] in ("nodes", "edges") and isinstance(loc[1], int):
            item = data[loc[0]][loc[1]]
            item_id = item.get("id") if isinstance(item, dict) else None
            rest = ".".join(str(p) for p in loc[2:]) or "(the whole entry)"
            what = f"{loc[0][:-1]} {item_id!r}" if item_id else f"{loc[0][:-1]} #{loc[1] + 1}"
            where = f"{what}{_line(text, item_id)}, {rest}"
        lines.append(f"{source}: {where}: {err['msg']}")
    if len(exc.errors()) > 10:
        lines.append(f"... and {len(exc.errors()) - 10} more")
    return "\n".join(lines)


def _line(text: str, item_id: str | None) -> str:
    if not item_id:
        return ""
    match = re.search(r'"id"\s*:\s*' + re.escape(json.dumps(item_id, ensure_ascii=False)), text)
    return f" (line {text.count(chr(10), 0, match.start()) + 1})" if match else ""


def _check_references(graph: GraphFile, schema: Schema, text: str, source: str) -> None:
    problems: list[str] = []

    def problem(kind: str, item_id: str, message: str) -> None:
        if len(problems) > 20:  # enough to act on; finding each line costs a scan of the file
            return
        problems.append(f"{source}: {kind} {item_id!r}{_line(text, item_id)}: {message}")  # lines only on error

    seen: set[str] = set()
    for node in graph.nodes:
        if node.id in seen:
            problem("node", node.id, "duplicate id")
        seen.add(node.id)
        spec = schema.type(node.type)
        if spec is None:
            problem("node", node.id, f"unknown type {node.type!r} (the file's schema has: {', '.join(schema.types)})")
            continue
        unknown = [f for f in node.fields if f not in spec.field_names]
        if unknown:
            problem("node", node.id, f"unknown field(s) {', '.join(unknown)} for type {node.type!r}")
        if node.floor_from > node.floor_to:
            problem("node", node.id, f"floor range {node.floor_from}-{node.floor_to} runs backwards")
    for node in graph.nodes:
        if node.parent is not None and node.parent not in seen:
            problem("node", node.id, f"parent {node.parent!r} is not in the file")
    edge_ids: set[str] = set()
    for edge in graph.edges:
        if edge.id in edge_ids:
            problem("edge", edge.id, "duplicate id")
        edge_ids.add(edge.id)
        for end in (edge.source, edge.target):
            if end not in seen:
                problem("edge", edge.id, f"points to missing node {end!r}")
        if schema.relation(edge.relation) is None:
            problem("edge", edge.id, f"unknown relation {edge.relation!r}")
    if problems:
        more = "\n... and more" if len(problems) > 20 else ""
        raise ImportFileError("\n".join(problems[:20]) + more)


def import_graph(store: Store, chat_id: str, graph: GraphFile, schema: Schema, mode: ImportMode = "restore",
                 floor: int | None = None, source: str = "<graph>") -> CommitRecord:
    """Land a checked graph in `chat_id` as one `import` commit. A new chat takes the file's schema; an
    existing chat keeps its own, and the file must fit it."""
    if mode == "bind_floor" and floor is None:
        raise ImportFileError("mode bind_floor needs a floor (--floor N)",
                              "Add --floor N (the floor every imported node binds to); nothing was imported.")
    if mode != "bind_floor" and floor is not None:
        raise ImportFileError("--floor is only used with --mode bind_floor",
                              "Drop --floor, or add --mode bind_floor; nothing was imported.")
    created = not store.has_chat(chat_id)
    if created:
        store.create_chat(chat_id, schema)
    try:
        return _commit_import(store, chat_id, graph, mode, floor, source)
    except BaseException:
        if created:
            store.delete_chat(chat_id)
        raise


def _commit_import(store: Store, chat_id: str, graph: GraphFile, mode: ImportMode, floor: int | None,
                   source: str) -> CommitRecord:
    if mode == "bind_latest":
        latest = latest_assistant_floor(store.messages(chat_id))
        floor = latest if latest is not None else 0
    existing = {n.id for n in store.graph(chat_id).nodes(archived=None)}
    clash = sorted(existing & {n.id for n in graph.nodes})
    if clash:
        raise ChatExists(f"chat {chat_id!r} already has node(s) {', '.join(clash[:5])}"
                         f"{' ...' if len(clash) > 5 else ''}",
                         "Import into a new chat, or roll back the earlier import first.")
    ops: list[Any] = []
    for node in _parents_first(graph.nodes):
        floors = (node.floor_from, node.floor_to) if mode == "restore" else (floor, floor)
        ops.append(CreateNode(
            id=node.id, type=node.type, title=node.title, fields=node.fields, level=node.level,
            parent=node.parent, floor_from=floors[0], floor_to=floors[1], importance=node.importance,
            access_count=node.access_count, archived=node.archived, scope=node.scope,
            story_time=node.story_time, created_at=node.created_at, updated_at=node.updated_at))
    for edge in graph.edges:
        ops.append(Link(id=edge.id, source=edge.source, target=edge.target, relation=edge.relation,
                        strength=edge.strength, valid_from=edge.valid_from, valid_to=edge.valid_to,
                        created_at=edge.created_at, updated_at=edge.updated_at))
    anchor = floor if mode != "restore" else max((n.floor_to for n in graph.nodes), default=0)
    if anchor is None:  # import_graph refused bind_floor without a floor already
        raise CuratorError(f"mode {mode} needs a floor to bind the graph to")
    try:
        return store.commit(chat_id, ops, anchor_floor=anchor, origin="import", note=f"import {source} ({mode})")
    except OpError as exc:
        what = _op_subject(ops, exc.index)
        raise ImportFileError(f"{source}: {what}: {exc.reason}") from None


def _op_subject(ops: list[Any], index: int | None) -> str:
    if index is None:
        return "import"
    op = ops[index]
    return f"node {op.id!r}" if isinstance(op, CreateNode) else f"edge {op.id!r}"


def _parents_first(nodes: list[NodeRecord]) -> list[NodeRecord]:
    """Order nodes so every parent comes before its children (iteratively: chains may be long)."""
    by_id = {n.id: n for n in nodes}
    ordered: list[NodeRecord] = []
    placed: set[str] = set()
    for node in nodes:
        chain, seen = [], set()
        current: NodeRecord | None = node
        while current is not None and current.id not in placed:
            if current.id in seen:
                raise ImportFileError(f"node {current.id!r}: its parent chain loops back to itself")
            seen.add(current.id)
            chain.append(current)
            current = by_id.get(current.parent) if current.parent else None
        for item in reversed(chain):
            placed.add(item.id)
            ordered.append(item)
    return ordered
