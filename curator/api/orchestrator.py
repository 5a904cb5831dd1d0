"""The memory's tools for an outer agent (an orchestrator that drafts the replies): a pydantic-ai toolset over one
chat. The orchestrator scouts before it writes, recalls, looks nodes up, simulates what memory would make of its
draft, and (when allowed) has the memory_curator commit the reply's memory in director mode. Every tool is a plain
typed function whose docstring is what the model reads; none of them writes except `memory_curate`.

    agent = Agent(model, toolsets=[orchestrator_toolset(memory, "road")])

See docs/orchestrator.md for the loop and an example."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pydantic_ai.toolsets import FunctionToolset

from curator.api.async_memory import AsyncMemory

if TYPE_CHECKING:
    from curator.api.memory import Memory
    from curator.llm.access import Models


def orchestrator_toolset(memory: Memory | AsyncMemory, chat_id: str, *, allow_writes: bool = True,
                         models: Models | None = None) -> FunctionToolset:
    """The tools over `chat_id`. `allow_writes=False` leaves out `memory_curate` (scouting, recall and simulation
    only). `models` replace the configured ones for simulation and curation (tests, scripted runs)."""
    aio = memory if isinstance(memory, AsyncMemory) else memory.aio

    async def memory_scout(message: str, speaker: str | None = None) -> dict[str, Any]:
        """Before you write a reply: what memory holds about the user's message. Returns the entities it names
        (with their fields and links), where the story stands (the newest events), open threads and contradictions
        nobody has decided yet, what `speaker` (the character about to speak) does not know or believes wrongly,
        and what recall will show. Read-only; no model call."""
        report = await aio.scout(chat_id, message, speaker)
        return {"findings": report.findings, "summary": report.text}

    async def memory_recall(query: str, speaker: str | None = None, at: str | None = None) -> dict[str, Any]:
        """The memory recall would inject for `query` (the user's message), as text and as a list of nodes.
        `speaker`: who speaks next (what they know is marked); `at`: a story time ('day 5') to recall the memory as
        it was then."""
        options: dict[str, Any] = {"speaker": speaker} if speaker else {}
        if at:
            options["at"] = at
        injection = await aio.recall(chat_id, query, **options)
        return {"text": injection.text, "nodes": [{"id": c.node.id, "type": c.node.type, "title": c.node.title,
                                                   "reason": c.reason} for c in (*injection.persistent,
                                                                                 *injection.recalled)]}

    async def memory_find(name: str) -> list[dict[str, Any]]:
        """Nodes named `name` (title, name or alias; case and spacing ignored), with their fields."""
        graph = await aio.graph(chat_id)
        return [{"id": n.id, "type": n.type, "title": n.title, "fields": n.fields, "floors": [n.floor_from, n.floor_to]}
                for n in graph.find_by_name(name)[:10]]

    async def memory_facts_at(name: str, at: str) -> dict[str, Any]:
        """What the node named `name` held at a story time `at` ('day 5', a date or a floor), and the spans of
        story time each of its values held."""
        return await aio.facts_at(chat_id, name, at)

    async def memory_simulate(draft_reply: str, writer: str | None = None) -> dict[str, Any]:
        """What memory would be written for your drafted reply, without writing it: each change (nodes created,
        fields changed before and after, links). `writer`: extractor or curator (default: the chat's channel)."""
        result = await aio.simulate(chat_id, draft_reply, writer=writer, models=models)
        return {name: {"ok": w["ok"], "reason": w["reason"], "changes": w["changes"]}
                for name, w in result["writers"].items()}

    async def memory_curate(draft_reply: str, scouted: str | None = None) -> dict[str, Any]:
        """Write the memory of your drafted reply now (the memory_curator agent in director mode, one commit at the
        floor the reply will take). Give the scouts' `summary` as `scouted` so the curator starts from it. Call it
        once per reply, after the reply is final."""
        result = await aio.curate(chat_id, draft_reply=draft_reply, models=models, scouts=scouted)
        return {"ok": result.ok, "reason": result.reason, "commit": result.commit.id if result.commit else None,
                "ops": len(result.staged_ops), "model_requests": result.usage.calls}

    async def memory_contradictions() -> list[dict[str, Any]]:
        """New facts that contradict stored ones, waiting for the user's decision: do not rely on either side."""
        return await aio.contradictions(chat_id)

    tools: list[Callable[..., Awaitable[Any]]] = [memory_scout, memory_recall, memory_find, memory_facts_at,
                                                  memory_simulate, memory_contradictions]
    if allow_writes:
        tools.append(memory_curate)
    return FunctionToolset(tools)
