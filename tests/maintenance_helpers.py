"""Scripted models and graph builders shared by the maintenance tests and the maintenance bench."""

from __future__ import annotations

import re
from collections.abc import Callable

from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from curator.store.messages import Message


def chat_messages(turns: int) -> list[Message]:
    """`turns` user/assistant pairs: floors 0 .. 2*turns-1, replies on the odd floors."""
    messages = []
    for i in range(turns):
        messages.append(Message("user", "Rowan", f"Rowan speaks, turn {i}."))
        messages.append(Message("assistant", "Eileen", f"Eileen answers, turn {i}."))
    return messages


def prompt_text(messages) -> str:
    """The user prompt (the task), plus the errors sent back with any retry."""
    parts = []
    for message in messages:
        for part in message.parts:
            content = getattr(part, "content", None)
            if part.part_kind in ("user-prompt", "retry-prompt", "tool-return") and content is not None:
                parts.append(content if isinstance(content, str) else str(content))
    return "\n".join(parts)


class Scripted:
    """A scripted maintenance model: `answer(prompt, schema)` gives the tool-call arguments of each request."""

    def __init__(self, answer: Callable[[str, dict], dict]):
        self.answer = answer
        self.prompts: list[str] = []

    def __call__(self, messages, info: AgentInfo) -> ModelResponse:
        prompt = prompt_text(messages)
        self.prompts.append(prompt)
        tool = info.output_tools[0]
        return ModelResponse(parts=[ToolCallPart(tool.name, self.answer(prompt, tool.parameters_json_schema))])

    @property
    def model(self) -> FunctionModel:
        return FunctionModel(self, model_name="scripted-maintain")

    @property
    def calls(self) -> int:
        return len(self.prompts)


def fold_answer(prompt: str, schema: dict) -> dict:
    """Compression: a summary naming how many nodes were folded and the floors they span."""
    floors = re.search(r"floors (\d+)-(\d+)\)", prompt)
    count = re.search(r"Fold these (\d+)", prompt).group(1)
    text = f"{count} nodes of floors {floors.group(1)}-{floors.group(2)} folded."
    answer = {name: text for name in schema.get("required", []) if name != "title"}
    if "title" in schema["properties"]:
        answer["title"] = f"Arc {floors.group(1)}-{floors.group(2)}"
    return answer


def synopsis_answer(prompt: str, schema: dict) -> dict:
    lo, hi = map(int, re.search(r"Length: (\d+)-(\d+) characters", prompt).groups())
    floors = re.search(r"floors (\d+)-(\d+)", prompt).groups()
    text = f"Floors {floors[0]}-{floors[1]}: the travellers crossed the bridge and kept their promises. "
    return {"text": (text * 10)[: (lo + hi) // 2]}


def event_ops(count: int, start_floor: int = 1, characters: tuple[str, ...] = ("Eileen", "Rowan")) -> list[dict]:
    ops = [{"op": "create_node", "id": f"c_{name.lower()}", "type": "character_sheet", "fields": {"name": name}}
           for name in characters]
    for i in range(count):
        floor = start_floor + 2 * i
        ops.append({"op": "create_node", "id": f"ev{i:04d}", "type": "event", "title": f"Summary {i + 1}",
                    "fields": {"summary": f"Event {i}: something happens at floor {floor}."},
                    "floor_from": floor, "floor_to": floor, "importance": float(1 + i % 9)})
        ops.append({"op": "link", "source": f"c_{characters[i % len(characters)].lower()}", "target": f"ev{i:04d}",
                    "relation": "involved_in"})
        if i:
            ops.append({"op": "link", "source": f"ev{i:04d}", "target": f"ev{i - 1:04d}", "relation": "related"})
    return ops
