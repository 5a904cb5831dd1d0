"""The contradiction inbox: a new fact that contradicts a stored one is not decided silently.

Consolidation sees each new node beside its nearest stored ones; when the model finds that the two cannot both be
true it answers `contradicts` (the extractor may also link two nodes `contradicts` itself). Both nodes then stay
active, linked `contradicts`, and the pair waits in the inbox until someone decides:

- `supersede`: the new fact holds from now on: the old node is archived (its story-time span ends where the new
  one begins: `curator/recall/as_of.py`), the new one linked `updates` to it;
- `keep_both`: both hold (they did not really conflict): the `contradicts` link becomes `related`;
- `drop`: the new fact is wrong: it is archived.

The inbox is the graph itself (open `contradicts` links between two active objective nodes), so a rollback or a
swipe that removes the new fact removes its entry too; each decision is one commit (origin `manual`) anchored at
the new fact's floor (or where the conflict was found, if later), undone by a rollback of it like the fact itself.
"""

from __future__ import annotations

from typing import Any, Literal

from curator.errors import CuratorError, NotFound
from curator.store.commit_log import touching
from curator.store.graph import Edge, Node
from curator.store.ops import AnyOp, ArchiveNode, Link, Unlink
from curator.store.queries import GraphView
from curator.store.store import CommitRecord, Store

Resolution = Literal["supersede", "keep_both", "drop"]
RESOLUTIONS: tuple[Resolution, ...] = ("supersede", "keep_both", "drop")


def _side(node: Node) -> dict[str, Any]:
    return {"id": node.id, "type": node.type, "title": node.title, "fields": node.fields,
            "floors": [node.floor_from, node.floor_to], "story_time": node.story_time}


def _order(a: Node, b: Node) -> tuple[Node, Node]:
    """(new, old): the later fact by floor, then by when it was written."""
    return (a, b) if (a.floor_to, a.created_at, a.id) >= (b.floor_to, b.created_at, b.id) else (b, a)


def _sides(graph: GraphView, edge: Edge) -> tuple[Node, Node]:
    """(new, old) of an open contradiction (`GraphView.contradictions` gives only links whose nodes both exist)."""
    a, b = graph.get(edge.source), graph.get(edge.target)
    if a is None or b is None:
        raise NotFound(f"contradiction {edge.id}: a node it joins is gone")
    return _order(a, b)


def open_contradictions(store: Store, chat_id: str) -> list[dict[str, Any]]:
    """The inbox: each open contradiction with its id (the link's), the new fact and the stored one."""
    graph = store.graph(chat_id)
    out = []
    for edge in graph.contradictions():
        new, old = _sides(graph, edge)
        out.append({"id": edge.id, "new": _side(new), "old": _side(old), "found_at_floor": edge.valid_from,
                    "actions": list(RESOLUTIONS)})
    return out


def resolve(store: Store, chat_id: str, contradiction_id: str, action: str) -> CommitRecord:
    """Decide one contradiction (see the module docstring); returns the commit."""
    if action not in RESOLUTIONS:
        raise CuratorError(f"unknown resolution {action!r}", f"Use one of: {', '.join(RESOLUTIONS)}.")
    graph = store.graph(chat_id)
    edge = next((e for e in graph.contradictions() if str(e.id) == str(contradiction_id)), None)
    if edge is None:
        raise NotFound(f"no open contradiction {contradiction_id!r} in chat {chat_id!r}",
                       "List them with `curator contradictions --chat ID` (GET /chats/{id}/contradictions).")
    schema = store.chat(chat_id).schema
    new, old = _sides(graph, edge)
    ops: list[AnyOp] = [Unlink(id=edge.id)]
    if action == "supersede":
        ops.append(ArchiveNode(id=old.id))
        if schema.relation("updates") is not None:
            ops.append(Link(source=new.id, target=old.id, relation="updates", valid_from=new.floor_to))
    elif action == "keep_both":
        if schema.relation("related") is not None:
            ops.append(Link(source=new.id, target=old.id, relation="related"))
    else:
        ops.append(ArchiveNode(id=new.id))
    note = f"contradiction {edge.id}: {action} ({new.id} {new.title!r} against {old.id} {old.title!r})"
    # anchored where the conflict was found too (consolidation commits at the chat's head floor): a rollback that
    # takes the link away takes the decision with it, never leaves it to be replayed without its link
    found = [anchor for _, _, _, anchor, _, undo in touching(store, chat_id, edge.id)
             if any(kind == "e" and key == edge.id for kind, key, _ in undo)]
    return store.commit(chat_id, ops, max([new.floor_to, *found]), "manual", note=note)
