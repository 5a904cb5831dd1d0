"""RAG query rewrite: one LLM call turns the recent turns into a search sentence (actor, action, object)."""

from __future__ import annotations

from curator.aio import run_sync
import logging

from pydantic_ai import Agent

from curator.prompts import SHIPPED, Prompts

from curator.llm.access import TaskModel
from curator.llm.records import LLMTrace
from curator.settings import Settings

log = logging.getLogger(__name__)


def rewrite_query(settings: Settings, turns: str, trace: LLMTrace, prompts: Prompts = SHIPPED) -> str | None:
    """The rewritten query, or None (and the original is used) when the call fails. The call goes to `trace`."""
    task = TaskModel(settings, "rewrite")

    async def ask() -> str:
        agent = Agent(task.metered(trace), output_type=str, model_settings=task.agent_settings())
        return str((await agent.run(prompts.render("rewrite", turns=turns))).output)

    try:
        text = " ".join(run_sync(ask()).split())
        return text or None
    except Exception as exc:  # noqa: BLE001 - a failed rewrite must not fail the recall
        log.warning("query rewrite failed, using the original query: %s", exc)
        return None
