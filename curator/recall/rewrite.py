"""RAG query rewrite: one LLM call turns the recent turns into a search sentence (actor, action, object)."""

from __future__ import annotations

from curator.aio import run_sync
import logging

from pydantic_ai import Agent

from curator.prompts import render

from curator.llm.models import LLMTrace, MeteredModel, Usage, build_model, model_settings
from curator.settings import Settings

log = logging.getLogger(__name__)


def rewrite_query(settings: Settings, turns: str, usage: Usage) -> str | None:
    """The rewritten query, or None (and the original is used) when the call fails."""
    trace = LLMTrace()
    try:
        profile = settings.profile_for("rewrite")
        model = MeteredModel(build_model(profile), "rewrite", trace)
        agent = Agent(model, output_type=str, model_settings=model_settings(profile))
        result = run_sync(agent.run(render("rewrite", turns=turns)))
        text = " ".join(str(result.output).split())
        return text or None
    except Exception as exc:  # noqa: BLE001 - a failed rewrite must not fail the recall
        log.warning("query rewrite failed, using the original query: %s", exc)
        return None
    finally:
        for record in trace.records:
            usage.add(record)
