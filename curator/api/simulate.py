"""Simulate: what an extraction or a curator run would commit, without committing anything.

The writers run as they would (the model is asked, its calls logged in `curator usage`), on the newest reply or on
a reply an orchestrator drafted and has not stored yet; their ops are then applied to a scratch copy of the graph
(checked by the same code as a commit) and described change by change: nodes created, fields changed (before and
after), nodes archived or folded, links made or removed. The store, the commit log and the processed-floor pointers
are untouched; nothing is recorded as an extraction step."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from curator.errors import CuratorError
from curator.extract.extractor import Extractor, assistant_floors
from curator.settings import writers_of
from curator.store.messages import Message
from curator.store.ops import parse_ops
from curator.store.queries import GraphView
from curator.store.scratch import apply_ops, copy_graph
from curator.store.store import Store

if TYPE_CHECKING:
    from curator.extract.curator_agent import CurateResult
    from curator.llm.access import Models
    from curator.settings import Settings

WRITERS = ("extractor", "curator")


async def simulate(store: Store, settings: Settings, curate: Callable[..., Awaitable[CurateResult]], chat_id: str,
                   draft_reply: str | None = None, floor: int | None = None, writer: str | None = None,
                   models: Models | None = None) -> dict[str, Any]:
    """What each writer (the chat's channel's, or `writer`) would commit for the reply at `floor` (default: the
    newest) or for `draft_reply` (at the floor it will take). `curate` runs the curator (`MemoryCore.curate`)."""
    from curator.llm.access import NO_MODELS

    models = models or NO_MODELS
    chat = store.chat(chat_id)
    channel = settings.for_chat(chat.settings).extraction.channel
    writers = (writer,) if writer else writers_of(channel) or ("extractor",)
    unknown = [w for w in writers if w not in WRITERS]
    if unknown:
        raise CuratorError(f"unknown writer {unknown[0]!r}", f"Use one of: {', '.join(WRITERS)}.")
    messages = store.messages(chat_id)
    if draft_reply is not None:
        if not draft_reply.strip():
            raise CuratorError("the draft reply is empty")
        name = next((m.name for m in reversed(messages) if m.role == "assistant" and m.name), "")
        floor = len(messages)
        messages = [*messages, Message("assistant", name, draft_reply)]
    elif floor is None:
        floors = assistant_floors(messages)
        if not floors:
            raise CuratorError(f"chat {chat_id!r} has no reply to simulate",
                               "Store the chat's messages first, or give the drafted reply.")
        floor = floors[-1]
    out: dict[str, Any] = {"chat": chat_id, "floor": floor, "draft": draft_reply is not None, "committed": False,
                           "writers": {}}
    for name in writers:
        ops: list[dict[str, Any]]
        entry: dict[str, Any]
        if name == "extractor":
            extracted = await Extractor(store, settings, model=models.extract).extract(
                chat_id, floor, messages, simulate=True)
            ops, entry = extracted.simulated or [], {"ok": extracted.ok, "reason": extracted.reason,
                                                     "usage": extracted.usage.to_dict(),
                                                     **({"set_aside": extracted.set_aside} if extracted.set_aside
                                                        else {})}
        else:
            curated = await curate(chat_id, floor if draft_reply is None else None, draft_reply, dry_run=True,
                                   models=models)
            ops, entry = curated.staged_ops, {"ok": curated.ok, "reason": curated.reason,
                                              "usage": curated.usage.to_dict(), "tool_calls": len(curated.tool_calls)}
        entry["ops"] = ops
        entry["changes"] = describe(store, chat_id, floor, ops) if ops else []
        out["writers"][name] = entry
    return out


def describe(store: Store, chat_id: str, floor: int, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ops as changes a person reads, checked on a scratch copy of the graph (never the store)."""
    before = store.graph(chat_id)
    conn = copy_graph(store, chat_id)
    try:
        done = apply_ops(conn, chat_id, store.chat(chat_id).schema, floor, parse_ops(ops))
        after = GraphView(conn, chat_id)
        return [_change(op, before, after) for op in done]
    finally:
        conn.close()


def _title(graph: GraphView, *others: GraphView, node_id: str | None) -> str:
    for view in (graph, *others):
        node = view.get(node_id) if node_id else None
        if node is not None:
            return node.title
    return node_id or "?"


def _change(op: dict[str, Any], before: GraphView, after: GraphView) -> dict[str, Any]:
    kind = op["op"]
    if kind == "create_node":
        node = after.get(op["id"])
        return {"action": "create", "id": op["id"], "type": op["type"],
                "title": node.title if node else op.get("title"), "fields": op.get("fields", {})}
    if kind == "update_node":
        old = before.get(op["id"])
        fields = {k: [old.fields.get(k) if old else None, v] for k, v in op.get("set_fields", {}).items()
                  if old is None or old.fields.get(k) != v}
        return {"action": "update", "id": op["id"], "title": _title(after, before, node_id=op["id"]),
                "fields": fields, "cleared": op.get("clear_fields", [])}
    if kind in ("archive_node", "delete_node"):
        return {"action": "archive" if kind == "archive_node" else "delete", "id": op["id"],
                "title": _title(before, after, node_id=op["id"])}
    if kind in ("link", "unlink"):
        return {"action": kind, "relation": op.get("relation"),
                "source": _title(after, before, node_id=op.get("source")),
                "target": _title(after, before, node_id=op.get("target"))}
    if kind == "compact":
        return {"action": "compact", "id": op.get("id"), "type": op.get("type"),
                "title": _title(after, node_id=op.get("id")), "children": len(op.get("children", []))}
    return {"action": kind}
