"""Compaction tools: which nodes are due to be folded (candidates), and KEEP / FOLD / DROP decisions on groups
of them. FOLD merges a group into one summary node a level up (children archived under it, importance the
maximum, floor range the union, outside links moved to it, inside links dropped); KEEP lifts a milestone a
level up untouched, so it is not offered at this depth again; DROP archives routine nodes with no summary."""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from curator.vectors.documents import node_document
from curator.store.graph import Node
from curator.store.ops import new_node_id
from curator.schemas import TypeSpec

from curator.tools.read import brief
from curator.tools.workspace import ToolError, Workspace

MIN_SUMMARY_CHARS = 200  # the length cap never goes below this, so a fold of short children stays possible


def _compressed(ws: Workspace, type_name: str) -> TypeSpec:
    spec = ws.spec(type_name)
    if spec.compression.mode != "hierarchical":
        compressed = [n for n, s in ws.schema.types.items() if s.compression.mode == "hierarchical"]
        raise ToolError(f"type {type_name!r} is not compressed (compression mode {spec.compression.mode!r})",
                        f"Compressed types: {', '.join(compressed) or 'none'}.")
    return spec


def roots(ws: Workspace, type_name: str, depth: int) -> list[str]:
    """Ids of the active, unfolded nodes of a type at one level, in story order."""
    return ws.graph.roots(type_name, depth)


def candidate_groups(ws: Workspace, spec: TypeSpec, depth: int) -> tuple[list[list[str]], int, str]:
    """Consecutive groups of `fan_in` roots at `depth` (the newest `keep_recent_leaves` leaves stay out at depth
    0), once there are at least `threshold` roots; the remainder waits. Returns the groups, the number of roots
    considered and why (not)."""
    c = spec.compression
    if depth >= c.max_depth:
        return [], 0, f"depth {depth} is the top depth of {spec.name!r} (max_depth {c.max_depth})"
    nodes = roots(ws, spec.name, depth)
    if depth == 0 and c.keep_recent_leaves:
        nodes = nodes[:-c.keep_recent_leaves]
    if len(nodes) < max(2, c.threshold):
        return [], len(nodes), f"{len(nodes)} node(s) at depth {depth}, below the threshold of {max(2, c.threshold)}"
    groups = [nodes[i:i + c.fan_in] for i in range(0, len(nodes) - c.fan_in + 1, c.fan_in)]
    return groups, len(nodes), f"{len(nodes)} node(s) at depth {depth}: {len(groups)} group(s) of {c.fan_in}"


def memory_compaction_candidates(ws: Workspace, type: str, depth: int = 0, limit: int = 10) -> dict[str, Any]:
    """Groups of nodes of a compressed type that are due to be folded at one depth (0 = leaves): consecutive
    unfolded nodes, `fan_in` at a time, once there are `threshold` of them (the newest leaves stay out). The
    oldest `limit` groups are shown. Decide them with memory_compact_nodes, call this again until no group is
    offered, then go on with the next depth."""
    spec = _compressed(ws, type)
    if depth < 0:
        raise ToolError("depth must be >= 0")
    groups, count, why = candidate_groups(ws, spec, depth)
    c = spec.compression
    shown = [[ws.node(i) for i in group] for group in groups[:max(1, min(limit, 50))]]
    return {"type": type, "depth": depth, "nodes_at_depth": count, "why": why, "groups_waiting": len(groups),
            "settings": {"fan_in": c.fan_in, "threshold": c.threshold, "keep_recent_leaves": c.keep_recent_leaves,
                         "max_depth": c.max_depth},
            "groups": [{"node_ids": [n.id for n in group], "nodes": [brief(n, ws, chars=400) for n in group],
                        "fold_limits": summary_limits(depth + 1, len(group), _chars(ws, group))} for group in shown]}


def _chars(ws: Workspace, nodes: list[Node]) -> int:
    return sum(len(node_document(n, ws.schema)) for n in nodes)


class CompactGroup(BaseModel):
    """One decision on a group of nodes."""

    model_config = ConfigDict(extra="forbid")
    decision: Literal["KEEP", "FOLD", "DROP"] = Field(
        description="FOLD: merge into one summary a level up; KEEP: a milestone, left as it is; DROP: routine, "
                    "archived without a summary")
    node_ids: list[str] = Field(min_length=1, description="the nodes of the group (unfolded nodes of `type`)")
    summary: str | None = Field(default=None, description="FOLD only: the summary text, within the length limits")
    title: str | None = Field(default=None, description="FOLD only: a title for the summary (optional)")


def summary_limits(level: int, children: int, children_chars: int) -> dict[str, Any]:
    """How long a summary at `level` may be: fewer lines and characters the higher it sits."""
    if level <= 1:
        lines, share = max(5, math.ceil(children / 2)), 0.5
    elif level == 2:
        lines, share = max(4, math.ceil(children / 3)), 0.35
    else:
        lines, share = 4, 0.2
    return {"max_lines": lines, "max_chars": max(MIN_SUMMARY_CHARS, int(share * children_chars))}


def memory_compact_nodes(ws: Workspace, type: str, groups: list[CompactGroup]) -> dict[str, Any]:
    """Decide groups of unfolded nodes of a compressed type. FOLD writes one summary node a level above the
    group (keep irreversible milestones, fold same-kind actions into one line, drop routine steps; shorter the
    higher it sits) and archives the group under it; KEEP leaves a milestone as it is (lifted a level, so it is
    not offered again); DROP archives routine nodes without a summary. All groups land together or none does."""
    spec = _compressed(ws, type)
    if not groups:
        raise ToolError("groups is empty", "Give at least one {decision, node_ids} group.")
    seen: set[str] = set()
    ops: list[dict[str, Any]] = []
    numbers = _Numbers(ws, spec)
    report = []
    for index, group in enumerate(groups):
        where = f"groups[{index}]"
        nodes = []
        for node_id in group.node_ids:
            if node_id in seen:
                raise ToolError(f"{where}: node {node_id!r} is in more than one group")
            seen.add(node_id)
            node = ws.node(node_id, type, active=True)
            if node.parent is not None:
                raise ToolError(f"{where}: node {node_id!r} is already folded into {node.parent!r}")
            nodes.append(node)
        if group.decision == "FOLD":
            op, level = _fold(ws, spec, nodes, group, where, numbers)
            ops.append(op)
            report.append({"decision": "FOLD", "nodes": len(nodes), "summary_id": op["id"], "level": level})
        else:
            if group.summary or group.title:
                raise ToolError(f"{where}: {group.decision} takes no summary or title",
                                "Only FOLD writes a summary; drop the summary, or make the group a FOLD.")
            for node in nodes:
                if group.decision == "KEEP":
                    ops.append({"op": "update_node", "id": node.id, "level": node.level + 1})
                else:
                    ops.append({"op": "archive_node", "id": node.id})
            report.append({"decision": group.decision, "nodes": len(nodes)})
    ws.stage(ops)
    return {"ok": True, "groups": report}


def _fold(ws: Workspace, spec: TypeSpec, nodes: list[Node], group: CompactGroup, where: str,
          numbers: _Numbers) -> tuple[dict[str, Any], int]:
    if len(nodes) < 2:
        raise ToolError(f"{where}: FOLD needs at least 2 nodes", "KEEP or DROP a single node instead.")
    level = max(n.level for n in nodes) + 1
    if level > spec.compression.max_depth:
        raise ToolError(f"{where}: a summary at level {level} would exceed max_depth {spec.compression.max_depth}")
    text = (group.summary or "").strip()
    if not text:
        raise ToolError(f"{where}: FOLD needs a summary", "Write the summary of the group in `summary`.")
    limits = summary_limits(level, len(nodes), _chars(ws, nodes))
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) > limits["max_lines"] or len(text) > limits["max_chars"]:
        raise ToolError(
            f"{where}: the summary has {len(lines)} lines and {len(text)} characters; at level {level} it may have "
            f"at most {limits['max_lines']} lines and {limits['max_chars']} characters",
            "Shorten it: keep the milestones, fold same-kind actions, drop routine steps.")
    field_name = _text_field(spec)
    return {"op": "compact", "id": new_node_id(), "type": spec.name, "fields": {field_name: text},
            "title": (group.title or "").strip() or numbers.next_title(text), "children": [n.id for n in nodes]}, level


def _text_field(spec: TypeSpec) -> str:
    """Where a summary's text goes: the first required field that is not part of the name, else the first field."""
    return next((f for f in spec.required_fields if f not in spec.primary_key), spec.field_names[0])


class _Numbers:
    """Titles for summaries from the type's template ("Summary {n}", numbered on from the highest used)."""

    def __init__(self, ws: Workspace, spec: TypeSpec) -> None:
        self.template = spec.title_template if spec.title_template and "{n}" in spec.title_template else None
        self.next = 1
        if self.template:
            pattern = re.compile("^" + re.escape(self.template).replace(r"\{n\}", r"(\d+)") + "$")
            used = [int(m.group(1)) for t in ws.graph.titles(spec.name) if (m := pattern.match(t))]
            self.next = max(used, default=0) + 1

    def next_title(self, text: str) -> str:
        if self.template:
            self.next += 1
            return self.template.replace("{n}", str(self.next - 1))
        first = " ".join(text.split())
        return first if len(first) <= 80 else first[:79] + "…"

