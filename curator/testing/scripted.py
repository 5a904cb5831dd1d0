"""A scripted extraction model and a scripted chat, for tests and benchmarks that need a deterministic model.

The model reads only the newest reply of each step, so the same chat always yields the same graph: an event
per step, a character sheet for the person who acts (merged by name, so history matters), a place state on the
steps where that type is active, and the links between them.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from curator.store.messages import Message
from curator.store.queries import GraphView

PEOPLE = ("Eileen", "Rowan", "Brannoch", "Mira", "Tobin", "Saela")
PLACES = ("the bridge", "the mill", "the chapel", "the market", "the harbour")
_REPLY = re.compile(r"(?P<who>\w+) went to (?P<place>[\w ]+?) and found (?P<thing>[^.]+)\.")


def scripted_chat(floors: int, name: str = "Narrator") -> list[Message]:
    """`floors` messages: user turns and narrator replies in which one person goes somewhere and finds a thing."""
    messages = []
    for floor in range(floors):
        if floor % 2 == 0:
            messages.append(Message("user", "User", f"What happens next? (turn {floor // 2})"))
        else:
            messages.append(Message("assistant", name, reply_text(floor)))
    return messages


def reply_text(floor: int, variant: int = 0) -> str:
    who = PEOPLE[(floor // 2 + variant) % len(PEOPLE)]
    place = PLACES[(floor // 3 + variant) % len(PLACES)]
    return f"{who} went to {place} and found {'a lantern' if variant == 0 else f'token {variant}'} #{floor}."


def prompt_text(messages: list[ModelMessage]) -> str:
    """The text of the first request's last part: where an extraction step's prompt is."""
    content = getattr(messages[0].parts[-1], "content", "")
    return content if isinstance(content, str) else str(content)


def scripted_model(calls: list[Any] | None = None) -> FunctionModel:
    """The model; each call appends the focus floor to `calls` (when given), so tests can count model calls."""

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = prompt_text(messages)
        focus = prompt.split("## Newest reply", 1)[1]
        floor = focus.split("[floor ", 1)[1].split("]", 1)[0]
        if calls is not None:
            calls.append(int(floor))
        tool = info.output_tools[0]
        active = set(tool.parameters_json_schema.get("properties", {}))
        found = _REPLY.search(focus)
        record: dict[str, Any] = {"event": [{"ref": "e", "summary": " ".join(focus.split())[-160:]}]}
        if found and "character_sheet" in active:
            record["character_sheet"] = [{"ref": "c", "name": found["who"], "inventory": found["thing"]}]
            record["links"] = [{"source": "c", "relation": "involved_in", "target": "e"}]
        if found and "location_state" in active:
            record["location_state"] = [{"ref": "p", "name": found["place"], "resources": found["thing"]}]
            record.setdefault("links", []).append({"source": "e", "relation": "occurred_at", "target": "p"})
        record = {k: v for k, v in record.items() if k in active}
        return ModelResponse(parts=[ToolCallPart(tool.name, record)])

    return FunctionModel(answer, model_name="scripted")


class HasGraph(Protocol):
    def graph(self, chat_id: str) -> GraphView: ...


def graph_signature(memory: HasGraph, chat_id: str) -> dict[str, list[Any]]:
    """The graph with ids and timestamps left out: what two runs must agree on to have built the same memory."""
    graph = memory.graph(chat_id)
    nodes = graph.nodes(archived=None)
    title = {n.id: (n.type, n.title) for n in nodes}
    node_rows = sorted((n.type, n.title, tuple(sorted(n.fields.items())), n.level, n.floor_from, n.floor_to,
                        n.archived, title.get(n.parent) if n.parent else None) for n in nodes)
    edge_rows = sorted((title[e.source], e.relation, title[e.target], e.strength) for e in graph.edges())
    return {"nodes": node_rows, "edges": edge_rows}
