"""How every task reaches its model, in one place: extraction, the curator agent, maintenance, compression and
recall's LLM stages (query rewrite, llm recall, rerank) all go through `TaskModel`.

- The configured model of a task is its profile's, shared per profile and event loop (`clients.py`); its retry
  policy lives in that model's transport, so it is the same whoever calls.
- A profile's `rpm` is one limit for the whole process: every task (and thread, and event loop) using the profile
  waits on the same `RateLimiter`, so two tasks on one profile never double its rate.
- Every request is metered into the caller's trace (`MeteredModel`), which the caller writes to the store's usage
  log, so each call appears in `curator usage`.
- `Models` carries the models a program gives in place of the configured ones (tests, scripted runs, an agent's own
  model): one typed object through every layer instead of four loose arguments.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from curator.llm.records import CallRecord

if TYPE_CHECKING:  # nothing heavy at import: the library's face imports `Models`
    from pydantic_ai.models import Model
    from pydantic_ai.settings import ModelSettings

    from curator.llm.models import RateLimiter
    from curator.settings import ModelProfile, Settings, Task


@dataclass(frozen=True)
class Models:
    """Models that replace the configured profiles' for some tasks. A model given for one task is never used for
    another; and once a model is given, the tasks that only follow it (scheduled maintenance after an extraction
    step, compression after a floor) run only when given one too: a scripted run never calls a configured model."""

    extract: Model | None = None
    curate: Model | None = None
    maintain: Model | None = None
    summarize: Model | None = None
    plan: Model | None = None  # the plot planner

    def given(self) -> bool:
        return any(m is not None for m in (self.extract, self.curate, self.maintain, self.summarize, self.plan))

    def with_task(self, task: str, model: Model | None) -> Models:
        """These models with `model` for `task` (unchanged when `model` is None)."""
        return self if model is None else replace(self, **{task: model})


NO_MODELS = Models()

_limiters: dict[str, RateLimiter] = {}
_limiters_guard = threading.Lock()


def limiter_for(profile: ModelProfile) -> RateLimiter:
    """The one rate limiter of a profile in this process (keyed by everything the profile says)."""
    from curator.llm.models import RateLimiter

    key = profile.model_dump_json()
    with _limiters_guard:
        limiter = _limiters.get(key)
        if limiter is None:
            limiter = _limiters[key] = RateLimiter(profile.rpm)
        return limiter


class TaskModel:
    """The model of one task: `given` (it replaces the configured one), else the task's profile's. `label` is the
    task name calls are recorded under (default: the task)."""

    def __init__(self, settings: Settings, task: Task, given: Model | None = None, label: str | None = None) -> None:
        self.settings, self.task, self.given, self.label = settings, task, given, label or task

    @property
    def profile(self) -> ModelProfile | None:
        """The task's configured profile, or None when none is configured."""
        return self.settings.profiles.get(self.settings.tasks.get(self.task, "default"))

    def available(self) -> bool:
        """Whether a call could be made: a model is given or the task has a profile."""
        return self.given is not None or self.profile is not None

    def agent_settings(self) -> ModelSettings | None:
        """The profile's request settings (temperature, max tokens) for an agent; None for a given model."""
        from curator.llm.models import model_settings

        profile = self.profile
        return model_settings(profile) if profile is not None and self.given is None else None

    def metered(self, trace: Callable[[CallRecord], None]) -> Model:
        """The model to run in the current event loop: it waits for the profile's rate limiter, then records
        every request in `trace`. Raises CuratorError (with the settings hint) when the task has no profile."""
        from curator.llm.clients import shared_model
        from curator.llm.models import MeteredModel

        if self.given is not None:
            return MeteredModel(self.given, self.label, trace)
        profile = self.settings.profile_for(self.task)
        return MeteredModel(shared_model(profile), self.label, trace, limiter_for(profile))

