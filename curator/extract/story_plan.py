"""The story fields of an extraction answer as ops: story time placed by the engine's clock, the region path, the
point of view (an owner the graph or the answer knows), and `knows` links from the characters who witnessed a
memory or were told it. Anything the engine cannot use raises StoryInputError naming the item (the planner hands
it back to the model)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from curator.schemas import Schema

from curator.store.story_time import KNOWS, StoryClock, StoryInputError, region_path
from curator.store.queries import GraphView


def story_clock(graph: GraphView) -> StoryClock:
    """The clock of a chat: every segment its nodes hold, archived ones too (they still happened)."""
    return StoryClock(graph.story_segments())


class StoryPlan(Protocol):
    """What the story fields need of an extraction plan (`curator.extract.plan.Plan`)."""

    ops: list[dict[str, Any]]
    story_items: list[tuple[str, str, Any]]
    _creates: dict[str, dict[str, Any]]
    _updates: dict[str, dict[str, Any]]


Resolve = Callable[[Any, GraphView, str, str], str]  # (plan, graph, name, where) -> node id


def apply_story(plan: StoryPlan, schema: Schema, graph: GraphView, anchor: int, resolve: Resolve) -> None:
    """Set scope and story_time on the ops of `plan.story_items`, and add the `knows` links."""
    clock = story_clock(graph)
    knowledge = schema.relation(KNOWS) is not None
    for where, node_id, item in plan.story_items:
        try:
            story = clock.place(item.story_time, item.scene, item.flashback)
            region = region_path(item.region, item.region_path)
        except StoryInputError as exc:
            raise StoryInputError(f"{where}: {exc}") from None
        scope = None
        owner = " ".join((item.pov or "").split()) or None
        if owner is not None:
            owner_id = resolve(plan, graph, owner, f"{where}.pov")
            owner = _title(plan, graph, owner_id) or owner
            if owner_id == node_id:
                raise StoryInputError(f"{where}.pov: a memory cannot be its own point of view; name the character")
        if owner is not None or region is not None:
            known = graph.get(node_id)
            current = {} if node_id in plan._creates or known is None else (known.scope or {})
            owner = owner or current.get("owner")  # an update changes only what it gives
            scope = {"layer": "pov" if owner else "objective", "owner": owner,
                     "region": region or current.get("region")}
        _set(plan, graph, node_id, scope, story)
        for index, name in enumerate(getattr(item, "known_by", None) or [] if knowledge else []):
            if not name or not name.strip():
                continue
            who = resolve(plan, graph, name, f"{where}.known_by[{index}]")
            if who != node_id:
                plan.ops.append({"op": "link", "source": who, "target": node_id, "relation": KNOWS,
                                 "valid_from": anchor})


def _title(plan: StoryPlan, graph: GraphView, node_id: str) -> str | None:
    op = plan._creates.get(node_id)
    if op is not None:
        fields = op.get("fields", {})
        return op.get("title") or fields.get("name") or next(iter(fields.values()), None)
    node = graph.get(node_id)
    return node.title if node else None


def _set(plan: StoryPlan, graph: GraphView, node_id: str, scope: dict[str, Any] | None,
         story: dict[str, Any] | None) -> None:
    if scope is None and story is None:
        return
    op = plan._creates.get(node_id) or plan._updates.get(node_id)
    if op is None:  # an entity the answer left unchanged: its place or time still changes
        op = {"op": "update_node", "id": node_id, "set_fields": {}, "clear_fields": []}
        plan.ops.append(op)
        plan._updates[node_id] = op
    if scope is not None:
        op["scope"] = scope
    if story is not None:
        op["story_time"] = story
