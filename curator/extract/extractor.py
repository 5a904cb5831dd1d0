"""The built-in extractor: one structured LLM call per due step turns the newest reply into ops, committed as
one commit anchored at the reply's floor. Invalid answers go back to the model with the errors, within a
bound; a step that still fails commits nothing and is logged with its reason."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry, PromptedOutput, RunContext, ToolOutput
from pydantic_ai.models import Model

from curator.prompts import SHIPPED, Prompts, prompts_for
from curator.schemas import Schema

from curator.errors import CuratorError, OpError
from curator.extract.fit import fitted_messages, floors_budget
from curator.extract.output_model import output_model
from curator.extract.plan import PlanError, plan_ops
from curator.extract.triggers import active_types
from curator.llm.access import TaskModel
from curator.llm.models import model_settings
from curator.llm.records import LLMTrace, Usage
from curator.store.messages import Message
from curator.store.queries import GraphView
from curator.settings import Settings
from curator.store.story_time import KNOWS, story_prompt_lines
from curator.store.commit_log import last_anchor
from curator.store.store import CommitRecord, Store
from curator.store.usage import insert_step
from curator.llm.usage import log_calls


@dataclass
class ExtractionResult:
    """What one extraction step did and cost."""

    chat_id: str
    floor: int
    seq: int
    active_types: list[str]
    ok: bool
    commit: CommitRecord | None = None
    reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    maintenance: list[Any] = field(default_factory=list)  # reports of the scheduled maintenance after this step
    set_aside: dict[str, int] = field(default_factory=dict)  # inactive type -> items the answer gave, not written
    simulated: list[dict[str, Any]] | None = None  # a simulation: the ops it would have committed (nothing was)
    cut: dict[int, int] = field(default_factory=dict)  # floor -> characters left out to fit the model's context

    def to_dict(self) -> dict[str, Any]:
        return {"chat": self.chat_id, "floor": self.floor, "seq": self.seq, "active_types": self.active_types,
                "ok": self.ok, "commit": self.commit.id if self.commit else None,
                "ops": len(self.commit.ops) if self.commit else 0, "reason": self.reason, "usage": self.usage.to_dict(),
                **({"set_aside": self.set_aside} if self.set_aside else {}),
                **({"simulated_ops": self.simulated} if self.simulated is not None else {}),
                **({"cut": self.cut} if self.cut else {}),
                **({"maintenance": [m.to_dict() for m in self.maintenance]} if self.maintenance else {})}


def assistant_floors(messages: list[Message]) -> list[int]:
    """Floors of the assistant replies that count: seq N is the N-th of them (1-based)."""
    return [i for i, m in enumerate(messages) if m.role == "assistant" and m.text.strip()]


def last_extracted_floor(store: Store, chat_id: str, origin: str = "extract") -> int:
    """The processed-floor pointer: the newest floor an extraction commit (with the `curator` channel: a curator
    commit) is anchored at (-1 if none). It lives in the commit log, so a rollback moves it back by itself."""
    floor = last_anchor(store, chat_id, origin)
    return -1 if floor is None else floor


def due_floors(store: Store, chat_id: str, settings: Settings) -> list[tuple[int, int]]:
    """(floor, seq) of the replies still to write, every `extract_every` replies: after the pointer of the chat's
    channel (`both`: of the writer that is behind; `off`: nothing is due, nobody writes)."""
    extraction = settings.for_chat(store.chat(chat_id).settings).extraction
    every = extraction.extract_every
    if extraction.channel == "off":
        return []
    pointers = {"extractor": ("extract",), "curator": ("curate",), "both": ("extract", "curate")}[extraction.channel]
    pointer = min(last_extracted_floor(store, chat_id, origin) for origin in pointers)
    floors = assistant_floors(store.messages(chat_id))
    return [(f, seq) for seq, f in enumerate(floors, start=1) if f > pointer and seq % every == 0]


class Extractor:
    """Extraction for the chats of one store. `model` replaces the configured one (tests, scripted runs)."""

    def __init__(self, store: Store, settings: Settings, model: Model | None = None) -> None:
        self.store, self.settings = store, settings
        self.prompts = prompts_for(store.data_dir)  # the data directory's own templates over the shipped ones
        self._model = TaskModel(settings, "extract", model)  # the profile's limiter and retries (llm/access.py)
        self._agents: dict[tuple[Any, ...], tuple[Schema, Agent[StepDeps, Any]]] = {}

    async def extract(self, chat_id: str, floor: int, messages: list[Message] | None = None, *,
                      simulate: bool = False) -> ExtractionResult:
        """Extract the reply at `floor` (and any replies since the last extraction, as one step). `messages`
        saves reading the chat again when the caller has it (they must be the stored messages, or with
        `simulate`, the stored ones and a drafted reply after them). `simulate`: the model is asked (and its calls
        logged) but nothing is committed or recorded as a step; the result holds the ops (`simulated`)."""
        chat = self.store.chat(chat_id)
        settings = self.settings.for_chat(chat.settings)
        messages = messages if messages is not None else self.store.messages(chat_id)
        floors = assistant_floors(messages)
        if floor not in floors:
            raise CuratorError(f"floor {floor} of chat {chat_id!r} is not an assistant reply with text")
        seq = floors.index(floor) + 1
        pointer = last_extracted_floor(self.store, chat_id)
        if floor <= pointer:
            raise CuratorError(f"floor {floor} is already extracted (the chat is extracted up to floor {pointer})",
                               f"Roll back to floor {floor} first to extract it again.")
        focus = [f for f in floors if pointer < f <= floor]
        reply = "\n".join(messages[f].text for f in focus)
        active = active_types(chat.schema, self.store.graph(chat_id), seq, reply)  # cadence, or what happens
        trace = LLMTrace()
        result = ExtractionResult(chat_id, floor, seq, active, ok=False)
        try:
            ops, result.set_aside = await self._run(chat_id, chat.schema, settings, messages, focus, active, trace,
                                                    result.cut)
            note = f"seq {seq}" + (f"; set aside (not active this step): {_aside(result.set_aside)}"
                                   if result.set_aside else "")
            if simulate:
                result.simulated = ops
            else:
                result.commit = self.store.commit(chat_id, ops, floor, "extract", note=note)
            result.ok = True
        except (CuratorError, OpError) as exc:
            result.reason = str(exc)
        except Exception as exc:  # noqa: BLE001 - model/HTTP failures of any kind: recorded, nothing committed
            result.reason = failure_reason(exc)
        result.usage = trace.usage()
        log_calls(self.store, chat_id, trace.records)
        if not simulate:
            _log_step(self.store, result)
        return result

    async def _run(self, chat_id: str, schema: Schema, settings: Settings, messages: list[Message],
                   focus: list[int], active: list[str], trace: LLMTrace,
                   cut: dict[int, int]) -> tuple[list[dict[str, Any]], dict[str, int]]:
        # the chat's own settings: its own model when none is configured (Settings.for_chat)
        model = TaskModel(settings, "extract", self._model.given).metered(trace)
        deps = StepDeps(schema, self.store.graph(chat_id), active, anchor=focus[-1], focus_from=focus[0])
        prompt = user_prompt(self.store, chat_id, schema, settings, messages, focus, active, self.prompts, cut)
        run = await self._agent(schema, active, settings).run(prompt, model=model, deps=deps)
        aside = {name: len(items) for name, items in getattr(run.output, "set_aside", {}).items()}
        return deps.planned[-1], aside

    def _agent(self, schema: Schema, active: list[str], settings: Settings) -> Agent[StepDeps, Any]:
        """One agent per schema, active types and settings: building the output model and the agent costs
        more than the rest of a step, and they do not change between steps with the same cadence."""
        profile = TaskModel(settings, "extract", self._model.given).profile
        system = system_prompt(settings, self.prompts)
        key = (id(schema), tuple(active), system, settings.extraction.output_retries,
               profile.model_dump_json() if profile else None)
        cached = self._agents.get(key)
        if cached is not None and cached[0] is schema:
            return cached[1]
        answer_type = output_model(schema, active)
        output = (PromptedOutput(answer_type, name="record_memory") if profile and profile.output_mode == "json"
                  else ToolOutput(answer_type, name="record_memory", description="Record the memory of this step."))
        agent: Agent[StepDeps, Any] = Agent(None, output_type=output, deps_type=StepDeps, system_prompt=system,
                                            retries={"output": settings.extraction.output_retries},
                                            model_settings=model_settings(profile) if profile else None)
        agent.output_validator(_plan_answer)
        self._agents[key] = (schema, agent)  # keeps `schema` alive, so its id is not reused
        return agent


@dataclass
class StepDeps:
    """What one extraction step's output validator needs; passed to the agent run as typed deps."""

    schema: Schema
    graph: GraphView
    active: list[str]
    anchor: int
    focus_from: int
    planned: list[list[dict[str, Any]]] = field(default_factory=list)


def _plan_answer(ctx: RunContext[StepDeps], answer: BaseModel) -> BaseModel:
    """Turn the answer into ops; an answer that cannot be (a link to an unknown name) goes back to the model."""
    deps = ctx.deps
    try:
        ops = plan_ops(deps.schema, deps.graph, answer, deps.active, anchor=deps.anchor, focus_from=deps.focus_from)
    except PlanError as exc:
        raise ModelRetry(str(exc)) from None
    deps.planned.append(ops)
    return answer


def _aside(set_aside: dict[str, int]) -> str:
    return ", ".join(f"{name} ({count} item{'s' * (count != 1)})" for name, count in set_aside.items())


def failure_reason(exc: BaseException) -> str:
    """A failure in one line: the error and what caused it (e.g. the last validation error)."""
    parts: list[str] = []
    seen: set[int] = set()
    step: BaseException | None = exc
    while step is not None and id(step) not in seen and len(parts) < 3:
        seen.add(id(step))
        parts.append(f"{type(step).__name__}: {' '.join(str(step).split())}")
        step = step.__cause__ or step.__context__
    return " <- ".join(parts)[:1000]


def system_prompt(settings: Settings, prompts: Prompts = SHIPPED) -> str:
    """Byte-stable for a chat's settings, so providers can cache it; everything per-step goes in the user prompt."""
    language = settings.extraction.language
    rule = ("use the language the chat is written in" if language == "auto"
            else f"write in {language}, whatever the chat's language")
    return prompts.render("extract_system", language_rule=rule)


def user_prompt(store: Store, chat_id: str, schema: Schema, settings: Settings, messages: list[Message],
                focus: list[int], active: list[str], prompts: Prompts = SHIPPED,
                cut: dict[int, int] | None = None) -> str:
    """The step's prompt. Its floors are cut to the extraction model's context (curator/extract/fit.py); `cut`
    receives what was left out of each cut floor (characters)."""
    context_floors = _context_floors(messages, focus[0], settings.extraction.context_turns)
    profile = settings.profiles.get(settings.tasks.get("extract", "default"))
    shown, left_out = fitted_messages(messages, [*context_floors, *range(focus[0], focus[-1] + 1)],
                                      floors_budget(profile))
    if cut is not None:
        cut.update(left_out)
    return prompts.render(
        "extract_user",
        active_types="\n\n".join(_describe_type(schema, name) for name in active) or "(none this step)",
        relations="\n".join(f"- {r.name}{' (either direction)' if r.symmetric else ''}: {r.description}"
                            for r in schema.relations if not r.internal),
        known_entities=_known_entities(store, chat_id, schema, settings.extraction.max_known_entities),
        context=_format(shown, context_floors) or "(none)",
        floor=focus[-1] if len(focus) == 1 else f"{focus[0]}-{focus[-1]}",
        focus=_format(shown, range(focus[0], focus[-1] + 1)),
    )


_POLICY = {
    "event": "event: write new ones for what happened in the newest reply",
    "entity": "entity: matched by name or alias; give the name and only the fields that are new or changed",
    "latest_only": "latest state: give the name and the whole current state; it replaces the old one",
}


def _describe_type(schema: Schema, name: str) -> str:
    spec = schema.types[name]
    lines = [f"### {name} ({_POLICY[spec.identity]})"]
    if spec.description:
        lines.append(spec.description)
    for f in spec.fields:
        required = f.required or f.name in spec.primary_key
        lines.append(f"- {f.name}{' (required)' if required else ''}{': ' + f.hint if f.hint else ''}")
    if spec.story:
        lines += story_prompt_lines(schema.relation(KNOWS) is not None)
    if spec.extraction_instructions:
        lines.append(f"Rules: {spec.extraction_instructions}")
    return "\n".join(lines)


def _known_entities(store: Store, chat_id: str, schema: Schema, limit: int) -> str:
    """The `limit` entities seen last (newest floor first), read as such: not every entity of the chat."""
    types = [name for name, spec in schema.types.items() if spec.identity != "event"]
    rows = []
    for name, title, fields in store.graph(chat_id).latest_of_types(types, limit):
        aliases = ", ".join(v for f in schema.types[name].alias_fields if (v := fields.get(f)))
        rows.append(f"- {title} [{name}]" + (f" (aliases: {aliases})" if aliases else ""))
    return "\n".join(rows) or "(none yet)"


def _context_floors(messages: list[Message], focus_start: int, turns: int) -> range:
    """The floors before the focus: the turn's own user message and `turns` earlier turns."""
    start, users = focus_start, 0
    while start > 0 and users < turns + 1:
        start -= 1
        users += messages[start].role == "user"
    return range(start, focus_start)


def _format(messages: Mapping[int, Message] | Sequence[Message], floors: Iterable[int]) -> str:
    return "\n\n".join(f"[floor {f}] {messages[f].name or messages[f].role} ({messages[f].role}): {messages[f].text}"
                       for f in floors)


def _log_step(store: Store, result: ExtractionResult) -> None:
    usage = result.usage
    insert_step(store, result.chat_id, result.floor, result.seq, result.ok, result.reason,
                result.commit.id if result.commit else None, result.active_types, usage.calls, usage.input_tokens,
                usage.output_tokens, usage.latency_ms)
