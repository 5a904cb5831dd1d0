"""The story fields of the curator's write tools: the same story time, place, point of view and `known_by` the
extractor's items carry (see `curator/store/story_time.py`), normalised by the same clock, with errors as ToolErrors."""

from __future__ import annotations

from typing import Any

from curator.schemas import Schema, TypeSpec
from curator.store.story_time import KNOWS, STORY_FIELDS, StoryClock, StoryInputError, region_path, story_fields

from curator.store.graph import Node
from curator.tools.workspace import ToolError, Workspace


def story_args(schema: Schema, spec: TypeSpec) -> dict[str, Any]:
    """Extra tool arguments for a `story` type (none for the others)."""
    return story_fields(schema.relation(KNOWS) is not None, described=True) if spec.story else {}


def story_ops(ws: Workspace, spec: TypeSpec, given: Any, op: dict[str, Any]) -> list[dict[str, Any]]:
    """Put scope/story_time on `op` (a create or update) from the tool's arguments; return the `knows` links to
    stage after it (their target is filled in by the caller once the node id is known: key `target` = None)."""
    if not spec.story:
        return []
    values = {k: getattr(given, k, None) for k in STORY_FIELDS}
    try:
        clock = StoryClock((n.story_time.get("label"), n.story_time.get("segment"))
                           for n in ws.graph.nodes(archived=None))
        story = clock.place(values["story_time"], values["scene"], bool(values["flashback"]))
        region = region_path(values["region"], values["region_path"])
    except StoryInputError as exc:
        raise ToolError(str(exc)) from None
    owner = " ".join((values["pov"] or "").split()) or None
    if owner is not None:
        owner = _character(ws, owner, "pov").title
    if story is not None:
        op["story_time"] = story
    if owner is not None or region is not None:
        current = ws.node(op["id"]).scope if op["op"] == "update_node" else {}
        owner = owner or current.get("owner")  # an edit changes only what it gives
        op["scope"] = {"layer": "pov" if owner else "objective", "owner": owner,
                       "region": region or current.get("region")}
    links = []
    for name in values.get("known_by") or []:
        if name and name.strip():
            links.append({"op": "link", "source": _character(ws, name, "known_by").id, "target": None,
                          "relation": KNOWS, "valid_from": ws.anchor})
    return links


def _character(ws: Workspace, name: str, what: str) -> Node:
    node = ws.graph.get(name.strip())
    if node is not None:
        return node
    found = ws.graph.find_by_name(name)
    if not found:
        raise ToolError(f"{what}: {name!r} names no node; give the id or name of a known character",
                        "Create the character first, or leave it out.")
    return max(found, key=lambda n: (n.floor_to, n.updated_at))
