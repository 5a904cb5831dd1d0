"""Forgetting (the sleep cycle): archive, never delete, nodes whose retention value has fallen below a threshold.

    retention = (importance / 10) x 1 / (1 + log10(1 + age_hours)) x (1 + access_count / max(1, age_hours / 24))

Age is wall-clock hours since the node was created, or (setting `age: floors`) the floors the story has moved on
since the node's last floor, `floors_per_hour` floors counting as an hour, so a paused chat forgets nothing.
Exempt: the exempt types, nodes at least `exempt_importance` important, and nodes younger than `min_age_hours`.
A node without an access count counts 0 accesses (the original computed NaN there and never forgot it)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from curator.store.graph import Node
from curator.store.ops import ArchiveNode
from curator.maintenance.common import Job


def retention(importance: float, age_hours: float, access_count: int | None) -> float:
    age_hours = max(0.0, age_hours)
    accesses = access_count if isinstance(access_count, int | float) and math.isfinite(access_count) else 0
    recency = 1.0 / (1.0 + math.log10(1.0 + age_hours))
    frequency = accesses / max(1.0, age_hours / 24.0)
    return (importance / 10.0) * recency * (1.0 + frequency)


def age_hours(job: Job, node: Node, now: datetime, head: int) -> float:
    cfg = job.cfg.forgetting
    if cfg.age == "floors":
        return max(0, head - node.floor_to) / float(cfg.floors_per_hour)
    created = datetime.fromisoformat(node.created_at)
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    return (now - created).total_seconds() / 3600.0


def forget(job: Job, dry_run: bool = False, force: bool = False, now: datetime | None = None) -> None:
    """Archive the nodes below the threshold (or, in a dry run, only list them with their scores)."""
    cfg = job.cfg.forgetting
    job.report.dry_run = dry_run
    if not cfg.enabled and not force and not dry_run:
        job.report.skipped = "forgetting is disabled (maintenance.forgetting.enabled)"
        return
    now = now or datetime.now(UTC)
    exempt_types = set(cfg.exempt_types)
    doomed, kept, exempt = [], 0, 0
    for node in job.graph().nodes():
        if node.type in exempt_types or node.importance >= cfg.exempt_importance:
            exempt += 1
            continue
        age = age_hours(job, node, now, job.anchor)
        if age < cfg.min_age_hours:
            exempt += 1
            continue
        score = retention(node.importance, age, node.access_count)
        if score < cfg.threshold:
            doomed.append((node, score, age))
        else:
            kept += 1
    job.report.details.update(threshold=cfg.threshold, age=cfg.age, kept=kept, exempt=exempt)
    job.report.changes = [{"action": "archive", "node": n.id, "type": n.type, "title": n.title,
                           "retention": round(score, 4), "age_hours": round(age, 2)} for n, score, age in doomed]
    if not dry_run:
        job.commit([ArchiveNode(id=n.id) for n, _, _ in doomed], f"forget: {len(doomed)} node(s) archived")
    if not doomed:
        job.report.skipped = f"no node's retention is below {cfg.threshold}"
