"""The recall pool built from a chat's `ChatState`: whole, or from the pool of an earlier graph version by the
nodes that changed since (and the nodes that entered or left the persistent block, and everything folded under
any of them), so a commit costs the pool what it touched."""

from __future__ import annotations

from curator.recall.scoring import Pool, top_ancestor
from curator.recall.state import ChatState, cached_day
from curator.store.graph import Node


def build_pool(state: ChatState, persistent: list[Node], horizon: int | None) -> Pool:
    pool = Pool({}, {}, {}, {}, set(state.event_types), {n.id for n in persistent}, {}, {})
    _place(pool, state, state.nodes, horizon)
    return pool


def update_pool(old: Pool, state: ChatState, persistent: list[Node], horizon: int | None,
                touched: set[str]) -> Pool:
    """`old` (left as it is: another recall may be reading it) brought to the state's graph."""
    injected = {n.id for n in persistent}
    pool = Pool(dict(old.nodes), dict(old.leaves), dict(old.leaf_nodes), dict(old.documents),
                set(state.event_types), injected, dict(old.days), dict(old.scenes))
    reach = set(touched) | (old.injected ^ injected)
    stack = list(reach)
    while stack:  # what is folded under a changed node may change with it
        node = state.nodes.get(stack.pop())
        for child in node.children if node is not None else ():
            if child not in reach:
                reach.add(child)
                stack.append(child)
    for node_id in reach:
        for part in (pool.nodes, pool.leaves, pool.leaf_nodes, pool.documents, pool.days, pool.scenes):
            part.pop(node_id, None)
    _place(pool, state, reach, horizon)
    return pool


def _place(pool: Pool, state: ChatState, ids, horizon: int | None) -> None:
    """Put each of `ids` where it belongs: recallable, a folded leaf, persistent (scored only), or nowhere."""
    everything = state.nodes
    for node_id in ids:
        node = everything.get(node_id)
        if node is not None and not node.archived and node_id not in pool.injected \
                and (horizon is None or node.floor_to <= horizon):
            pool.nodes[node_id] = node
    for node_id in ids:
        node = everything.get(node_id)
        if node is not None and node.archived and node.parent and (horizon is None or node.floor_to <= horizon):
            top = top_ancestor(node, everything)
            if top is not None and (top.id in pool.nodes or top.id in pool.injected):
                pool.leaves[node_id] = top.id
                pool.leaf_nodes[node_id] = node
    for node_id in ids:
        if node_id in pool.nodes or node_id in pool.leaves or node_id in pool.injected:
            node = everything.get(node_id)
            if node is None:
                continue
            pool.documents[node_id] = state.documents[node_id]
            label = node.story_time.get("label")
            if day := cached_day(label):
                pool.days[node_id] = day
            if node.type in pool.event_types and (label := (label or "").strip()):
                pool.scenes[node_id] = label
