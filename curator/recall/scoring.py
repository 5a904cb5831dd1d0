"""Recall's scoring steps: pure functions from score maps (node id -> score) to score maps, and the choice of
the best within a limit. `curator/recall/engine.py` runs them in order; each step says why it exists."""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Collection, Container, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from itertools import repeat
from typing import Any, Protocol

import numpy as np

from curator.cjk import has_cjk
from curator.dates import date_windows
from curator.store.graph import Node
from curator.recall.injection import Chosen
from curator.store.queries import GraphView

DENSE_WEIGHT, LEXICAL_WEIGHT = 1.0, 0.3  # on z-scores
SOURCE_WEIGHT = 1.0  # of an event's source messages (dense + lexical, z-fused the same way) next to its own text
DATE_BONUS, DATE_SLACK_DAYS = 2.0, 3  # for memories whose story date is one the query names
MENTION_BONUS = 1.0  # for nodes linked to an entity the query names
DETAIL_MARGIN = 0.5  # a folded leaf comes back if it scores at least its summary's score minus this
NEIGHBOUR_SHARE = 0.3  # of the best score among a node's neighbours (linked, previous/next of its type, same scene)
# `rag`: the weight of an event's source messages' similarity beside its own text's. Chosen on LoCoMo dev's tune
# conversations (1 / 1.5 / 2: 1.5 best on both corpora together), checked on the held-out two (bench/README.md,
# issue 31, "`rag` reads the sources").
RAG_SOURCE_WEIGHT = 1.5


@dataclass
class Pool:
    """What one recall may choose from and how it is scored, built once per graph version."""

    nodes: dict[str, Node]  # recallable now
    leaves: dict[str, str]  # archived leaf id -> its highest active ancestor
    leaf_nodes: dict[str, Node]
    documents: dict[str, str]  # of every node that is scored: the pool, folded leaves and injected nodes
    event_types: set[str]
    injected: set[str]  # persistent nodes: never recalled, but scored, so a leaf must beat its ancestor
    days: dict[str, object]  # node id -> the calendar day its story-time label names, where it names one
    scenes: dict[str, str]  # event node id -> its story-time label: events that share one are each other's context
    # what a query looks up, so that it costs what it finds, not the size of the chat (`curator/recall/pool.py`
    # keeps them): `days` as a sorted list of (day, id); each ancestor's folded leaves (`leaves` turned round)
    by_day: list[tuple[Any, ...]] = field(default_factory=list)
    folded: dict[str, frozenset[str]] = field(default_factory=dict)
    # the recallable nodes that are not of an event type (people, places...), each with whether its document is its
    # names alone (`recall/entities.py` looks a query's few hundred candidates up here)
    entities: dict[str, bool] = field(default_factory=dict)


class NodeLookup(Protocol):
    """node id -> Node, as far as `top_ancestor` asks (a dict, or a cold state's nodes read when asked)."""

    def __contains__(self, node_id: str, /) -> bool: ...

    def __getitem__(self, node_id: str, /) -> Node: ...


class Links(Protocol):
    """A neighbour map: node id -> the ids near it (a dict of sets, or `state.Neighbours`)."""

    def get(self, node_id: str, default: Collection[str], /) -> Collection[str]: ...

def fuse(dense: dict[str, float], lexical: dict[str, float], allowed: Container[str],
         also: Container[str] | None = None, dense_weight: float | None = None,
         lexical_weight: float | None = None) -> dict[str, float]:
    """Weighted sum of z-scores over the candidates (the union of both lists, those in `allowed` and, given, in
    `also`): a node the vector search did not return counts as its lowest similarity, one that shares no word as
    BM25 0. `dense_weight`: the embedder's own (`DENSE_WEIGHT` when None)."""
    candidates = list(filter(allowed.__contains__, dense.keys() | lexical.keys()))
    if also is not None:
        candidates = list(filter(also.__contains__, candidates))
    if not candidates:
        return {}
    count = len(candidates)
    similar = np.fromiter(map(dense.get, candidates, repeat(np.nan)), dtype=np.float64, count=count)
    found = ~np.isnan(similar)
    similar[~found] = similar[found].min() if found.any() else 0.0  # not returned: the lowest similarity
    total = np.zeros(count)
    bm25 = np.fromiter(map(lexical.get, candidates, repeat(0.0)), dtype=np.float64, count=count)
    for weight, values in ((dense_weight or DENSE_WEIGHT, similar),
                           (LEXICAL_WEIGHT if lexical_weight is None else lexical_weight, bm25)):
        # one array per channel: a query has a few hundred candidates, scored twice (nodes, sources)
        centered = values - values.sum() / count
        std = math.sqrt(centered.dot(centered) / count)  # as values.std(), without its Python-level steps
        if std > 0:
            total += (weight / std) * centered
    return dict(zip(candidates, total.tolist()))


def fuse_vectors(nodes: dict[str, float], sources: dict[str, float], has_source: Container[str],
                 source_weight: float | None = None) -> dict[str, float]:
    """`rag`'s score: a node's text similarity plus `source_weight` times its source messages' (cosines of one
    embedder, so on one scale; z-scores would blow up a search whose hits are all alike, such as sources of short
    filler lines). A node the node search did not return counts as that search's lowest; one with sources that the
    source search did not return, as its lowest; one without sources (a person, a place), as its mean."""
    weight = RAG_SOURCE_WEIGHT if source_weight is None else source_weight
    node_low = min(nodes.values(), default=0.0)
    source_low = min(sources.values(), default=0.0)
    source_mean = sum(sources.values()) / len(sources) if sources else 0.0
    return {node_id: nodes.get(node_id, node_low)
            + weight * sources.get(node_id, source_low if node_id in has_source else source_mean)
            for node_id in nodes.keys() | sources.keys()}


def strip_names(text: str, names: list[str]) -> str:
    """`text` without the given names (and a possessive 's); CJK names are removed wherever they occur."""
    for name in sorted(names, key=len, reverse=True):
        if has_cjk(name):
            text = text.replace(name, " ")
        else:
            text = re.sub(rf"(?<!\w){re.escape(name)}(?:'s)?(?!\w)", " ", text, flags=re.IGNORECASE)
    return re.sub(r"\s+", " ", text).strip(" ,")


def add_scores(scores: dict[str, float], extra: dict[str, float], weight: float,
               has_extra: Container[str]) -> dict[str, float]:
    """scores + weight * extra. A node missing from `scores` counts as its lowest; one missing from `extra` as
    its lowest if it has that kind of evidence at all (`has_extra`), else as the average (z = 0)."""
    if not extra:
        return scores
    low, extra_low = min(scores.values(), default=0.0), min(extra.values())
    out = dict.fromkeys(extra.keys() - scores.keys(), low)
    out.update(scores)
    for k, v in extra.items():
        out[k] += weight * v
    for k in scores.keys() - extra.keys():  # those without this kind of evidence gain nothing (+ weight * 0)
        if k in has_extra:
            out[k] += weight * extra_low
    return out


def diversify(scores: dict[str, float], by_source: dict[str, float], pool: Pool, limit: int,
              weight: float | None = None) -> dict[str, float]:
    """Memories drawn from the same messages share their source score; past the first of them, the others must
    earn their place on their own text, so the few slots cover more of the story."""
    if not by_source:
        return scores
    out, seen = dict(scores), set()
    for node_id, _ in best_first(scores, 3 * limit):
        node = pool.nodes.get(node_id) or pool.leaf_nodes.get(node_id)
        if node is None or node_id not in by_source:
            continue
        span = (node.floor_from, node.floor_to)
        if span in seen:
            out[node_id] -= (SOURCE_WEIGHT if weight is None else weight) * max(by_source[node_id], 0.0)
        seen.add(span)
    return out


def date_bonus(scores: dict[str, float], query: str, pool: Pool, bonus: float | None = None) -> dict[str, float]:
    """Memories whose story date falls on (or within a few days of) a date the query names move up."""
    windows = date_windows(query) if pool.days else []
    if not windows or not scores:
        return scores
    out, low = dict(scores), min(scores.values())
    slack, found = timedelta(days=DATE_SLACK_DAYS), set[str]()
    for first, last in windows:  # the nodes dated within each window, from the sorted days
        start = bisect.bisect_left(pool.by_day, (first - slack,))
        end = bisect.bisect_left(pool.by_day, (last + slack + timedelta(days=1),))
        found.update(node_id for _, node_id in pool.by_day[start:end])
    for node_id in found:
        out[node_id] = out.get(node_id, low) + (DATE_BONUS if bonus is None else bonus)
    return out


def mention_boost(scores: dict[str, float], mentioned: set[str], links: Links,
                   pool: Pool, bonus: float | None = None) -> dict[str, float]:
    """Nodes the query names, and nodes linked to them, move up: a question about Mira is about Mira's events.
    Leaves folded into a linked summary count as linked too (compaction moved their edges up to it)."""
    if not mentioned or not scores:
        return scores
    targets = set()
    for entity in mentioned:
        for node_id in {entity, *links.get(entity, ())}:
            targets.add(node_id)
            targets.update(pool.folded.get(node_id, ()))
    boosted = dict(scores)
    floor = min(scores.values())
    for node_id in targets:
        boosted[node_id] = boosted.get(node_id, floor) + (MENTION_BONUS if bonus is None else bonus)
    return boosted


def propagate(scores: dict[str, float], links: Links, pool: Pool,
              share: float | None = None) -> dict[str, float]:
    """A memory is understood in its context: each node gains a share of its best-scoring neighbour's score
    (neighbours: linked events, the previous and next node of the same type, and events of the same scene, i.e.
    with the same story-time label)."""
    if not scores:
        return scores
    out = dict(scores)
    floor = min(scores.values())
    scenes, documents, near = pool.scenes, pool.documents, links.get
    best_in_scene: dict[str, list[tuple[float, str]]] = {}  # the two best scored events of each scene
    if scenes:  # most chats have no story-time labels: skip the scene work then
        for node_id, score in scores.items():
            if (scene := scenes.get(node_id)) is not None:
                top = best_in_scene.setdefault(scene, [])
                top.append((score, node_id))
                if len(top) > 2:
                    top.sort(reverse=True)
                    top.pop()
    # only a neighbour of a node scored above 0 can gain (the gain needs a best > 0)
    touched = {n for node_id, score in scores.items() if score > 0 for n in near(node_id, ())}
    if scenes:
        touched.update(i for i in scores if i in scenes)
    for node_id in touched:
        if node_id not in documents:
            continue
        best = max((scores[n] for n in near(node_id, ()) if n in scores), default=None)
        if scenes and (scene := scenes.get(node_id)) is not None:
            other = next((s for s, i in sorted(best_in_scene.get(scene, ()), reverse=True) if i != node_id), None)
            if other is not None and (best is None or other > best):
                best = other
        if best is not None and best > 0:
            out[node_id] = out.get(node_id, floor) + (NEIGHBOUR_SHARE if share is None else share) * best
    return out


def best_first(scores: dict[str, float], n: int, everything: bool = False) -> Iterator[tuple[str, float]]:
    """(id, score) best first, equal scores by id: the best `n` picked by numpy (a query scores several hundred; a
    heap of them cost three times as much), then, with `everything`, the rest. Ties go by id, not by the map's
    order: that order can follow a set's, which Python orders by each process's string hashes, and the same chat
    and query gave another injection in another process (a bare name's node against another's, both at the same
    score)."""
    if n >= len(scores) or n <= 0 or len(scores) < 64:  # small: sorting is as quick
        ordered = sorted(scores.items(), key=_score_then_id)
        yield from ordered if everything else ordered[:max(n, 0)]
        return
    keys = list(scores)
    values = np.fromiter(scores.values(), dtype=np.float64, count=len(keys))
    cut = np.partition(values, len(values) - n)[len(values) - n]  # the n-th highest
    above = np.flatnonzero(values > cut).tolist()
    tied = sorted(np.flatnonzero(values == cut).tolist(), key=keys.__getitem__)[:n - len(above)]  # the lowest ids
    head = sorted(((keys[i], scores[keys[i]]) for i in above + tied), key=_score_then_id)
    yield from head
    if everything:
        taken = {node_id for node_id, _ in head}
        yield from sorted(((k, v) for k, v in scores.items() if k not in taken), key=_score_then_id)


def _score_then_id(item: tuple[str, float]) -> tuple[float, str]:
    return -item[1], item[0]


def top_ancestor(node: Node, everything: NodeLookup) -> Node | None:
    seen, current = set(), node
    while current.parent and current.parent in everything and current.id not in seen:
        seen.add(current.id)
        current = everything[current.parent]
        if not current.archived:
            return current
    return None


def lift_leaves(scores: dict[str, float], pool: Pool, limit: int, lexical: dict[str, Any], dense: dict[str, Any],
                 reason: str | None = None) -> list[Chosen]:
    """Best first, within the limit. A folded leaf comes in for its detail only when it matches about as well as
    its summary (within DETAIL_MARGIN), otherwise the summary speaks for it."""
    chosen: dict[str, Chosen] = {}
    for node_id, score in best_first(scores, 2 * limit, everything=True):
        if len(chosen) >= limit:
            break
        if node_id in pool.leaves:
            ancestor = pool.leaves[node_id]
            if ancestor in scores and score < scores[ancestor] - DETAIL_MARGIN:
                continue
            node = pool.leaf_nodes[node_id]
            because = f"detail of {ancestor}"
        elif node_id in pool.nodes:
            node = pool.nodes[node_id]
            because = reason or _why(node_id, lexical, dense)
        else:
            continue  # injected anyway, or not recallable
        chosen[node_id] = Chosen(node, score, because)
    return list(chosen.values())


def _why(node_id: str, lexical: dict[str, Any], dense: dict[str, Any]) -> str:
    parts = []
    if node_id in dense:
        parts.append(f"similar ({dense[node_id]:.2f})")
    if node_id in lexical:
        parts.append(f"shares words (bm25 {lexical[node_id]:.1f})")
    return " + ".join(parts) or "match"


def expand(graph: GraphView, chosen: list[Chosen], pool: Pool, limit: int) -> list[Chosen]:
    """One hop: an event brings the nodes it links (people, places); a person or place brings its latest event."""
    have = {c.node.id for c in chosen}
    extra: list[Chosen] = []
    budget = max(2, limit // 2)
    # every seed's edges in one statement (a round trip each on a database server); a linked node counts only
    # when it is in the pool, so the pool's copy of it is the one brought in
    edges = graph.edges_at([c.node.id for c in chosen]) if chosen else {}
    for seed in chosen:
        if len(extra) >= budget:
            break
        here = seed.node.id
        links = [(e, pool.nodes[other]) for e in edges[here]
                 if (other := e.target if e.source == here else e.source) in pool.nodes and other not in have]
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
