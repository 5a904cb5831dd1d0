"""What every maintenance job shares: its report, the floor its commit is anchored at, the model it asks, and how
nodes are shown to that model."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry, RunContext, ToolOutput
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.usage import UsageLimits
from pydantic_ai.models import Model

from curator.errors import CuratorError
from curator.prompts import prompts_for
from curator.extract.extractor import failure_reason
from curator.store.graph import Node
from curator.llm.access import TaskModel
from curator.llm.records import LLMTrace, Usage
from curator.maintenance_settings import MaintenanceSettings
from curator.settings import Settings, Task
from curator.store.queries import GraphView
from curator.store.commit_log import last_anchor, last_floor
from curator.store.store import CommitRecord, Store
from curator.llm.usage import log_calls

if TYPE_CHECKING:
    from curator.vectors.index import VectorIndex

Progress = Callable[[int, int], None]
TASK: Task = "maintain"
T = TypeVar("T")


@dataclass
class MaintenanceReport:
    """What one maintenance operation did and cost. `changes` lists every change (one dict each, with an
    `action`); `skipped` says why nothing ran; `error` why it stopped (nothing of the failed step was written)."""

    op: str
    chat_id: str
    anchor_floor: int | None = None
    dry_run: bool = False
    skipped: str | None = None
    error: str | None = None
    commits: list[int] = field(default_factory=list)
    changes: list[dict[str, Any]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "chat": self.chat_id, "ok": self.ok, "anchor_floor": self.anchor_floor,
                "dry_run": self.dry_run, "skipped": self.skipped, "error": self.error, "commits": self.commits,
                "changes": self.changes, "details": self.details, "usage": self.usage.to_dict(),
                "seconds": round(self.seconds, 3)}

    def line(self) -> str:
        """One line for logs and the CLI."""
        what = (f"skipped: {self.skipped}" if self.skipped else
                f"{len(self.changes)} change(s){' (dry run)' if self.dry_run else ''} in {len(self.commits)} commit(s)")
        cost = f"{self.usage.calls} LLM calls, {self.usage.input_tokens}+{self.usage.output_tokens} tokens"
        error = f"; failed: {self.error}" if self.error else ""
        return f"{self.op} {self.chat_id}: {what} · {cost} · {self.seconds:.2f}s{error}"


def head_floor(store: Store, chat_id: str) -> int:
    """The floor at which maintenance runs now: the chat's last message, or (for a chat without messages) the
    newest floor any commit is anchored at. A rollback to this floor or below undoes the maintenance."""
    floor = last_floor(store, chat_id)
    return floor if floor is not None else last_anchor(store, chat_id) or 0


class Job:
    """One maintenance operation in progress: the store, settings, model and the trace of its LLM calls.
    `model` replaces the configured `maintain` profile (tests, scripted runs)."""

    def __init__(self, op: str, store: Store, settings: Settings, chat_id: str, *, model: Model | None = None,
                 index: Callable[[], VectorIndex] | None = None, anchor: int | None = None,
                 task: Task = TASK) -> None:
        store.chat(chat_id)  # a clear error for an unknown chat before anything else
        self.store, self.chat_id = store, chat_id
        self.prompts = prompts_for(store.data_dir)  # the data directory's own templates over the shipped ones
        self.settings = settings.for_chat(store.chat(chat_id).settings)
        self.schema = store.chat(chat_id).schema
        self._index = index
        self.task = task  # the model profile's task: `maintain`, or `summarize` for compression in the pipeline
        self._model = TaskModel(self.settings, task, model)  # the profile's limiter and retries (llm/access.py)
        self.trace = LLMTrace()
        self.report = MaintenanceReport(op, chat_id, anchor if anchor is not None else head_floor(store, chat_id))
        self.request_limit: int | None = None  # model requests this job may make (None: no cap)
        self.backoff: dict[str, tuple[int, int]] = {}  # see Maintainer
        self._started = time.perf_counter()
        self._agents: dict[int, Agent[_Check, Any]] = {}

    @property
    def cfg(self) -> MaintenanceSettings:
        return self.settings.maintenance

    @property
    def anchor(self) -> int:
        return self.report.anchor_floor or 0

    def graph(self) -> GraphView:
        return self.store.graph(self.chat_id)

    def index(self) -> VectorIndex:
        if self._index is None:
            raise CuratorError("this operation needs the vector index, and none was given")
        return self._index()

    def has_model(self) -> bool:
        return self._model.available()

    async def ask(self, output_type: type[BaseModel], prompt: str, check: Callable[[Any], None] | None = None,
                  system: str = "", settle: Callable[[Any], Any] | None = None) -> Any:
        """One structured request (with up to `output_retries` corrections): `check` raises ValueError with a
        precise message for an answer that cannot be applied, and the model is told so. `settle`: what to make of
        an answer that still fails `check` on the last try (e.g. a synopsis a little too long, clipped) instead of
        failing the job; it raises ValueError when there is nothing to keep."""
        agent = self._agents.get(id(output_type))
        if agent is None:
            agent = Agent[_Check, Any](None, output_type=ToolOutput(output_type, name="answer",
                                                                    description="Give your answer."),
                                       deps_type=_Check, system_prompt=system,
                                       retries={"output": self.cfg.output_retries},
                                       model_settings=self._model.agent_settings())
            agent.output_validator(_validate)
            self._agents[id(output_type)] = agent
        model = self._model.metered(self.trace)
        limits = None
        if self.request_limit is not None:
            remaining = self.request_limit - len(self.trace.records)
            if remaining <= 0:
                raise CallCapReached()
            limits = UsageLimits(request_limit=remaining)
        try:
            result = await agent.run(prompt, model=model, deps=_Check(check, settle), usage_limits=limits)
        except UsageLimitExceeded:
            raise CallCapReached() from None
        return result.output

    def commit(self, ops: list[Any], note: str) -> CommitRecord | None:
        if not ops:
            return None
        record = self.store.commit(self.chat_id, ops, self.anchor, "maintenance", note=note)
        self.report.commits.append(record.id)
        return record

    def fail(self, exc: BaseException) -> None:
        self.report.error = failure_reason(exc)

    def finish(self) -> MaintenanceReport:
        self.report.usage = self.trace.usage()
        self.report.seconds = time.perf_counter() - self._started
        log_calls(self.store, self.chat_id, self.trace.records)
        return self.report


class CallCapReached(CuratorError):
    """The scheduled passes after one step used up their model requests (`maintenance.max_calls_per_step`)."""

    def __init__(self) -> None:
        super().__init__("the model requests maintenance may make after one step (maintenance.max_calls_per_step) "
                         "were used up; what this pass had not committed waits for a later step",
                         "Raise maintenance.max_calls_per_step (0: no cap), or turn passes off (Settings).")


@dataclass
class _Check:
    """The per-request answer check, passed to the (cached) agent as its deps."""

    check: Callable[[Any], None] | None
    settle: Callable[[Any], Any] | None = None


def _validate(ctx: RunContext[_Check], answer: T) -> T:
    if ctx.deps.check is not None:
        try:
            ctx.deps.check(answer)
        except ValueError as exc:
            if ctx.deps.settle is not None and ctx.retry >= ctx.max_retries:  # the last try: keep what can be kept
                try:
                    settled: T = ctx.deps.settle(answer)  # an answer of the same model, made acceptable
                    return settled
                except ValueError:
                    pass
            raise ModelRetry(str(exc)) from None
    return answer


async def gather_limited(limit: int, jobs: list[Callable[[], Awaitable[T]]]) -> list[T]:
    """Run `jobs` (functions making coroutines, so one never started is never created) at most `limit` at a
    time; results in order; the first failure cancels the rest."""
    gate = asyncio.Semaphore(limit)

    async def run(make: Callable[[], Awaitable[T]]) -> T:
        async with gate:
            return await make()

    tasks = [asyncio.ensure_future(run(make)) for make in jobs]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def node_line(node: Node, with_id: bool = True) -> str:
    """A node as the model sees it: id, type, title, floors, then its fields."""
    fields = "; ".join(f"{k}: {' '.join(v.split())}" for k, v in node.fields.items() if v and v != node.title)
    floors = str(node.floor_from) if node.floor_from == node.floor_to else f"{node.floor_from}-{node.floor_to}"
    head = f"[{node.id}] " if with_id else ""
    return f"{head}{node.type} \"{node.title}\" (floors {floors}, importance {node.importance:g}): {fields}"
