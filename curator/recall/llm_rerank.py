"""Optional LLM rerank stage on top of hybrid recall: the model sees the best 30 candidates and picks at most 8.
Its ids are validated; on any failure (an error, an empty or invalid answer) the deterministic order stands."""

from __future__ import annotations

from curator.aio import run_sync
import logging

from pydantic import BaseModel, Field
from pydantic_ai import Agent
from pydantic_ai.models import Model

from curator.prompts import SHIPPED, Prompts

from curator.recall.injection import Chosen
from curator.llm.access import TaskModel
from curator.llm.records import LLMTrace
from curator.settings import Settings

log = logging.getLogger(__name__)
POOL, PICK = 30, 8


class Picks(BaseModel):
    ids: list[str] = Field(description="ids of the chosen memories, most important first", max_length=PICK)


def llm_rerank(settings: Settings, query: str, candidates: list[Chosen], documents: dict[str, str], trace: LLMTrace,
               model: Model | None = None, prompts: Prompts = SHIPPED) -> list[Chosen] | None:
    """The model's picks (each keeps its score, marked), or None to keep the deterministic order. The calls go to
    `trace`."""
    pool = candidates[:POOL]
    by_id = {c.node.id: c for c in pool}
    task = TaskModel(settings, "recall", model)
    listing = "\n".join(f"{c.node.id}: {' '.join(documents.get(c.node.id, c.node.title).split())[:400]}"
                        for c in pool)

    async def ask() -> Picks:
        agent = Agent(task.metered(trace), output_type=Picks, model_settings=task.agent_settings())
        return (await agent.run(prompts.render("llm_rerank", limit=PICK, turns=query, candidates=listing))).output

    try:
        answer = run_sync(ask())
        picked = [i for i in dict.fromkeys(answer.ids) if i in by_id]
        if not picked:
            raise ValueError(f"no valid id among {answer.ids!r}")
        return [Chosen(by_id[i].node, by_id[i].score, f"picked by the model ({by_id[i].reason})") for i in picked]
    except Exception as exc:  # noqa: BLE001 - any failure keeps the deterministic order
        log.warning("LLM rerank failed, keeping the deterministic order: %s", exc)
        return None
