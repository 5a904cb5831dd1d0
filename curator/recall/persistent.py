"""Which always-inject nodes make the persistent block, and why each of the others does not.

Nothing is unreachable: an always-inject node that its type's caps (`max_per_type`, `max_floor_distance`) or the
persistent share of the budget leave out is not dropped, it goes back to the recall pool and competes there like
any other node (its reason then starts with "persistent overflow"). A type whose schema sets no `max_per_type`
(0) gets the default cap `recall.max_per_type` (8): without compression, an always-inject timeline would
otherwise fill the persistent share with its newest events and leave recall no room.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from curator.prompts import render
from curator.schemas import Schema

from curator.llm.tokens import count_tokens
from curator.recall.injection import (
    BLOCK_HEADINGS,
    DROPPED_LISTED,
    MAX_MISSES,
    MIN_LINE_TOKENS,
    PERSISTENT_SHARE,
    Injection,
    _rendered,
    rank_persistent,
)
from curator.store.graph import Node
from curator.store.queries import GraphView

OVERFLOW = "persistent overflow"


@dataclass
class PersistentPlan:
    """`kept`: the persistent block, in packing order, all of it within the persistent share. `left`: every
    other always-inject node (top level) and why it is not in the block: `cap`, `distance` or `budget`."""

    kept: list[Node] = field(default_factory=list)
    left: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)  # of `left`


def plan_persistent(graph: GraphView, schema: Schema, latest_floor: int, budget_tokens: int,
                    default_cap: int) -> PersistentPlan:
    """Caps first (a type's own `max_per_type`, else `default_cap`; `max_floor_distance`), then the persistent
    share of the budget, packed in `rank_persistent` order (highest summaries first, then the newest)."""
    plan = PersistentPlan()
    candidates: list[Node] = []
    for name, spec in schema.types.items():
        if not spec.always_inject.enabled:
            continue
        caps = spec.always_inject
        cap = caps.max_per_type or default_cap
        nodes = [n for n in graph.nodes(type=name) if n.parent is None]
        own_cap = bool(caps.max_per_type)  # a schema's own cap keeps the newest; the default, the highest first
        nodes.sort(key=(lambda n: (n.floor_to, n.floor_from, n.created_at)) if own_cap
                   else (lambda n: (n.level, n.floor_to, n.floor_from, n.created_at)), reverse=True)
        for index, node in enumerate(nodes):
            if caps.max_floor_distance and node.floor_to < latest_floor - caps.max_floor_distance + 1:
                plan.left[node.id], plan.nodes[node.id] = "distance", node
            elif cap and spec.identity != "latest_only" and index >= cap:
                plan.left[node.id], plan.nodes[node.id] = "cap", node
            else:
                candidates.append(node)
    overhead = count_tokens(render("inject_block", heading=BLOCK_HEADINGS["recalled"], sections=""))
    used, limit, misses = 2 * overhead, int(budget_tokens * PERSISTENT_SHARE), 0
    for node in rank_persistent(candidates):
        if limit - used < MIN_LINE_TOKENS or misses >= MAX_MISSES:
            plan.left[node.id], plan.nodes[node.id] = "budget", node
            continue
        tokens = _rendered(node, schema)[1]
        if used + tokens > limit:
            plan.left[node.id], plan.nodes[node.id] = "budget", node
            misses += 1
            continue
        used, misses = used + tokens, 0
        plan.kept.append(node)
    return plan


def mark_overflow(chosen: list, plan: PersistentPlan) -> list:
    """Recalled nodes that were left out of the persistent block say so in their reason."""
    for item in chosen:
        why = plan.left.get(item.node.id)
        if why is not None and not item.reason.startswith(OVERFLOW):
            item.reason = f"{OVERFLOW} ({why}): {item.reason}"
    return chosen


def note_left_out(injection: Injection, plan: PersistentPlan, candidates: dict[str, Node]) -> Injection:
    """Name every node left out and why: an always-inject node that neither block holds (cap, distance or
    budget: the persistent share was full and recall did not bring it back), and a recalled candidate that
    did not fit the budget (budget)."""
    shown = {c.node.id for c in (*injection.persistent, *injection.recalled)}
    out: list[dict] = []
    persistent_left = len(plan.left) - sum(1 for node_id in shown if node_id in plan.left)
    for node_id, why in plan.left.items():  # only the listed few are built: a 100k chat leaves out thousands
        if len(out) >= DROPPED_LISTED:
            break
        if node_id not in shown:
            node = plan.nodes[node_id]
            out.append({"id": node_id, "type": node.type, "title": node.title, "why": why, "block": "persistent"})
    recalled_left = 0
    for node_id in injection.dropped_for_budget:
        if node_id not in shown and node_id not in plan.left:
            recalled_left += 1
            if len(out) < DROPPED_LISTED:
                node = candidates.get(node_id)
                out.append({"id": node_id, "type": node.type if node else "", "title": node.title if node else "",
                            "why": "budget", "block": "recalled"})
    injection.left_out_count = persistent_left + recalled_left
    injection.left_out = out[:DROPPED_LISTED]
    return injection
