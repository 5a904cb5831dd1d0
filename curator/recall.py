"""Recall: choose the memories for the next generation and pack them into an injection.

- `hybrid` (default, no LLM): BM25 over node text (CJK-aware) and the vector index, fused by normalized scores,
  then a one-hop graph expansion (an event brings its people and places; a person or place its latest event).
- `rag`: optional LLM query rewrite -> vector top-K -> optional cross-encoder rerank -> the best `max_results`.

The pool leaves out archived nodes and always-inject types (they are injected anyway), and, by setting, what the
last N floors made. A compressed type shows its highest active summary; a leaf folded into it comes back only when
it matches the query better than the summary does (the query needs its detail).
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass

from schemas import Schema

from .graph import Node
from .injection import Chosen, Injection, pack, persistent_nodes
from .lexical import BM25
from .llm import Usage
from .queries import GraphView
from .rerank import rerank
from .settings import RecallSettings, Settings
from .store import Store, utc_now
from .vectors import VectorIndex, node_document

DENSE_WEIGHT, LEXICAL_WEIGHT = 0.65, 0.35


@dataclass
class _Pool:
    nodes: dict[str, Node]  # recallable now
    leaves: dict[str, str]  # archived leaf id -> its highest active ancestor
    leaf_nodes: dict[str, Node]
    documents: dict[str, str]  # of every node that is scored: the pool, folded leaves and injected nodes
    event_types: set[str]
    injected: set[str]  # persistent nodes: never recalled, but scored, so a leaf must beat its ancestor


class Recaller:
    """Recall for the chats of one store. Keeps small caches keyed by graph version, so a swipe or regenerate of
    the same floor gets the same injection again with no embedding or LLM call."""

    def __init__(self, store: Store, settings: Settings, index: VectorIndex | None, model=None):
        self.store, self.settings, self.index = store, settings, index
        self.model = model  # replaces the `recall` profile's model for LLM stages (tests, scripted runs)
        self._lexical: OrderedDict[tuple[str, int], tuple[list[str], BM25]] = OrderedDict()
        self._results: OrderedDict[tuple, Injection] = OrderedDict()
        self._synced: dict[str, int] = {}
        self._pools: OrderedDict[tuple, tuple[list[Node], _Pool]] = OrderedDict()

    def recall(self, chat_id: str, query: str, *, mode: str | None = None, user_floor: int | None = None,
               options: RecallSettings | None = None) -> Injection:
        opts = options or self.settings.recall
        mode = mode or opts.mode
        version = self.store.graph_version(chat_id)
        key = (chat_id, user_floor, hashlib.sha256(query.encode()).hexdigest(), version, mode, opts.model_dump_json())
        if user_floor is not None and key in self._results:
            cached = self._results[key]
            self._results.move_to_end(key)
            return Injection(**{**cached.__dict__, "reused": True, "usage": Usage()})
        started = time.perf_counter()
        chat = self.store.chat(chat_id)
        graph = self.store.graph(chat_id)
        latest = self._latest_floor(chat_id)
        pool_key = (chat_id, version, latest, opts.exclude_recent_floors)
        if pool_key not in self._pools:
            kept, _over_caps = persistent_nodes(graph, chat.schema, latest)  # those over the caps stay in the pool
            self._pools[pool_key] = (kept, self._pool(graph, chat.schema, kept, latest, opts))
            while len(self._pools) > 8:
                self._pools.popitem(last=False)
        kept, pool = self._pools[pool_key]
        injection = Injection(chat_id, query, mode, budget_tokens=opts.budget_tokens, graph_version=version,
                              placement={"position": opts.position, "depth": opts.depth, "role": opts.role})
        self._ensure_synced(chat_id, version)
        if mode == "rag":
            chosen = self._rag(chat_id, query, pool, opts, injection)
        else:
            chosen = self._hybrid(chat_id, version, graph, query, pool, opts)
            if opts.llm_rerank and chosen:
                from .llm_rerank import llm_rerank

                chosen = llm_rerank(self.settings, query, chosen, pool.documents, injection.usage,
                                    self.model) or chosen
        persistent = [Chosen(n, 1.0, "always injected") for n in kept]
        pack(injection, chat.schema, persistent, chosen)
        self._touch(chat_id, [c.node.id for c in injection.recalled])
        injection.usage.latency_ms += (time.perf_counter() - started) * 1000
        if user_floor is not None:
            self._results[key] = injection
            while len(self._results) > 256:
                self._results.popitem(last=False)
        return injection

    # ---- the pool -----------------------------------------------------------------------------
    def _latest_floor(self, chat_id: str) -> int:
        row = self.store.conn.execute("SELECT MAX(floor) FROM messages WHERE chat_id=?", (chat_id,)).fetchone()
        if row[0] is not None:
            return row[0]
        row = self.store.conn.execute("SELECT MAX(floor_to) FROM nodes WHERE chat_id=?", (chat_id,)).fetchone()
        return row[0] or 0

    def _pool(self, graph: GraphView, schema: Schema, persistent: list[Node], latest: int,
              opts: RecallSettings) -> _Pool:
        injected = {n.id for n in persistent}
        horizon = latest - opts.exclude_recent_floors if opts.exclude_recent_floors else None
        everything = {n.id: n for n in graph.nodes(archived=None)}
        nodes = {i: n for i, n in everything.items() if not n.archived and i not in injected
                 and (horizon is None or n.floor_to <= horizon)}
        leaves = {}
        for node_id, node in everything.items():
            if node.archived and node.parent:
                top = _top_ancestor(node, everything)
                if top is not None and (top.id in nodes or top.id in injected):
                    leaves[node_id] = top.id
        documents = {i: node_document(everything[i], schema) for i in (*nodes, *leaves, *injected)}
        events = {name for name, spec in schema.types.items() if spec.identity == "event"}
        return _Pool(nodes, leaves, {i: everything[i] for i in leaves}, documents, events, injected)

    # ---- hybrid -------------------------------------------------------------------------------
    def _hybrid(self, chat_id: str, version: int, graph: GraphView, query: str, pool: _Pool,
                opts: RecallSettings) -> list[Chosen]:
        lexical = self._lexical_scores(chat_id, version, graph, query)
        dense = self._dense_scores(chat_id, query, max(opts.top_k, 50))
        fused = fuse(dense, lexical, set(pool.documents))
        limit = max(opts.max_results, 30) if opts.llm_rerank else opts.max_results  # the LLM picks from 30
        chosen = _lift_leaves(fused, pool, limit, lexical, dense)
        if opts.expand and not opts.llm_rerank:
            chosen = _expand(graph, chosen, pool, opts.max_results)
        return chosen

    def _lexical_scores(self, chat_id: str, version: int, graph: GraphView, query: str) -> dict[str, float]:
        key = (chat_id, version)
        if key not in self._lexical:
            schema = self.store.chat(chat_id).schema
            nodes = graph.nodes(archived=None)
            ids = [n.id for n in nodes]
            self._lexical[key] = (ids, BM25([f"{n.title}\n{node_document(n, schema)}" for n in nodes]))
            while len(self._lexical) > 8:
                self._lexical.popitem(last=False)
        ids, bm25 = self._lexical[key]
        return {ids[i]: s for i, s in bm25.scores(query).items()}

    def _dense_scores(self, chat_id: str, query: str, k: int) -> dict[str, float]:
        if self.index is None:
            return {}
        return dict(self.index.query(chat_id, query, k))

    def _ensure_synced(self, chat_id: str, version: int) -> None:
        if self.index is not None and self._synced.get(chat_id) != version:
            self.index.sync(chat_id)
            self._synced[chat_id] = version

    # ---- rag ----------------------------------------------------------------------------------
    def _rag(self, chat_id: str, query: str, pool: _Pool, opts: RecallSettings, injection: Injection) -> list[Chosen]:
        search = query
        if opts.rewrite:
            from .rewrite import rewrite_query

            search = rewrite_query(self.settings, query, injection.usage) or query
        hits = [(i, s) for i, s in self._dense_scores(chat_id, search, opts.top_k).items() if i in pool.documents]
        hits.sort(key=lambda kv: -kv[1])
        reason = "vector match"
        if opts.rerank and hits:
            order = rerank(opts.rerank, search, [pool.documents[i] for i, _ in hits])
            if order is not None:
                hits = [(hits[i][0], score) for i, score in order]
                reason = "reranked"
        return _lift_leaves(dict(hits), pool, opts.max_results, {}, dict(hits), reason=reason)

    # ---- bookkeeping ----------------------------------------------------------------------------
    def _touch(self, chat_id: str, node_ids: list[str]) -> None:
        """Count the recall on each node. Not a commit: bookkeeping that a rollback need not undo."""
        if not node_ids:
            return
        with self.store.transaction() as conn:
            conn.executemany("UPDATE nodes SET access_count = access_count + 1, last_access=? WHERE chat_id=? AND id=?",
                             [(utc_now(), chat_id, i) for i in node_ids])


def fuse(dense: dict[str, float], lexical: dict[str, float], allowed: set[str]) -> dict[str, float]:
    """Weighted sum of min-max normalized scores (a node missing from a list scores 0 there)."""
    def normalized(scores: dict[str, float]) -> dict[str, float]:
        scores = {k: v for k, v in scores.items() if k in allowed}
        if not scores:
            return {}
        low, high = min(scores.values()), max(scores.values())
        span = high - low
        return {k: (v - low) / span if span > 0 else 1.0 for k, v in scores.items()}

    d, lx = normalized(dense), normalized(lexical)
    return {k: DENSE_WEIGHT * d.get(k, 0.0) + LEXICAL_WEIGHT * lx.get(k, 0.0) for k in set(d) | set(lx)}


def _top_ancestor(node: Node, everything: dict[str, Node]) -> Node | None:
    seen, current = set(), node
    while current.parent and current.parent in everything and current.id not in seen:
        seen.add(current.id)
        current = everything[current.parent]
        if not current.archived:
            return current
    return None


def _lift_leaves(scores: dict[str, float], pool: _Pool, limit: int, lexical: dict, dense: dict,
                 reason: str | None = None) -> list[Chosen]:
    """Best first, within the limit. A folded leaf counts for its active ancestor unless it matches better than
    the ancestor itself (then the leaf comes in for its detail)."""
    ranked = sorted(scores.items(), key=lambda kv: -kv[1])
    chosen: dict[str, Chosen] = {}
    for node_id, score in ranked:
        if len(chosen) >= limit:
            break
        if node_id in pool.leaves:
            ancestor = pool.leaves[node_id]
            if score <= scores.get(ancestor, 0.0):
                continue
            node = pool.leaf_nodes[node_id]
            why = f"detail of {ancestor}"
        elif node_id in pool.nodes:
            node = pool.nodes[node_id]
            why = reason or _why(node_id, lexical, dense)
        else:
            continue  # injected anyway, or not recallable
        chosen[node_id] = Chosen(node, score, why)
    return list(chosen.values())


def _why(node_id: str, lexical: dict, dense: dict) -> str:
    parts = []
    if node_id in dense:
        parts.append(f"similar ({dense[node_id]:.2f})")
    if node_id in lexical:
        parts.append(f"shares words (bm25 {lexical[node_id]:.1f})")
    return " + ".join(parts) or "match"


def _expand(graph: GraphView, chosen: list[Chosen], pool: _Pool, limit: int) -> list[Chosen]:
    """One hop: an event brings the nodes it links (people, places); a person or place brings its latest event."""
    have = {c.node.id for c in chosen}
    extra: list[Chosen] = []
    budget = max(2, limit // 2)
    for seed in chosen:
        if len(extra) >= budget:
            break
        links = [(e, n) for e, n in graph.neighbours(seed.node.id) if n.id in pool.nodes and n.id not in have]
        if not links:
            continue
        if seed.node.type in pool.event_types:
            picks = links[:2]
        else:
            events = [(e, n) for e, n in links if n.type in pool.event_types]
            picks = sorted(events, key=lambda en: en[1].floor_to, reverse=True)[:1]
        for edge, node in picks:
            have.add(node.id)
            extra.append(Chosen(node, seed.score * 0.5, f"{edge.relation} link to {seed.node.title}"))
    return chosen + extra
