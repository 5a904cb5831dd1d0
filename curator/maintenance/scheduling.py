"""Scheduled maintenance after each extraction step, by the step's seq: consolidation of the step's new nodes
every step, a small summary when `small_every` extractions are pending, compression every `compression.every`,
forgetting every `forgetting.every` and reflection every `reflection.every` (the last two off by default).
Every job is anchored at the step's floor. A failing job is reported, never raised: extraction goes on."""

from __future__ import annotations

from curator.extract.extractor import ExtractionResult
from curator.maintenance.common import MaintenanceReport
from curator.maintenance.runner import Maintainer


def due_jobs(settings, seq: int) -> list[str]:
    """The jobs due after the extraction with this seq, in the order they run."""
    cfg = settings.maintenance
    if not cfg.auto:
        return []
    jobs = []
    if cfg.consolidation.enabled:
        jobs.append("consolidate")
    if cfg.summaries.enabled:
        jobs.append("summarize")
    if cfg.compression.auto and seq % cfg.compression.every == 0:
        jobs.append("compact")
    if cfg.forgetting.enabled and seq % cfg.forgetting.every == 0:
        jobs.append("forget")
    if cfg.reflection.enabled and seq % cfg.reflection.every == 0:
        jobs.append("reflect")
    return jobs


async def after_extraction(maintainer: Maintainer, result: ExtractionResult) -> list[MaintenanceReport]:
    """Run what is due after a successful extraction step; returns a report per job that ran or was skipped."""
    if not result.ok or result.commit is None:
        return []
    settings = maintainer.settings.for_chat(maintainer.store.chat(result.chat_id).settings)
    due = due_jobs(settings, result.seq)
    if not due:
        return []
    reports = []
    has_model = maintainer.job("schedule", result.chat_id, anchor=result.floor).has_model()
    for name in due:
        if name != "forget" and not has_model:
            report = MaintenanceReport(name, result.chat_id, result.floor,
                                       skipped="no model for maintenance (task `maintain` or a `default` profile)")
            reports.append(report)
            continue
        if name == "consolidate":
            nodes = [op["id"] for op in result.commit.ops if op["op"] == "create_node"]
            report = await maintainer.consolidate(result.chat_id, node_ids=nodes, anchor=result.floor)
        elif name == "summarize":
            report = await maintainer.summarize(result.chat_id, force=False, anchor=result.floor)
        elif name == "compact":
            report = await maintainer.compact(result.chat_id, anchor=result.floor)
        elif name == "forget":
            report = await maintainer.forget(result.chat_id, force=False, anchor=result.floor)
        else:
            report = await maintainer.reflect(result.chat_id, force=False, anchor=result.floor)
        reports.append(report)
    return reports
