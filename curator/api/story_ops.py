"""The story and orchestrator operations of `MemoryCore` (a mixin: the state is the core's): memory at a point in
story time, the contradiction inbox, the plot planner, the scouts before a reply and the simulation of a writer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic_ai.models import Model

    from curator.api.scouts import ScoutReport
    from curator.extract.curator_agent import CurateResult
    from curator.settings import Settings
    from curator.recall.injection import Injection
    from curator.llm.access import Models
    from curator.maintenance import Maintainer, MaintenanceReport
    from curator.prompts import Prompts
    from curator.store.messages import Message
    from curator.store.store import CommitRecord, Store


class StoryOps:
    if TYPE_CHECKING:  # the core's state and operations
        store: Store
        settings: Settings

        @property
        def prompts(self) -> Prompts: ...

        async def curate(self, chat_id: str, floor: int | None = None, draft_reply: str | None = None, *,
                         dry_run: bool = False, max_requests: int | None = None, model: Model | None = None,
                         models: Models | None = None, scouts: str | None = None) -> CurateResult: ...

        def maintainer(self, model: Model | None = None) -> Maintainer: ...

        def recall(self, chat_id: str, query: str = "", mode: str | None = None, user_floor: int | None = None,
                   messages: list[Message] | None = None, **options: Any) -> Injection: ...

    def facts_at(self, chat_id: str, name: str, at: str | int) -> dict[str, Any]:
        """The nodes named `name` (or of that id) as they were at a point in story time ("what did Mira carry
        on day 5"), with each one's spans of story time (`fact_spans`)."""
        from curator.recall.as_of import facts_at

        return facts_at(self.store, chat_id, name, at)

    def fact_spans(self, chat_id: str, node_id: str) -> list[dict[str, Any]]:
        """A node's values over story time: from which story time (and floor) each held, until which."""
        from curator.recall.as_of import fact_spans

        return fact_spans(self.store, chat_id, node_id)

    def contradictions(self, chat_id: str) -> list[dict[str, Any]]:
        """The contradiction inbox: new facts that contradict stored ones, waiting for a decision."""
        from curator.maintenance.contradictions import open_contradictions

        self.store.chat(chat_id)
        return open_contradictions(self.store, chat_id)

    def resolve_contradiction(self, chat_id: str, contradiction_id: str, action: str) -> CommitRecord:
        """Decide a contradiction: `supersede` (the new fact replaces the old one, which keeps its span),
        `keep_both`, or `drop` (the new fact was wrong). One commit, anchored at the new fact's floor."""
        from curator.maintenance.contradictions import resolve

        return resolve(self.store, chat_id, contradiction_id, action)

    async def plan(self, chat_id: str, model: Model | None = None) -> MaintenanceReport:
        """Run the plot planner now: the next beats from the open threads, goals and recent events (one model call
        of the `plan` task; `model` replaces it). Kept as the chat's newest plan (`current_plan`)."""
        from curator.store.commit_log import last_floor

        maintainer = self.maintainer()
        maintainer.plan_model = model
        return await maintainer.plan(chat_id, anchor=last_floor(self.store, chat_id) or 0)

    def current_plan(self, chat_id: str) -> dict[str, Any] | None:
        """The plot planner's newest plan: {beats, floor, seq}, or None."""
        from curator.store.plans import latest_plan

        self.store.chat(chat_id)
        return latest_plan(self.store, chat_id)

    def scout(self, chat_id: str, message: str, speaker: str | None = None, recall: bool = True) -> ScoutReport:
        """Read-only looks at the memory before the reply to `message` (no model call): the entities it names,
        where the story stands, open threads and undecided contradictions, what `speaker` must not know, and
        (with `recall`) what recall will inject. Its `text` is written for the director's prompt."""
        from curator.api.scouts import scout

        recalled = None
        if recall and message.strip():
            injection = self.recall(chat_id, message, speaker=speaker) if speaker else self.recall(chat_id, message)
            recalled = [c.node for c in (*injection.persistent, *injection.recalled)]
        return scout(self.store, chat_id, message, self.prompts, speaker, recalled)

    async def simulate(self, chat_id: str, draft_reply: str | None = None, floor: int | None = None,
                       writer: str | None = None, models: Models | None = None) -> dict[str, Any]:
        """What the chat's writers (or `writer`: extractor | curator) would commit for the newest reply, the
        reply at `floor`, or a `draft_reply` not stored yet, without committing: the ops and each change described
        (`curator/api/simulate.py`). The model is asked; its calls are in `curator usage`."""
        from curator.api.simulate import simulate

        return await simulate(self.store, self.settings, self.curate, chat_id, draft_reply, floor, writer, models)
