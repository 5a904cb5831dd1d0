"""The recall pool built from a chat's `ChatState`: whole, or from the pool of an earlier graph version by the
nodes that changed since (and the nodes that entered or left the persistent block, and everything folded under
any of them), so a commit costs the pool what it touched."""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import Any

from curator.recall.entities import is_bare
from curator.recall.scoring import Pool, top_ancestor
from curator.recall.state import ChatState, cached_day
from curator.store.graph import Node


_ONE_BY_ONE = 64  # past this many dated nodes at once, the sorted days are sorted again, not edited in place


def build_pool(state: ChatState, persistent: list[Node], horizon: int | None) -> Pool:
    pool = Pool({}, {}, {}, {}, set(state.event_types), {n.id for n in persistent}, {}, {})
    _place(pool, state, state.nodes, horizon)
    return pool


def update_pool(old: Pool, state: ChatState, persistent: list[Node], horizon: int | None,
                touched: set[str], in_place: bool = False) -> Pool:
    """`old` brought to the state's graph: a copy (another recall may be reading `old`), or with `in_place`, `old`
    itself (its maps are copied otherwise: 1.7 ms of a 10k-node chat's first recall after a commit)."""
    injected = {n.id for n in persistent}
    reach = set(touched) | (old.injected ^ injected)
    if in_place:
        pool = old
        pool.event_types, pool.injected = set(state.event_types), injected
    else:
        pool = Pool(dict(old.nodes), dict(old.leaves), dict(old.leaf_nodes), dict(old.documents),
                    set(state.event_types), injected, dict(old.days), dict(old.scenes), list(old.by_day),
                    dict(old.folded), dict(old.entities))  # the folded sets are frozen: replaced, never edited
    stack = list(reach)
    while stack:  # what is folded under a changed node may change with it
        node = state.nodes.get(stack.pop())
        for child in node.children if node is not None else ():
            if child not in reach:
                reach.add(child)
                stack.append(child)
    unfolded: dict[str, set[str]] = {}
    undated = [(day, node_id) for node_id in reach if (day := pool.days.get(node_id)) is not None]
    if len(undated) > _ONE_BY_ONE:
        gone = set(undated)
        pool.by_day = [entry for entry in pool.by_day if entry not in gone]
    else:
        for entry in undated:
            del pool.by_day[bisect.bisect_left(pool.by_day, entry)]
    for node_id in reach:
        if (ancestor := pool.leaves.get(node_id)) is not None:
            unfolded.setdefault(ancestor, set()).add(node_id)
        for part in (pool.nodes, pool.leaves, pool.leaf_nodes, pool.documents, pool.days, pool.scenes):
            part.pop(node_id, None)
        pool.entities.pop(node_id, None)
    for ancestor, leaves in unfolded.items():  # one new set per ancestor (a top summary may hold thousands)
        if rest := pool.folded[ancestor] - leaves:
            pool.folded[ancestor] = rest
        else:
            del pool.folded[ancestor]
    _place(pool, state, reach, horizon)
    return pool


def _place(pool: Pool, state: ChatState, ids: Iterable[str], horizon: int | None) -> None:
    """Put each of `ids` where it belongs: recallable, a folded leaf, persistent (scored only), or nowhere."""
    everything = state.nodes
    folded: dict[str, list[str]] = {}
    dated: list[tuple[Any, ...]] = []
    for node_id in ids:
        node = everything.get(node_id)
        if node is not None and not node.archived and node_id not in pool.injected \
                and (horizon is None or node.floor_to <= horizon):
            pool.nodes[node_id] = node
            if node.type not in pool.event_types:
                pool.entities[node_id] = is_bare(node, state.documents[node_id], state.schema)
    for node_id in ids:
        node = everything.get(node_id)
        if node is not None and node.archived and node.parent and (horizon is None or node.floor_to <= horizon):
            top = top_ancestor(node, everything)
            if top is not None and (top.id in pool.nodes or top.id in pool.injected):
                pool.leaves[node_id] = top.id
                pool.leaf_nodes[node_id] = node
                folded.setdefault(top.id, []).append(node_id)
    for ancestor, leaves in folded.items():
        pool.folded[ancestor] = pool.folded.get(ancestor, frozenset()).union(leaves)
    for node_id in ids:
        if node_id in pool.nodes or node_id in pool.leaves or node_id in pool.injected:
            node = everything.get(node_id)
            if node is None:
                continue
            pool.documents[node_id] = state.documents[node_id]
            label = node.story_time.get("label")
            if day := cached_day(label):
                pool.days[node_id] = day
                dated.append((day, node_id))
            if node.type in pool.event_types and (label := (label or "").strip()):
                pool.scenes[node_id] = label
    if len(dated) > _ONE_BY_ONE:  # a whole build: one sort, not an insertion each
        pool.by_day.extend(dated)
        pool.by_day.sort()
    else:
        for entry in dated:
            bisect.insort(pool.by_day, entry)
