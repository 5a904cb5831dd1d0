"""Consolidation (Mem0-style dedupe / merge) and evolution of the nodes an extraction step wrote.

A gate decides whether a step is worth a model call: a latest-only node whose normalized name matches another
node's, or a node whose nearest neighbour of the same type is at least `threshold` similar, triggers it; so does
a step with `min_new_nodes` new nodes. Then one batched request decides, per new node, keep / merge / skip, with
an optional evolution of its neighbours; the decisions land as one commit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


from curator.errors import CuratorError
from curator.store.commit_log import newest_ops
from curator.store.graph import Node, normalize_name
from curator.store.ops import ArchiveNode, Link, Unlink, UpdateNode
from curator.maintenance.common import Job, node_line


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FieldUpdate(_Strict):
    node_id: str = Field(description="a neighbour's id")
    field: str = Field(description="the field to rewrite, e.g. its state or summary")
    value: str = Field(description="the whole new text of that field")


class Evolution(_Strict):
    connect: list[str] = Field(default_factory=list, description="neighbour ids the new node is related to")
    updates: list[FieldUpdate] = Field(default_factory=list, description="neighbour fields the new node changes")


class Decision(_Strict):
    node_id: str = Field(description="the new node's id")
    action: Literal["keep", "merge", "skip", "contradicts"]
    merge_target_id: str | None = Field(default=None, description="for merge: the neighbour it merges into; for "
                                        "contradicts: the neighbour it cannot be true together with")
    merged_fields: dict[str, str] = Field(default_factory=dict, description="for merge: the target's changed fields")
    evolution: Evolution | None = None
    reason: str = ""


class Decisions(_Strict):
    decisions: list[Decision]


@dataclass
class Candidate:
    node: Node
    neighbours: list[tuple[Node, float]]
    score: float = 0.0  # what the gate saw: 1 for a name match, else the top-1 similarity
    by: str = ""  # "name" | "vector" | ""


def new_nodes_of_steps(job: Job, steps: int) -> list[Node]:
    """The still active nodes created by the newest `steps` extraction commits."""
    commits = newest_ops(job.store, job.chat_id, "extract", steps)
    ids = [op["id"] for ops in reversed(commits) for op in ops if op["op"] == "create_node"]
    graph = job.graph()
    return [n for n in (graph.get(i) for i in dict.fromkeys(ids)) if n is not None and not n.archived]


def compatible(a: Node, b: Node) -> bool:
    """Whether two nodes may be the same memory: same type, same point of view, same region and story segment
    where both say one."""
    if a.type != b.type or a.scope.get("layer") != b.scope.get("layer") or a.scope.get("owner") != b.scope.get("owner"):
        return False
    for key, x, y in (("region", a.scope, b.scope), ("segment", a.story_time, b.story_time)):
        if x.get(key) and y.get(key) and x.get(key) != y.get(key):
            return False
    return True


def _names(job: Job, node: Node) -> set[str]:
    spec = job.schema.type(node.type)
    names = {normalize_name(node.title)} | {
        normalize_name(node.fields.get(f, "")) for f in (spec.primary_key if spec else ())
    }
    names.discard("")
    return names


def gather_candidates(job: Job, nodes: list[Node]) -> list[Candidate]:
    """Each new node with its compatible neighbours (old nodes only) and its gate score."""
    index = job.index()
    index.function.embedder  # noqa: B018 - builds the embedder: a missing key or model fails here, clearly
    synced = index.sync(job.chat_id)
    failed = {i: e for i, e in synced.failed.items() if i in {n.id for n in nodes}}
    if failed:
        raise CuratorError(f"embedding failed for {', '.join(failed)}: {next(iter(failed.values()))}")
    graph = job.graph()
    new_ids = {n.id for n in nodes}
    k = job.cfg.consolidation.neighbours
    found = []
    for node in nodes:
        spec = job.schema.type(node.type)
        candidate = Candidate(node, [])
        if spec is not None and spec.identity == "latest_only":
            names = _names(job, node)
            for other in graph.nodes(type=node.type):
                if other.id not in new_ids and compatible(node, other) and names & _names(job, other):
                    candidate.neighbours.append((other, 1.0))
                    candidate.score, candidate.by = 1.0, "name"
        where = {"$and": [{"type": node.type}, {"archived": False}]}
        for other_id, similarity in index.neighbours(job.chat_id, node.id, k + len(new_ids), where=where):
            near = graph.get(other_id)
            if near is None or near.archived or near.id in new_ids or not compatible(node, near):
                continue
            other = near
            if any(o.id == other.id for o, _ in candidate.neighbours):
                continue
            candidate.neighbours.append((other, similarity))
            if similarity > candidate.score and candidate.by != "name":
                candidate.score, candidate.by = similarity, "vector"
        candidate.neighbours = candidate.neighbours[:k]
        found.append(candidate)
    return found


DUPLICATE_SIMILARITY = 0.85  # an embedder that says nothing of its own (OpenAI-compatible endpoints, Cohere)


def gate(job: Job, candidates: list[Candidate]) -> tuple[bool, str]:
    threshold = job.cfg.consolidation.threshold
    if threshold is None:  # the similarity a near-duplicate reaches depends on the embedder's space
        threshold = getattr(job.index().function.embedder, "duplicate_similarity", DUPLICATE_SIMILARITY)
    triggered = [c for c in candidates if c.neighbours and (c.by == "name" or c.score >= threshold)]
    if len(candidates) >= job.cfg.consolidation.min_new_nodes:
        return True, f"{len(candidates)} new nodes (>= {job.cfg.consolidation.min_new_nodes})"
    if triggered:
        first = triggered[0]
        return True, f"{first.node.id} matches {first.neighbours[0][0].id} ({first.by}, {first.score:.2f})"
    return False, (f"no new node reaches similarity {threshold} and fewer than "
                   f"{job.cfg.consolidation.min_new_nodes} new nodes")


async def consolidate(job: Job, nodes: list[Node], force: bool = False) -> None:
    """Consolidate `nodes` (new nodes of a step) against the rest of the graph. `force` skips the gate and
    (the `evolve` operation) asks about every node that has neighbours."""
    if not job.cfg.consolidation.enabled and not force:
        job.report.skipped = "consolidation is disabled (maintenance.consolidation.enabled)"
        return
    if not nodes:
        job.report.skipped = "no new active nodes to consolidate"
        return
    try:
        candidates = gather_candidates(job, nodes)
    except (CuratorError, ImportError, OSError) as exc:
        job.report.skipped = f"no embedder available ({exc}); consolidation needs the vector index"
        return
    job.report.details["gate"] = [{"node": c.node.id, "score": round(c.score, 4), "by": c.by,
                                   "neighbours": [o.id for o, _ in c.neighbours]} for c in candidates]
    if not force:
        run, why = gate(job, candidates)
        job.report.details["gate_reason"] = why
        if not run:
            job.report.skipped = f"gate: {why}"
            return
    asked = [c for c in candidates if c.neighbours]
    if not asked:
        job.report.skipped = "no new node has a compatible neighbour; every node kept"
        return
    by_id = {c.node.id: c for c in asked}
    prompt = job.prompts.render("maintain_consolidate", nodes="\n\n".join(_describe(c) for c in asked))
    answer: Decisions = await job.ask(Decisions, prompt, lambda a: _check(job, a, by_id),
                                      system=job.prompts.render("maintain_system"))
    ops, changes = _plan(job, answer, by_id)
    job.commit(ops, f"{job.report.op}: " + ", ".join(f"{c['node']} {c['action']}" for c in changes))
    job.report.changes += changes


def _describe(c: Candidate) -> str:
    lines = [f"NEW {node_line(c.node)}"]
    lines += [f"  neighbour ({similarity:.2f}) {node_line(other)}" for other, similarity in c.neighbours]
    return "\n".join(lines)


def _check(job: Job, answer: Decisions, by_id: dict[str, Candidate]) -> None:
    errors, seen = [], set()
    for d in answer.decisions:
        c = by_id.get(d.node_id)
        if c is None:
            errors.append(f"{d.node_id!r} is not one of the new nodes ({', '.join(by_id)})")
            continue
        if d.node_id in seen:
            errors.append(f"{d.node_id!r} has more than one decision")
        seen.add(d.node_id)
        neighbours = {o.id: o for o, _ in c.neighbours}
        if d.action == "contradicts" and d.merge_target_id not in neighbours:
            errors.append(f"{d.node_id}: contradicts needs merge_target_id, one of its neighbours: "
                          f"{', '.join(neighbours)}")
        if d.action == "merge":
            target = neighbours.get(d.merge_target_id or "")
            if target is None:
                errors.append(f"{d.node_id}: merge_target_id must be one of its neighbours: {', '.join(neighbours)}")
            else:
                errors += _unknown_fields(job, target, d.merged_fields, d.node_id)
        if d.evolution:
            for other in d.evolution.connect:
                if other not in neighbours:
                    errors.append(f"{d.node_id}: evolution.connect names {other!r}, not one of its neighbours")
            for update in d.evolution.updates:
                target = neighbours.get(update.node_id)
                if target is None:
                    errors.append(f"{d.node_id}: evolution.updates names {update.node_id!r}, not one of its neighbours")
                else:
                    errors += _unknown_fields(job, target, {update.field: update.value}, d.node_id)
    missing = [i for i in by_id if i not in seen]
    if missing:
        errors.append(f"no decision for: {', '.join(missing)}")
    if errors:
        raise ValueError("; ".join(errors))


def _unknown_fields(job: Job, target: Node, values: dict[str, str], who: str) -> list[str]:
    spec = job.schema.type(target.type)
    known = spec.field_names if spec else tuple(target.fields)
    bad = [name for name in values if name not in known]
    return [f"{who}: {target.id} ({target.type}) has no field(s) {', '.join(bad)}; its fields: {', '.join(known)}"] \
        if bad else []


def _plan(job: Job, answer: Decisions, by_id: dict[str, Candidate]) -> tuple[list[Any], list[dict[str, Any]]]:
    ops: list[Any] = []
    changes: list[dict[str, Any]] = []
    strength = job.cfg.consolidation.evolution_strength
    related = job.schema.relation("related") is not None
    updated: dict[str, dict[str, str]] = {}  # neighbour -> fields as this commit leaves them
    for d in answer.decisions:
        node = by_id[d.node_id].node
        neighbours = {o.id: o for o, _ in by_id[d.node_id].neighbours}
        if d.action == "skip":
            ops.append(ArchiveNode(id=node.id))
            changes.append({"action": "skip", "node": node.id, "reason": d.reason})
        elif d.action == "contradicts" and job.schema.relation("contradicts") is not None:
            # not decided here: both stay, linked, and wait in the inbox (curator/maintenance/contradictions.py)
            ops.append(Link(source=node.id, target=d.merge_target_id, relation="contradicts",
                            valid_from=node.floor_to))
            changes.append({"action": "contradicts", "node": node.id, "target": d.merge_target_id,
                            "reason": d.reason})
        elif d.action == "merge":
            target = neighbours[d.merge_target_id or ""]
            current = updated.setdefault(target.id, dict(target.fields))
            fields = {k: v for k, v in d.merged_fields.items() if v.strip() and current.get(k) != v} \
                or {k: v for k, v in node.fields.items() if v.strip() and not current.get(k, "").strip()}
            current.update(fields)
            ops.append(UpdateNode(id=target.id, set_fields=fields, floor_from=min(target.floor_from, node.floor_from),
                                  floor_to=max(target.floor_to, node.floor_to),
                                  importance=max(target.importance, node.importance)))
            ops += _move_edges(job, node.id, target.id)
            ops.append(ArchiveNode(id=node.id))
            changes.append({"action": "merge", "node": node.id, "target": target.id, "fields": sorted(fields),
                            "reason": d.reason})
        else:
            change: dict[str, Any] = {"action": "keep", "node": node.id, "reason": d.reason}
            if d.evolution:
                if related:
                    ops += [Link(source=node.id, target=other, relation="related", strength=strength)
                            for other in dict.fromkeys(d.evolution.connect)]
                    change["connected"] = list(dict.fromkeys(d.evolution.connect))
                history = []
                for u in d.evolution.updates:
                    current = updated.setdefault(u.node_id, dict(neighbours[u.node_id].fields))
                    if current.get(u.field) == u.value:
                        continue
                    history.append({"node": u.node_id, "field": u.field, "before": current.get(u.field, ""),
                                    "after": u.value})
                    current[u.field] = u.value
                    ops.append(UpdateNode(id=u.node_id, set_fields={u.field: u.value}))
                if history:
                    change["evolved"] = history
            changes.append(change)
    return ops, changes


def _move_edges(job: Job, old: str, new: str) -> list[Any]:
    """Ops that re-attach the edges of a merged node to its target (skipping any that would loop)."""
    ops: list[Any] = []
    for edge in job.graph().edges(old):
        source = new if edge.source == old else edge.source
        target = new if edge.target == old else edge.target
        ops.append(Unlink(id=edge.id))
        if source != target:
            ops.append(Link(source=source, target=target, relation=edge.relation, strength=edge.strength,
                            valid_from=edge.valid_from, valid_to=edge.valid_to))
    return ops
