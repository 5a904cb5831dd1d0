"""Memory at a point in story time: what held then, and recall as of then.

Every fact has a span in story time. A node holds from the story time of the commit that made it (or gave it its
current value) until the story time of the commit that changed or archived it; a superseded fact (the contradiction
inbox's `supersede`, a merge, a fold into a summary) keeps its span. The spans are read from the commit log (each
commit keeps the rows as they were before it) and the story clock (where the story's time stands at each floor:
the newest non-flashback segment written at or before it), so no extra history is stored and a rollback keeps them
true by itself.

"What did Mira carry on day 5?" is Mira's node as it was at the last floor of day 5: the graph a rollback to the
floor after it would leave, rebuilt in a scratch copy (the store is not touched). `recall(..., at="day 5")` recalls
over that graph: BM25 over the nodes as they were, the vector index's similarity for the nodes it still holds,
names in the query, and the persistent block as it was; later memories (and summaries written later) are not in it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from curator.dates import date_windows
from curator.errors import CuratorError
from curator.recall.injection import Chosen, Injection, pack, persistent_nodes
from curator.recall.lexical import BM25
from curator.recall.scoring import best_first, fuse
from curator.store.commit_log import last_floor, touching
from curator.store.graph import Node, normalize_name
from curator.store.queries import GraphView
from curator.store.scratch import copy_graph, rewind
from curator.store.story_time import parse_segment
from curator.store.store import Store
from curator.vectors.documents import node_document

if TYPE_CHECKING:
    from curator.prompts import Prompts
    from curator.recall.engine import Recaller
    from curator.settings import RecallSettings

_KEY = re.compile(r"^\d{4}-\d{2}-\d{2}\.\d{4}$")
MENTION_BONUS = 1.0  # a node the question names (as in hybrid recall)
LINKED_SHARE = 0.5  # of it, for a node linked to one the question names


@dataclass(frozen=True)
class StoryPoint:
    """A point in story time: the segment key it ends at (None: the chat has no story time), its label, and the
    newest floor at that time (memory written up to it holds then)."""

    asked: str
    key: str | None
    label: str | None
    floor: int

    def to_dict(self) -> dict[str, Any]:
        return {"asked": self.asked, "story_time": self.label, "segment": self.key, "floor": self.floor}


class StoryClockView:
    """Where the story's time stands at each floor, from the nodes' segments (flashbacks do not move it)."""

    def __init__(self, graph: GraphView):
        self.marks: list[tuple[int, int, str, str | None]] = []  # (floor_from, floor_to, key, label)
        for floor_from, floor_to, label, stored in graph.story_floors():
            segment = parse_segment(stored)
            if segment is not None and not segment.flashback:
                self.marks.append((floor_from, floor_to, segment.key, label))
        self.labels: dict[str, str] = {}
        for _, _, key, label in self.marks:
            if label:
                self.labels.setdefault(normalize_name(label), key)

    def key_at(self, floor: int) -> str | None:
        """The story time at a floor: the latest segment written at or before it."""
        keys = [key for _, floor_to, key, _ in self.marks if floor_to <= floor]
        return max(keys) if keys else None

    def last_floor_of(self, key: str, latest: int) -> int:
        """The newest floor whose story time is at or before `key`: the floor before the story first passes it."""
        later = [floor_from for floor_from, _, k, _ in self.marks if k > key]
        return max(0, min(later) - 1) if later else latest

    def label_of(self, key: str | None) -> str | None:
        return next((label for _, _, k, label in self.marks if k == key and label), None)


def resolve_point(store: Store, chat_id: str, at: str | int) -> StoryPoint:
    """A point in story time from a label the story uses ("day 5", "the night of the fire"), a date, a segment key,
    or a floor (an int: the story time at that floor)."""
    graph = store.graph(chat_id)
    clock = StoryClockView(graph)
    latest = last_floor(store, chat_id)
    latest = latest if latest is not None else max((m[1] for m in clock.marks), default=0)
    if isinstance(at, int) or (isinstance(at, str) and at.strip().isdigit()):
        floor = max(0, min(int(at), latest))
        key = clock.key_at(floor)
        return StoryPoint(str(at), key, clock.label_of(key), floor)
    text = " ".join(str(at).split())
    key = clock.labels.get(normalize_name(text))
    if key is None and _KEY.match(text):
        key = text
    if key is None:
        windows = date_windows(text)
        if windows:
            key = f"{windows[0][1].isoformat()}.9999"  # the end of the day (or of the period) it names
    if key is None:
        known = ", ".join(sorted({label for *_, label in clock.marks if label})[:12]) or "none yet"
        raise CuratorError(f"no story time {text!r} in chat {chat_id!r}",
                           f"Name a story time the memory uses ({known}), a date, or a floor number.")
    return StoryPoint(text, key, clock.label_of(key) or text, clock.last_floor_of(key, latest))


@contextmanager
def graph_at(store: Store, chat_id: str, floor: int) -> Iterator[GraphView]:
    """The chat's graph as it was when `floor` was the newest floor (read-only; a scratch copy)."""
    schema = store.chat(chat_id).schema
    conn = copy_graph(store, chat_id)
    try:
        rewind(conn, store, chat_id, schema, floor + 1)
        yield GraphView(conn, chat_id)
    finally:
        conn.close()


def fact_spans(store: Store, chat_id: str, node_id: str) -> list[dict[str, Any]]:
    """A node's values over story time, oldest first: {title, fields, from, to} with `from`/`to` as {floor,
    story_time, segment} (`to` None: it still holds). A span ends where the node changed or was archived."""
    node = store.graph(chat_id).get(node_id)
    if node is None:
        raise CuratorError(f"no node {node_id!r} in chat {chat_id!r}")
    clock = StoryClockView(store.graph(chat_id))
    changes = []  # (anchor floor, the node before the commit: None when the commit created it)
    for _, _, _, anchor, _, undo in touching(store, chat_id, node_id):
        for kind, key, before in undo:
            if kind == "n" and key == node_id:
                changes.append((anchor, None if before is None else {
                    "title": before["title"], "fields": json.loads(before["fields_json"]),
                    "archived": bool(before["archived"])}))
    states = [b for _, b in changes[1:]] + [_row_state(node)]  # the node after each commit
    spans: list[dict[str, Any]] = []
    for (anchor, _), state, following in zip(changes, states, [*changes[1:], None]):
        if state is None or state["archived"]:
            continue
        end = following[0] if following is not None else None
        if spans and spans[-1]["to"] is not None and spans[-1]["to"]["floor"] == anchor and (
                spans[-1]["title"], spans[-1]["fields"]) == (state["title"], state["fields"]):
            spans[-1]["to"] = _when(clock, end) if end is not None else None  # the same value goes on
            continue
        spans.append({"title": state["title"], "fields": state["fields"], "from": _when(clock, anchor),
                      "to": _when(clock, end) if end is not None else None})
    return spans


def _row_state(node: Node) -> dict[str, Any]:
    return {"title": node.title, "fields": dict(node.fields), "archived": node.archived}


def _when(clock: StoryClockView, floor: int) -> dict[str, Any]:
    key = clock.key_at(floor)
    return {"floor": floor, "story_time": clock.label_of(key), "segment": key}


def facts_at(store: Store, chat_id: str, name: str, at: str | int) -> dict[str, Any]:
    """The nodes named `name` (or with that id) as they were at a point in story time, with their spans."""
    point = resolve_point(store, chat_id, at)
    with graph_at(store, chat_id, point.floor) as graph:
        found = [graph.get(name)] if graph.get(name) else graph.find_by_name(name)
        nodes = [n.to_dict() for n in found if n is not None and not n.archived]
    return {"at": point.to_dict(), "nodes": nodes,
            "spans": {n["id"]: fact_spans(store, chat_id, n["id"]) for n in nodes}}


def recall_at(recaller: Recaller, chat_id: str, query: str, at: str | int, opts: RecallSettings,
              prompts: Prompts) -> Injection:
    """Recall over the memory as it was at a point in story time (see the module docstring)."""
    store = recaller.store
    point = resolve_point(store, chat_id, at)
    schema = store.chat(chat_id).schema
    injection = Injection(chat_id, query, "hybrid", budget_tokens=opts.budget_tokens,
                          placement={"position": opts.position, "depth": opts.depth, "role": opts.role})
    with graph_at(store, chat_id, point.floor) as graph:
        persistent, _ = persistent_nodes(graph, schema, point.floor)
        kept = {n.id for n in persistent}
        pool = [n for n in graph.nodes() if n.id not in kept and _not_after(n, point.key)]
        documents = {n.id: f"{n.title}\n{node_document(n, schema)}" for n in pool}
        ids = list(documents)
        lexical = {ids[i]: s for i, s in BM25(list(documents.values())).top(query, 300)} if ids else {}
        dense = recaller._dense_scores(chat_id, query, max(opts.top_k, 200)) if ids else {}
        scores = fuse(dense, lexical, documents)
        scores = _mentions(graph, query, scores, documents)
        by_id = {n.id: n for n in pool}
        chosen = [Chosen(by_id[i], s, f"as of {point.label or point.asked}")
                  for i, s in best_first(scores, opts.max_results)]
        pack(injection, schema, persistent, chosen, prompts)
    injection.as_of = point.to_dict()
    return injection


def _not_after(node: Node, key: str | None) -> bool:
    segment = parse_segment(node.story_time.get("segment"))
    return key is None or segment is None or segment.key <= key


def _mentions(graph: GraphView, query: str, scores: dict[str, float], allowed: Collection[str]) -> dict[str, float]:
    words = [w for w in normalize_name(re.sub(r"[^\w\s'-]", " ", query)).split() if w]
    spans = {" ".join(words[i:i + n]) for n in (1, 2, 3) for i in range(len(words) - n + 1)}
    spans |= {s[:-2] for s in spans if s.endswith("'s")}
    named = {n.id for s in spans for n in graph.find_by_name(s)} & set(allowed)
    if not named:
        return scores
    out = dict(scores)
    low = min(scores.values(), default=0.0)
    for node_id in named:
        out[node_id] = out.get(node_id, low) + MENTION_BONUS
        for _, other in graph.neighbours(node_id):
            if other.id in allowed:
                out[other.id] = out.get(other.id, low) + MENTION_BONUS * LINKED_SHARE
    return out
