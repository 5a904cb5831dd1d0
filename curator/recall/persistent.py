"""Which always-inject nodes make the persistent block, and why each of the others does not.

Nothing is unreachable: an always-inject node that its type's caps (`max_per_type`, `max_floor_distance`) or the
persistent share of the budget leave out is not dropped, it goes back to the recall pool and competes there like
any other node (its reason then starts with "persistent overflow"). A type whose schema sets no `max_per_type`
(0) gets the default cap `recall.max_per_type` (8): without compression, an always-inject timeline would
otherwise fill the persistent share with its newest events and leave recall no room.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING, Any

from curator.prompts import SHIPPED, Prompts
from curator.schemas import Schema

from curator.recall.injection import (
    DROPPED_LISTED,
    MAX_MISSES,
    MIN_LINE_TOKENS,
    PERSISTENT_SHARE,
    PREPARED,
    Injection,
    _rendered,
    block_overhead,
    prepare_lines,
    rank_persistent,
)
from curator.recall.state import TypedNodes
from curator.store.graph import Node

if TYPE_CHECKING:
    from curator.recall.cold import ColdTyped

OVERFLOW = "persistent overflow"


@dataclass
class PersistentPlan:
    """`kept`: the persistent block, in packing order, all of it within the persistent share. `left`: every
    other always-inject node (top level) and why it is not in the block: `cap`, `distance` or `budget`."""

    left: LeftOut
    kept: list[Node] = field(default_factory=list)
    # the first (id, why) of `left`, and whether that is all of it: every recall of the plan's graph version lists
    # the same few, and working each out again cost a tenth of a recall's Python (`note_left_out`)
    first_left: tuple[list[tuple[str, str]], bool] | None = field(default=None, repr=False)

    def listed(self, enough: int) -> tuple[list[tuple[str, str]], bool]:
        """The first `enough` or more (id, why) of `left` (all of it when it has fewer), and whether that is all."""
        found = self.first_left
        if found is None or (len(found[0]) < enough and not found[1]):
            items = list(islice(self.left.items(), enough))
            found = self.first_left = (items, len(items) < enough)
        return found


class LeftOut(Mapping[str, str]):
    """node id -> why (`cap`, `distance`, `budget`) of every always-inject node the block leaves out, worked out on
    demand from the state's ranked nodes: a 100k chat leaves out tens of thousands, and a recall asks about a few
    (its chosen nodes, the first listed). Iterates in the order a whole plan lists them: type by type, best first,
    then the budget's. Reads the state as it is now (like its other views), so read it under the state's lock."""

    def __init__(self, typed: TypedNodes | ColdTyped) -> None:
        self.typed = typed
        self.types: dict[str, tuple[int | None, set[str]]] = {}  # type -> lowest floor_to not too far, candidates
        self.budget: dict[str, str] = {}
        self.size = 0

    def node(self, node_id: str) -> Node:
        return self.typed.state.nodes[node_id]

    def __getitem__(self, node_id: str) -> str:
        why = self.get(node_id)
        if why is None:
            raise KeyError(node_id)
        return why

    def get(self, node_id: str, default: str | None = None) -> str | None:  # type: ignore[override]
        if node_id in self.budget:
            return "budget"
        node = self.typed.state.nodes.get(node_id)
        if node is None or node.archived or node.parent is not None or node.type not in self.types:
            return default
        too_far, candidates = self.types[node.type]
        if node_id in candidates:
            return default  # in the block
        # a node left out that is not too far must be past its type's cap (below the cap all but the far are in)
        return "distance" if too_far is not None and node.floor_to < too_far else "cap"

    def __contains__(self, node_id: object) -> bool:
        if not isinstance(node_id, str):
            return False
        return self.get(node_id) is not None

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[str]:
        for name, (_, candidates) in self.types.items():
            for node in self.typed.ranked(name)[1]:
                if node.id not in candidates:
                    yield node.id
        yield from self.budget


def plan_persistent(typed: TypedNodes | ColdTyped, schema: Schema, latest_floor: int, budget_tokens: int,
                    default_cap: int, prompts: Prompts = SHIPPED) -> PersistentPlan:
    """Caps first (a type's own `max_per_type`, else `default_cap`; `max_floor_distance`), then the persistent
    share of the budget, packed in `rank_persistent` order (highest summaries first, then the newest). A capped
    type reads its first `cap` nodes from the state's ranked order, not all of them."""
    plan = PersistentPlan(left=LeftOut(typed))
    candidates: list[Node] = []
    total = 0
    for name, spec in schema.types.items():
        if not spec.always_inject.enabled:
            continue
        caps = spec.always_inject
        cap = (caps.max_per_type or default_cap) if spec.identity != "latest_only" else 0
        too_far = latest_floor - caps.max_floor_distance + 1 if caps.max_floor_distance else None
        count, ranked = typed.ranked(name)
        mine: set[str] = set()
        seen: set[str] = set()
        for node in ranked:
            if node.id in seen:  # a cold state reads page by page: another process's commit may shift a page
                continue
            if cap and len(seen) >= cap:
                break  # the rest are left out for the cap (or the distance): `LeftOut` says which
            seen.add(node.id)
            if too_far is None or node.floor_to >= too_far:
                candidates.append(node)
                mine.add(node.id)
        # the count is read apart from the pages (a cold state): never fewer than the nodes seen
        total += max(count, len(seen))
        plan.left.types[name] = (too_far, mine)
    packed = rank_persistent(candidates)
    prepare_lines(packed[:PREPARED], schema, prompts)
    overhead = block_overhead(prompts)
    used, limit, misses = 2 * overhead, int(budget_tokens * PERSISTENT_SHARE), 0
    for node in packed:
        if limit - used < MIN_LINE_TOKENS or misses >= MAX_MISSES:
            plan.left.budget[node.id] = "budget"
            continue
        tokens = _rendered(node, schema)[1]
        if used + tokens > limit:
            plan.left.budget[node.id] = "budget"
            misses += 1
            continue
        used, misses = used + tokens, 0
        plan.kept.append(node)
    plan.left.size = max(0, total - len(plan.kept))
    return plan


def mark_overflow(chosen: list[Any], plan: PersistentPlan) -> list[Any]:
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
    out: list[dict[str, Any]] = []
    persistent_left = len(plan.left) - sum(1 for node_id in shown if node_id in plan.left)
    first, _ = plan.listed(DROPPED_LISTED + len(shown))  # enough though every shown node is among them
    for node_id, why in first:
        if len(out) >= DROPPED_LISTED:  # only the listed few are built: a 100k chat leaves out thousands
            break
        if node_id not in shown:
            node = plan.left.node(node_id)
            out.append({"id": node_id, "type": node.type, "title": node.title, "why": why, "block": "persistent"})
    recalled_left = 0
    for node_id in injection.dropped_for_budget:
        if node_id not in shown and node_id not in plan.left:
            recalled_left += 1
            if len(out) < DROPPED_LISTED:
                found = candidates.get(node_id)
                out.append({"id": node_id, "type": found.type if found else "", "title": found.title if found else "",
                            "why": "budget", "block": "recalled"})
    injection.left_out_count = persistent_left + recalled_left
    injection.left_out = out[:DROPPED_LISTED]
    return injection
