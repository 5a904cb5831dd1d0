"""Scheduled maintenance after each extraction step (on by default, as in ST-BME), by the step's seq: consolidation
of the step's new nodes every step, a small summary when `small_every` extractions are pending, compression every
`compression.every`, forgetting every `forgetting.every` and reflection every `reflection.every` (the last two off
by default). Every job is anchored at the step's floor. A failing job is reported, never raised: extraction goes
on. The jobs after one step share `max_calls_per_step` model requests; a job past it waits for a later step."""

from __future__ import annotations

from curator.extract.extractor import ExtractionResult
from curator.maintenance.common import MaintenanceReport
from curator.maintenance.runner import Maintainer
from curator.settings import Settings


def due_jobs(settings: Settings, seq: int) -> list[str]:
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


PLAN_REQUESTS = 2  # the planner's own bound: one call, and one correction at most


async def after_extraction(maintainer: Maintainer, result: ExtractionResult) -> list[MaintenanceReport]:
    """Run what is due after a successful extraction step; returns a report per job that ran or was skipped."""
    if not result.ok or result.commit is None:
        return []
    settings = maintainer.settings.for_chat(maintainer.store.chat(result.chat_id).settings)
    # a scripted run (models given) runs only the passes it gave a model for: never a configured model
    scheduled = [] if maintainer.scripted and maintainer.model is None else due_jobs(settings, result.seq)
    reports = await _scheduled(maintainer, result, settings, scheduled)
    planning = not (maintainer.scripted and maintainer.plan_model is None)
    if planning and settings.planner.enabled and result.seq % settings.planner.every == 0:  # on its own cadence
        if maintainer.job("schedule", result.chat_id, anchor=result.floor, task="plan").has_model():
            maintainer.request_limit = PLAN_REQUESTS
            try:
                reports.append(await maintainer.plan(result.chat_id, anchor=result.floor, seq=result.seq))
            finally:
                maintainer.request_limit = None
        else:
            reports.append(MaintenanceReport("plan", result.chat_id, result.floor,
                                             skipped="no model for the planner (task `plan` or a `default` profile)"))
    return reports


async def _scheduled(maintainer: Maintainer, result: ExtractionResult, settings: Settings,
                     due: list[str]) -> list[MaintenanceReport]:
    if not due:
        return []
    reports: list[MaintenanceReport] = []
    has_model = maintainer.job("schedule", result.chat_id, anchor=result.floor).has_model()
    cap, used = settings.maintenance.max_calls_per_step, 0
    for name in due:
        if name != "forget" and not has_model:
            report = MaintenanceReport(name, result.chat_id, result.floor,
                                       skipped="no model for maintenance (task `maintain` or a `default` profile)")
            reports.append(report)
            continue
        if cap and used >= cap and name != "forget":
            reports.append(MaintenanceReport(name, result.chat_id, result.floor, skipped=(
                f"the {cap} model requests maintenance may make after one step are used "
                "(maintenance.max_calls_per_step); it runs at a later step")))
            continue
        maintainer.request_limit = cap - used if cap else None
        try:
            report = await _run_job(maintainer, name, result)
        finally:
            maintainer.request_limit = None
        used += report.usage.calls
        reports.append(report)
    return reports


async def _run_job(maintainer: Maintainer, name: str, result: ExtractionResult) -> MaintenanceReport:
    if name == "consolidate":
        ops = result.commit.ops if result.commit is not None else []
        nodes = [op["id"] for op in ops if op["op"] == "create_node"]
        return await maintainer.consolidate(result.chat_id, node_ids=nodes, anchor=result.floor)
    if name == "summarize":
        return await maintainer.summarize(result.chat_id, force=False, anchor=result.floor)
    if name == "compact":
        return await maintainer.compact(result.chat_id, anchor=result.floor)
    if name == "forget":
        return await maintainer.forget(result.chat_id, force=False, anchor=result.floor)
    return await maintainer.reflect(result.chat_id, force=False, anchor=result.floor)
