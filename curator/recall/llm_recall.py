"""The `llm` mode of recall: the model chooses from a catalogue of candidates, over a few rounds.

It sees one brief line per candidate (a compressed type shows its top active summary, not the leaves folded into
it; always-injected nodes are listed only as places to drill from), may drill into the children or linked nodes
of some candidates for up to ROUNDS rounds, then finalizes a list of ids. The ids are validated (unknown or
always-injected ones are left out), at least MIN_EVENTS events are kept when there are that many, and on any
failure (an error, a bad answer, no valid id) recall falls back to `hybrid`: it never injects everything."""

from __future__ import annotations

from curator.aio import run_sync
import logging
from typing import TYPE_CHECKING, Literal, Protocol

from pydantic import BaseModel, Field
from pydantic_ai import Agent
from pydantic_ai.models import Model

from curator.schemas import Schema

from curator.vectors.documents import node_document
from curator.store.graph import Node
from curator.recall.injection import Chosen, Injection
from curator.llm.access import TaskModel
from curator.llm.records import LLMTrace
from curator.store.queries import GraphView
from curator.recall.scoring import Pool
from curator.settings import RecallSettings, Settings

if TYPE_CHECKING:
    from curator.prompts import Prompts
    from curator.recall.query import RecallQuery
    from curator.store.store import Store


class Recaller(Protocol):
    """What llm recall needs of the recall engine (a protocol, so this module does not import the engine)."""

    store: Store
    model: Model | None
    settings: Settings
    prompts: Prompts

    def _hybrid(self, chat_id: str, version: int, graph: GraphView, query: str, pool: Pool,
                opts: RecallSettings, rq: RecallQuery | None = None) -> list[Chosen]: ...

log = logging.getLogger(__name__)
ROUNDS = 3  # drill rounds at most; then the model must finalize
CATALOGUE = 60  # candidates in the first list; a bigger pool is cut to its best hybrid matches
MIN_EVENTS = 2
MAX_SEEDS = 5  # expanded per drill round
PER_SEED = 12  # new candidates per seed
BRIEF_CHARS = 160


class Expand(BaseModel):
    seed_id: str = Field(description="a candidate id to drill into")
    relations: list[str] = Field(default_factory=list, description="only links of these relations (empty: any)")
    include_children: bool = Field(default=True, description="also show the nodes folded into it")


class RecallStep(BaseModel):
    action: Literal["drill", "finalize"]
    ids: list[str] = Field(default_factory=list, description="finalize: the chosen ids, most important first")
    expand: list[Expand] = Field(default_factory=list, description="drill: the candidates to drill into")


def llm_recall(
    recaller: Recaller,
    chat_id: str,
    version: int,
    graph: GraphView,
    query: str,
    pool: Pool,
    opts: RecallSettings,
    injection: Injection,
    trace: LLMTrace,
    rq: RecallQuery | None = None,
) -> list[Chosen]:
    """The model's choice, or hybrid recall's when the model fails. LLM calls go to `trace`.
    `rq` (a `curator.recall.query.RecallQuery`) brings the recent turns: the model reads them, and the
    catalogue and the fallback are scored from them."""
    reason = "no valid id chosen"
    try:
        chosen = run_sync(_select(recaller, chat_id, version, graph, query, pool, opts, trace, rq))
    except Exception as exc:  # noqa: BLE001 - any model failure falls back to deterministic recall
        log.warning("LLM recall failed, falling back to hybrid: %s", exc)
        chosen, reason = [], f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    if chosen:
        return chosen
    injection.mode, injection.fallback = "hybrid", {"from": "llm", "reason": reason}  # what ran, and why
    fallback = recaller._hybrid(chat_id, version, graph, query, pool, opts, rq)
    return [Chosen(c.node, c.score, f"hybrid fallback ({reason}): {c.reason}") for c in fallback]


async def _select(recaller: Recaller, chat_id: str, version: int, graph: GraphView, query: str, pool: Pool,
                  opts: RecallSettings, trace: LLMTrace, rq: RecallQuery | None = None) -> list[Chosen]:
    if not pool.nodes and not pool.leaves:
        return []
    schema = recaller.store.chat(chat_id).schema
    selectable: dict[str, Node] = {**pool.nodes, **pool.leaf_nodes}
    injected = {n.id: n for n in graph.nodes(archived=False) if n.id in pool.injected}
    first = _catalogue(recaller, chat_id, version, graph, query, pool, opts, rq) + list(injected.values())
    shown: dict[str, Node] = {n.id: n for n in first}
    agent = _agent(recaller, trace)
    prompt = recaller.prompts.render("llm_recall", rounds=ROUNDS, limit=opts.max_results, min_events=MIN_EVENTS,
                                     turns=rq.turns if rq is not None and rq.turns else query,
                                     candidates=_lines(first, schema, pool))
    history = None
    for round_ in range(ROUNDS + 1):
        result = await agent.run(prompt, message_history=history)
        step = result.output
        if step.action == "finalize" or round_ == ROUNDS:
            break
        new, unknown = _drill(graph, step.expand, shown, selectable, injected, pool)
        shown.update((n.id, n) for n in new)
        history = result.all_messages()
        left = ROUNDS - round_ - 1
        note = f"unknown seed(s) ignored: {', '.join(unknown)}" if unknown else f"{len(new)} new"
        prompt = recaller.prompts.render("llm_recall_more", note=note,
                                         candidates=_lines(new, schema, pool) or "(nothing new)",
                                         instruction=f"Drill again ({left} round(s) left) or finalize." if left
                                         else "No drill rounds left: finalize now.")
    picked = [i for i in dict.fromkeys(step.ids) if i in shown and i in selectable][:opts.max_results]
    if not picked:
        return []
    chosen = [Chosen(selectable[i], 1.0 - rank / 100, "picked by the model") for rank, i in enumerate(picked)]
    events = sum(1 for c in chosen if c.node.type in pool.event_types)
    for node in shown.values():  # at least MIN_EVENTS events when the candidates hold that many
        if events >= MIN_EVENTS:
            break
        if node.type in pool.event_types and node.id in selectable and node.id not in picked:
            chosen.append(Chosen(node, 0.5, "added: recall keeps at least 2 events"))
            events += 1
    return chosen


def _agent(recaller: Recaller, trace: LLMTrace) -> Agent[None, RecallStep]:
    """Made in the loop that runs it: the configured model is shared per profile and event loop."""
    task = TaskModel(recaller.settings, "recall", recaller.model)
    return Agent[None, RecallStep](task.metered(trace), output_type=RecallStep, model_settings=task.agent_settings(),
                                   retries=1)


def _catalogue(recaller: Recaller, chat_id: str, version: int, graph: GraphView, query: str, pool: Pool,
               opts: RecallSettings, rq: RecallQuery | None = None) -> list[Node]:
    """Every recallable top node, newest first; a big pool is cut to its best hybrid matches."""
    if len(pool.nodes) <= CATALOGUE:
        return sorted(pool.nodes.values(), key=lambda n: (n.floor_to, n.floor_from, n.id), reverse=True)
    narrow = opts.model_copy(update={"max_results": CATALOGUE, "expand": False, "llm_rerank": False})
    return [c.node for c in recaller._hybrid(chat_id, version, graph, query, pool, narrow, rq)]


def _drill(graph: GraphView, expand: list[Expand], shown: dict[str, Node], selectable: dict[str, Node],
           injected: dict[str, Node], pool: Pool) -> tuple[list[Node], list[str]]:
    """The children and linked nodes of the seeds that are not shown yet; a folded neighbour is lifted to the
    summary that stands for it."""
    new: dict[str, Node] = {}
    unknown = []
    for item in expand[:MAX_SEEDS]:
        if item.seed_id not in shown:
            unknown.append(item.seed_id)
            continue
        found: list[Node] = []
        seed = graph.get(item.seed_id)
        if item.include_children and seed is not None:
            found += [n for n in map(graph.get, seed.children) if n is not None]
        for _edge, other in graph.neighbours(item.seed_id, item.relations or None, include_archived=True):
            lifted = pool.leaves.get(other.id)
            found.append((selectable.get(lifted) or injected.get(lifted) or other) if lifted else other)
        count = 0
        for node in found:
            if node.id in shown or node.id in new or (node.id not in selectable and node.id not in injected):
                continue
            new[node.id] = node
            count += 1
            if count >= PER_SEED:
                break
    return list(new.values()), unknown


def _lines(nodes: list[Node], schema: Schema, pool: Pool) -> str:
    lines = []
    for node in nodes:
        text = " ".join(node_document(node, schema).split())
        text = text if len(text) <= BRIEF_CHARS else text[:BRIEF_CHARS - 1] + "…"
        span = f"floor {node.floor_from}" if node.floor_from == node.floor_to else \
            f"floors {node.floor_from}-{node.floor_to}"
        extra = f", {len(node.children)} children" if node.children else ""
        mark = " (always injected; drill only)" if node.id in pool.injected else ""
        lines.append(f"{node.id} [{node.type}, level {node.level}, {span}{extra}]{mark} {node.title}: {text}")
    return "\n".join(lines)
