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
import itertools
import re
import time
from collections import OrderedDict
from dataclasses import dataclass

from schemas import Schema

from .dates import date_windows, day_of, within
from .documents import node_document, source_document
from .graph import Node, normalize_name
from .injection import Chosen, Injection, pack, persistent_nodes, rank_persistent
from .lexical import BM25
from .llm import Usage
from .queries import GraphView
from .rerank import rerank
from .settings import RecallSettings, Settings
from .store import Store, utc_now
from .vectors import VectorIndex

DENSE_WEIGHT, LEXICAL_WEIGHT = 1.0, 0.3  # on z-scores
SOURCE_WEIGHT = 1.0  # of an event's source messages (dense + lexical, z-fused the same way) next to its own text
DATE_BONUS, DATE_SLACK_DAYS = 2.0, 3  # for memories whose story date is one the query names
DENSE_POOL = 200  # vector candidates scored per query
LEXICAL_POOL = 300  # BM25 candidates scored per query (keeps a query's cost flat as a chat grows)
MENTION_BONUS = 1.0  # for nodes linked to an entity the query names
DETAIL_MARGIN = 0.5  # a folded leaf comes back if it scores at least its summary's score minus this
NEIGHBOUR_SHARE = 0.3  # of the best score among a node's neighbours (linked, or the same type's previous/next)


@dataclass
class _Pool:
    nodes: dict[str, Node]  # recallable now
    leaves: dict[str, str]  # archived leaf id -> its highest active ancestor
    leaf_nodes: dict[str, Node]
    documents: dict[str, str]  # of every node that is scored: the pool, folded leaves and injected nodes
    event_types: set[str]
    injected: set[str]  # persistent nodes: never recalled, but scored, so a leaf must beat its ancestor
    days: dict[str, object]  # node id -> the calendar day its story-time label names, where it names one
    scenes: dict[str, str]  # event node id -> its story-time label: events that share one are each other's context


class Recaller:
    """Recall for the chats of one store. Keeps small caches keyed by graph version, so a swipe or regenerate of
    the same floor gets the same injection again with no embedding or LLM call."""

    def __init__(self, store: Store, settings: Settings, index: VectorIndex | None, model=None):
        self.store, self.settings, self.index = store, settings, index
        self.model = model  # replaces the `recall` profile's model for LLM stages (tests, scripted runs)
        self._lexical: OrderedDict[tuple, object] = OrderedDict()  # BM25 indexes and link maps per graph version
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
            self._pools[pool_key] = (rank_persistent(kept), self._pool(graph, chat.schema, kept, latest, opts))
            while len(self._pools) > 128:
                self._pools.popitem(last=False)
        kept, pool = self._pools[pool_key]
        injection = Injection(chat_id, query, mode, budget_tokens=opts.budget_tokens, graph_version=version,
                              placement={"position": opts.position, "depth": opts.depth, "role": opts.role})
        self._ensure_synced(chat_id, version)
        if mode == "rag":
            chosen = self._rag(chat_id, query, pool, opts, injection)
        elif mode == "llm":  # the model picks over a few rounds; falls back to hybrid on any failure
            from .llm_recall import llm_recall

            chosen = llm_recall(self, chat_id, version, graph, query, pool, opts, injection)
        else:
            chosen = self._hybrid(chat_id, version, graph, query, pool, opts)
            if opts.llm_rerank and chosen:
                from .llm_rerank import llm_rerank

                chosen = llm_rerank(self.settings, query, chosen, pool.documents, injection.usage,
                                    self.model) or chosen
        pack(injection, chat.schema, kept, chosen)
        self._touch(chat_id, [c.node.id for c in injection.recalled])
        injection.usage.latency_ms += (time.perf_counter() - started) * 1000
        if user_floor is not None:
            self._results[key] = injection
            while len(self._results) > 256:
                self._results.popitem(last=False)
        return injection

    def forget_floors(self, chat_id: str, floor: int) -> int:
        """Drop results cached for user floors >= `floor` of a chat (history sync rolled them back)."""
        stale = [k for k in self._results if k[0] == chat_id and k[1] is not None and k[1] >= floor]
        for key in stale:
            del self._results[key]
        return len(stale)

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
            if node.archived and node.parent and (horizon is None or node.floor_to <= horizon):
                top = _top_ancestor(node, everything)
                if top is not None and (top.id in nodes or top.id in injected):
                    leaves[node_id] = top.id
        documents = {i: node_document(everything[i], schema) for i in (*nodes, *leaves, *injected)}
        events = {name for name, spec in schema.types.items() if spec.identity == "event"}
        days = {i: day for i in documents if (day := day_of(everything[i].story_time.get("label")))}
        scenes = {i: label for i in documents
                  if everything[i].type in events and (label := (everything[i].story_time.get("label") or "").strip())}
        return _Pool(nodes, leaves, {i: everything[i] for i in leaves}, documents, events, injected, days, scenes)

    # ---- hybrid -------------------------------------------------------------------------------
    def _hybrid(self, chat_id: str, version: int, graph: GraphView, query: str, pool: _Pool,
                opts: RecallSettings) -> list[Chosen]:
        # Sources are "name: text" lines, so the speakers' names match every one of them: leave them out there.
        source_query = strip_names(query, self._speakers(chat_id)) or query
        lexical, source_lexical, sourced = self._lexical_scores(chat_id, version, graph, query, source_query, pool)
        dense, source_dense = self._dense_scores(chat_id, query, max(opts.top_k, DENSE_POOL), source_query)
        allowed = set(pool.documents)
        fused = fuse(dense, lexical, allowed)
        by_source = fuse(source_dense, source_lexical, allowed & sourced) if SOURCE_WEIGHT else {}
        fused = _add(fused, by_source, SOURCE_WEIGHT, sourced)
        fused = _date_bonus(fused, query, pool)
        context, adjacent = self._links(chat_id, version, graph, pool)
        fused = _mention_boost(fused, self._mentioned(chat_id, query), adjacent, pool)
        fused = _propagate(fused, context, pool)
        limit = max(opts.max_results, 30) if opts.llm_rerank else opts.max_results  # the LLM picks from 30
        fused = _diversify(fused, by_source, pool, limit)
        chosen = _lift_leaves(fused, pool, limit, lexical, dense)
        if opts.expand and not opts.llm_rerank:
            chosen = _expand(graph, chosen, pool, opts.max_results)
        return chosen

    def _lexical_scores(self, chat_id: str, version: int, graph: GraphView, query: str, source_query: str,
                        pool: _Pool) -> tuple[dict[str, float], dict[str, float], set[str]]:
        """BM25 over node text, and over events' source messages (cached per graph and message version)."""
        key = (chat_id, version, self._messages_stamp(chat_id))
        if key not in self._lexical:
            schema = self.store.chat(chat_id).schema
            nodes = graph.nodes(archived=None)
            lines = self.index.message_lines(chat_id) if self.index is not None else {}
            sources = [(n.id, doc) for n in nodes if (doc := source_document(n, lines, pool.event_types))]
            self._lexical[key] = ([n.id for n in nodes], BM25([f"{n.title}\n{node_document(n, schema)}" for n in nodes]),
                                  [i for i, _ in sources], BM25([doc for _, doc in sources]), {i for i, _ in sources})
            while len(self._lexical) > 256:
                self._lexical.popitem(last=False)
        ids, bm25, source_ids, source_bm25, sourced = self._lexical[key]
        return ({ids[i]: s for i, s in bm25.top(query, LEXICAL_POOL)},
                {source_ids[i]: s for i, s in source_bm25.top(source_query, LEXICAL_POOL)}, sourced)

    def _speakers(self, chat_id: str) -> list[str]:
        """The names the chat's messages are written under (cached per message version)."""
        key = ("speakers", chat_id, self._messages_stamp(chat_id))
        if key not in self._lexical:
            self._lexical[key] = [r[0] for r in self.store.conn.execute(
                "SELECT DISTINCT name FROM messages WHERE chat_id=? AND name != ''", (chat_id,))]
        return self._lexical[key]

    def _messages_stamp(self, chat_id: str) -> int:
        """Changes whenever the chat's messages do (sources are made of them)."""
        return self.store.messages_version(chat_id)

    def _links(self, chat_id: str, version: int, graph: GraphView,
               pool: _Pool) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
        """Two neighbour maps, cached per graph version: the context of each event-type node (linked events, and
        the previous and next node of its type and level in story order), and every node's linked nodes."""
        key = ("links", chat_id, version)
        if key not in self._lexical:
            nodes = graph.nodes(archived=None)
            types = {n.id: n.type for n in nodes}
            links: dict[str, set[str]] = {}
            adjacent: dict[str, set[str]] = {}
            for edge in graph.edges():
                adjacent.setdefault(edge.source, set()).add(edge.target)
                adjacent.setdefault(edge.target, set()).add(edge.source)
                if types.get(edge.source) in pool.event_types and types.get(edge.target) in pool.event_types:
                    links.setdefault(edge.source, set()).add(edge.target)
                    links.setdefault(edge.target, set()).add(edge.source)
            chains: dict[tuple, list[Node]] = {}
            for node in nodes:
                if node.type in pool.event_types:
                    chains.setdefault((node.type, node.level), []).append(node)
            for chain in chains.values():
                chain.sort(key=lambda n: (n.floor_from, n.floor_to, n.created_at))
                for a, b in itertools.pairwise(chain):
                    links.setdefault(a.id, set()).add(b.id)
                    links.setdefault(b.id, set()).add(a.id)
            self._lexical[key] = (links, adjacent)
        return self._lexical[key]

    def _mentioned(self, chat_id: str, query: str) -> set[str]:
        """Entities (non-event nodes) whose name or alias appears in the query, as 1-3 word spans."""
        words = [w for w in normalize_name(re.sub(r"[^\w\s'-]", " ", query)).split() if w]
        spans = {" ".join(words[i:i + n]) for n in (1, 2, 3) for i in range(len(words) - n + 1)}
        spans |= {s[:-2] for s in spans if s.endswith("'s")}
        if not spans:
            return set()
        rows = self.store.conn.execute(
            f"SELECT DISTINCT nn.node_id, n.type FROM node_names nn JOIN nodes n ON n.chat_id = nn.chat_id "
            f"AND n.id = nn.node_id WHERE nn.chat_id=? AND n.archived=0 AND nn.name IN ({', '.join('?' * len(spans))})",
            (chat_id, *spans)).fetchall()
        schema = self.store.chat(chat_id).schema
        events = {name for name, spec in schema.types.items() if spec.identity == "event"}
        return {node_id for node_id, node_type in rows if node_type not in events}

    def _dense_scores(self, chat_id: str, query: str, k: int, source_query: str | None = None):
        """Vector matches of node documents (and, given a `source_query`, of events' sources)."""
        if self.index is None:
            return {} if source_query is None else ({}, {})
        if source_query is None:
            return dict(self.index.query(chat_id, query, k))
        items, sources = self.index.query_both(chat_id, query, source_query, k)
        return dict(items), dict(sources)

    def _ensure_synced(self, chat_id: str, version: int) -> None:
        """Sync the index when the graph or the messages (the events' sources) changed since the last recall."""
        stamp = (version, self._messages_stamp(chat_id))
        if self.index is not None and self._synced.get(chat_id) != stamp:
            self.index.sync(chat_id)
            self._synced[chat_id] = stamp

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
    """Weighted sum of z-scores over the candidates (the union of both lists): a node the vector search did not
    return counts as its lowest similarity, one that shares no word as BM25 0."""
    candidates = [k for k in set(dense) | set(lexical) if k in allowed]
    if not candidates:
        return {}
    floor = min((v for k, v in dense.items() if k in allowed), default=0.0)
    total = {k: 0.0 for k in candidates}
    for weight, scores, missing in ((DENSE_WEIGHT, dense, floor), (LEXICAL_WEIGHT, lexical, 0.0)):
        values = [scores.get(k, missing) for k in candidates]
        mean = sum(values) / len(values)
        std = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
        if std > 0:
            for k, v in zip(candidates, values):
                total[k] += weight * (v - mean) / std
    return total


def strip_names(text: str, names: list[str]) -> str:
    """`text` without the given names (and a possessive 's); CJK names are removed wherever they occur."""
    for name in sorted(names, key=len, reverse=True):
        if _CJK_NAME.search(name):
            text = text.replace(name, " ")
        else:
            text = re.sub(rf"(?<!\w){re.escape(name)}(?:'s)?(?!\w)", " ", text, flags=re.IGNORECASE)
    return re.sub(r"\s+", " ", text).strip(" ,")


_CJK_NAME = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


def _add(scores: dict[str, float], extra: dict[str, float], weight: float, has_extra: set[str]) -> dict[str, float]:
    """scores + weight * extra. A node missing from `scores` counts as its lowest; one missing from `extra` as
    its lowest if it has that kind of evidence at all (`has_extra`), else as the average (z = 0)."""
    if not extra:
        return scores
    low, extra_low = min(scores.values(), default=0.0), min(extra.values())
    return {k: scores.get(k, low) + weight * extra.get(k, extra_low if k in has_extra else 0.0)
            for k in set(scores) | set(extra)}


def _diversify(scores: dict[str, float], by_source: dict[str, float], pool: _Pool, limit: int) -> dict[str, float]:
    """Memories drawn from the same messages share their source score; past the first of them, the others must
    earn their place on their own text, so the few slots cover more of the story."""
    if not by_source:
        return scores
    out, seen = dict(scores), set()
    for node_id, _ in sorted(scores.items(), key=lambda kv: -kv[1])[:3 * limit]:
        node = pool.nodes.get(node_id) or pool.leaf_nodes.get(node_id)
        if node is None or node_id not in by_source:
            continue
        span = (node.floor_from, node.floor_to)
        if span in seen:
            out[node_id] -= SOURCE_WEIGHT * max(by_source[node_id], 0.0)
        seen.add(span)
    return out


def _date_bonus(scores: dict[str, float], query: str, pool: _Pool) -> dict[str, float]:
    """Memories whose story date falls on (or within a few days of) a date the query names move up."""
    windows = date_windows(query) if pool.days else []
    if not windows or not scores:
        return scores
    out, low = dict(scores), min(scores.values())
    for node_id, day in pool.days.items():
        if within(day, windows, DATE_SLACK_DAYS):
            out[node_id] = out.get(node_id, low) + DATE_BONUS
    return out


def _mention_boost(scores: dict[str, float], mentioned: set[str], links: dict[str, set[str]],
                   pool: _Pool) -> dict[str, float]:
    """Nodes the query names, and nodes linked to them, move up: a question about Mira is about Mira's events.
    Leaves folded into a linked summary count as linked too (compaction moved their edges up to it)."""
    if not mentioned or not scores:
        return scores
    folded: dict[str, list[str]] = {}
    for leaf, ancestor in pool.leaves.items():
        folded.setdefault(ancestor, []).append(leaf)
    targets = set()
    for entity in mentioned:
        for node_id in {entity, *links.get(entity, ())}:
            targets.add(node_id)
            targets.update(folded.get(node_id, ()))
    boosted = dict(scores)
    floor = min(scores.values())
    for node_id in targets:
        boosted[node_id] = boosted.get(node_id, floor) + MENTION_BONUS
    return boosted


def _propagate(scores: dict[str, float], links: dict[str, set[str]], pool: _Pool) -> dict[str, float]:
    """A memory is understood in its context: each node gains a share of its best-scoring neighbour's score
    (neighbours: linked events, the previous and next node of the same type, and events of the same scene, i.e.
    with the same story-time label)."""
    if not scores:
        return scores
    out = dict(scores)
    floor = min(scores.values())
    best_in_scene: dict[str, list[tuple[float, str]]] = {}  # the two best scored events of each scene
    for node_id, score in scores.items():
        if (scene := pool.scenes.get(node_id)) is not None:
            top = best_in_scene.setdefault(scene, [])
            top.append((score, node_id))
            if len(top) > 2:
                top.sort(reverse=True)
                top.pop()
    touched = {n for node_id in scores for n in links.get(node_id, ())}  # only neighbours of scored nodes can gain
    touched.update(i for i in scores if i in pool.scenes)
    for node_id in touched:
        if node_id not in pool.documents:
            continue
        best = max((scores[n] for n in links.get(node_id, ()) if n in scores), default=None)
        other = next((s for s, i in sorted(best_in_scene.get(pool.scenes.get(node_id), ()), reverse=True)
                      if i != node_id), None)
        if other is not None and (best is None or other > best):
            best = other
        if best is not None and best > 0:
            out[node_id] = out.get(node_id, floor) + NEIGHBOUR_SHARE * best
    return out


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
    """Best first, within the limit. A folded leaf comes in for its detail only when it matches about as well as
    its summary (within DETAIL_MARGIN), otherwise the summary speaks for it."""
    ranked = sorted(scores.items(), key=lambda kv: -kv[1])
    chosen: dict[str, Chosen] = {}
    for node_id, score in ranked:
        if len(chosen) >= limit:
            break
        if node_id in pool.leaves:
            ancestor = pool.leaves[node_id]
            if ancestor in scores and score < scores[ancestor] - DETAIL_MARGIN:
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
