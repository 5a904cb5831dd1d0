"""The maintenance operations of one store, each returning a MaintenanceReport: `compact`, `consolidate`,
`summarize`, `forget`, `reflect`, `evolve`. Every step that changes the graph is its own commit (origin
`maintenance`) anchored at the floor where it ran; a failed step commits nothing and is reported, never raised."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING

from pydantic_ai.models import Model

from curator.errors import CuratorError
from curator.settings import Settings, Task
from curator.store.graph import Node
from curator.store.store import Store
from curator.maintenance.common import Job, MaintenanceReport, Progress
from curator.maintenance.compression import compress
from curator.maintenance.consolidation import consolidate, new_nodes_of_steps
from curator.maintenance.forgetting import forget
from curator.maintenance.planner import plan
from curator.maintenance.reflection import reflect
from curator.maintenance.summaries import note_outcome, summarize

if TYPE_CHECKING:
    from curator.vectors.index import VectorIndex


class Maintainer:
    """`model` replaces the configured `maintain` profile; `index` opens the vector index when a job needs it.
    `backoff` (chat -> the extraction seq of the last failed scheduled summary and how many failed in a row) is kept
    by the caller across steps, so a failing synopsis is not paid for at every step. `request_limit`, when set, caps
    the model requests of each job started (the scheduled passes after one step share `max_calls_per_step`)."""

    def __init__(self, store: Store, settings: Settings, model: Model | None = None,
                 index: Callable[[], VectorIndex] | None = None,
                 backoff: dict[str, tuple[int, int]] | None = None) -> None:
        self.store, self.settings, self.model, self.index = store, settings, model, index
        self.backoff = backoff if backoff is not None else {}
        self.request_limit: int | None = None
        self.plan_model: Model | None = None  # replaces the configured `plan` profile (the plot planner)
        self.scripted = False  # after a step of a scripted run: only the passes given a model run

    def job(self, op: str, chat_id: str, anchor: int | None = None, task: Task = "maintain") -> Job:
        model = self.plan_model if task == "plan" else self.model
        job = Job(op, self.store, self.settings, chat_id, model=model, index=self.index, anchor=anchor, task=task)
        job.request_limit, job.backoff = self.request_limit, self.backoff
        return job

    async def _run(self, job: Job, work: Awaitable[object]) -> MaintenanceReport:
        try:
            await work
        except CuratorError as exc:
            if "no model profile" in str(exc) and not job.report.changes:
                job.report.skipped = f"no model for maintenance: {exc}"
                job.report.details["hint"] = exc.hint
            else:
                job.fail(exc)
        except Exception as exc:  # noqa: BLE001 - model/HTTP failures of any kind: reported, the step committed nothing
            job.fail(exc)
        return job.finish()

    async def compact(self, chat_id: str, types: list[str] | None = None, progress: Progress | None = None,
                      anchor: int | None = None, task: Task = "maintain") -> MaintenanceReport:
        job = self.job("compact", chat_id, anchor, task)
        return await self._run(job, compress(job, types, progress))

    async def consolidate(self, chat_id: str, steps: int = 1, node_ids: list[str] | None = None,
                          anchor: int | None = None) -> MaintenanceReport:
        """Consolidate the new nodes of the newest `steps` extraction steps (or the nodes named), gate first."""
        job = self.job("consolidate", chat_id, anchor)
        return await self._run(job, consolidate(job, self._nodes(job, steps, node_ids)))

    async def evolve(self, chat_id: str, steps: int = 1, node_ids: list[str] | None = None) -> MaintenanceReport:
        """Force consolidation/evolution of recent nodes against their neighbours, without the gate."""
        job = self.job("evolve", chat_id)
        return await self._run(job, consolidate(job, self._nodes(job, steps, node_ids), force=True))

    async def summarize(self, chat_id: str, force: bool = True, anchor: int | None = None) -> MaintenanceReport:
        """Write the small synopsis when due (`force`: now), then roll synopses up. A scheduled run that fails
        holds the next scheduled one back (`summaries.backoff`); one that succeeds clears that."""
        job = self.job("summarize", chat_id, anchor)
        report = await self._run(job, summarize(job, force=force))
        if not force:
            note_outcome(job)
        return report

    async def plan(self, chat_id: str, anchor: int | None = None, seq: int | None = None) -> MaintenanceReport:
        """The plot planner: propose the next beats (one model call of the `plan` task), kept as a plan."""
        job = self.job("plan", chat_id, anchor, task="plan")
        return await self._run(job, plan(job, seq))

    async def reflect(self, chat_id: str, force: bool = True, anchor: int | None = None) -> MaintenanceReport:
        job = self.job("reflect", chat_id, anchor)
        return await self._run(job, reflect(job, force=force))

    async def forget(self, chat_id: str, dry_run: bool = False, force: bool = True, anchor: int | None = None,
                     now: datetime | None = None) -> MaintenanceReport:
        job = self.job("forget", chat_id, anchor)

        async def work() -> None:
            forget(job, dry_run=dry_run, force=force, now=now)

        return await self._run(job, work())

    @staticmethod
    def _nodes(job: Job, steps: int, node_ids: list[str] | None) -> list[Node]:
        if node_ids is None:
            return new_nodes_of_steps(job, steps)
        graph = job.graph()
        nodes = [graph.get(i) for i in node_ids]
        missing = [i for i, n in zip(node_ids, nodes) if n is None]
        if missing:
            raise CuratorError(f"no node(s) {', '.join(missing)} in chat {job.chat_id!r}",
                               "List nodes with `curator show --chat ID`.")
        return [n for n in nodes if n is not None and not n.archived]
