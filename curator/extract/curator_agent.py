"""The memory_curator agent: an observe/act loop over the tools in `tools/`, for one floor of one chat.

The agent reads the graph, writes through per-type tools exposed by cadence, compacts by KEEP/FOLD/DROP and
ends with a text reply. Every write is staged in a private copy of the graph; when the run ends well, the staged
ops land as ONE commit anchored at the curated floor (a dry run returns them instead). A run that fails or hits
its request cap commits nothing and says why. Each run returns its trace: tool calls, model requests, tokens,
latency and the ops committed."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic_ai import Agent
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.models import Model
from pydantic_ai.usage import UsageLimits

from curator.prompts import SHIPPED, Prompts, prompts_for
from curator.schemas import Schema
from curator.tools import ToolCall, Workspace, agent_tools, run_tools

from curator.errors import CuratorError, OpError
from curator.extract.fit import fitted_messages, floors_budget
from curator.extract.triggers import active_types
from curator.extract.extractor import assistant_floors, failure_reason
from curator.llm.access import TaskModel
from curator.llm.models import model_settings
from curator.llm.records import CallRecord, LLMTrace, Usage
from curator.store.messages import Message
from curator.settings import Settings
from curator.store.store import CommitRecord, Store
from curator.llm.usage import log_calls

if TYPE_CHECKING:
    from curator.vectors.index import VectorIndex


@dataclass
class CurateResult:
    """What one curator run did and cost."""

    chat_id: str
    floor: int
    seq: int
    active_types: list[str]
    ok: bool
    dry_run: bool = False
    commit: CommitRecord | None = None
    staged_ops: list[dict[str, Any]] = field(default_factory=list)
    reply: str = ""
    reason: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    requests: list[CallRecord] = field(default_factory=list)  # one per model request: tokens, latency, error
    usage: Usage = field(default_factory=Usage)
    latency_ms: float = 0.0
    maintenance: list[Any] = field(default_factory=list)  # what ran after the run (compression in the pipeline)

    def to_dict(self) -> dict[str, Any]:
        return {"chat": self.chat_id, "floor": self.floor, "seq": self.seq, "active_types": self.active_types,
                "ok": self.ok, "dry_run": self.dry_run, "commit": self.commit.id if self.commit else None,
                "ops": self.staged_ops, "reply": self.reply, "reason": self.reason,
                "tool_calls": [c.to_dict() for c in self.tool_calls], "model_requests": self.usage.calls,
                "requests": [asdict(r) for r in self.requests],
                "usage": self.usage.to_dict(), "latency_ms": round(self.latency_ms, 1),
                **({"maintenance": [m.to_dict() for m in self.maintenance]} if self.maintenance else {})}


class Curator:
    """Curator runs for the chats of one store. `model` replaces the `curate` profile's model (tests, scripts);
    `index` (a VectorIndex) enables the vector search tool."""

    def __init__(self, store: Store, settings: Settings, model: Model | None = None,
                 index: VectorIndex | None = None) -> None:
        self.store, self.settings, self.index = store, settings, index
        self.prompts = prompts_for(store.data_dir)
        self._model = TaskModel(settings, "curate", model)  # the profile's limiter and retries (llm/access.py)
        self._agents: dict[tuple[Any, ...], tuple[Schema, Agent[Workspace, str]]] = {}

    async def curate(self, chat_id: str, floor: int | None = None, draft_reply: str | None = None, *,
                     dry_run: bool = False, max_requests: int | None = None, scouts: str | None = None) -> CurateResult:
        """Curate memory after the reply at `floor` (default: the newest reply; with `draft_reply`, the floor the
        draft will take). `draft_reply` is a reply the orchestrator drafted but has not stored yet; `scouts`, what
        the scouts found before it (`curator/api/scouts.py`), is in the run's prompt."""
        started = time.perf_counter()
        chat = self.store.chat(chat_id)
        settings = self.settings.for_chat(chat.settings)
        messages = self.store.messages(chat_id)
        floor, seq, focus = _focus(chat_id, messages, floor, draft_reply)
        active = active_types(chat.schema, self.store.graph(chat_id), seq, focus.text)  # cadence or triggers
        cap = max_requests or settings.extraction.curator_max_requests
        result = CurateResult(chat_id, floor, seq, active, ok=False, dry_run=dry_run)
        trace = LLMTrace()
        ws = Workspace.open(self.store, chat_id, floor, seq, active, index=self.index,
                            latest_floor=max(floor, len(messages) - 1))
        try:
            model = TaskModel(settings, "curate", self._model.given).metered(trace)  # the chat's own model too
            prompt = self._user_prompt(chat_id, chat.schema, settings, messages, floor, seq, focus, active, scouts)
            run = await self._agent(chat.schema, active, settings, ws.index is not None).run(
                prompt, model=model, deps=ws, usage_limits=UsageLimits(request_limit=cap))
            result.reply = run.output if isinstance(run.output, str) else str(run.output)
            result.staged_ops = list(ws.staged)
            if not dry_run:
                # Committed even when empty: the commit log then says this floor was curated (the curator
                # channel's pointer), and a rollback of the floor undoes the run like any other.
                note = f"curator seq {seq}: {len(ws.calls)} tool calls"
                result.commit = self.store.commit(chat_id, ws.staged, floor, "curate", note=note)
            result.ok = True
        except UsageLimitExceeded:
            result.reason = f"hit the cap of {cap} model requests before finishing; nothing was committed"
        except (CuratorError, OpError) as exc:
            result.reason = f"{exc}; nothing was committed"
        except Exception as exc:  # noqa: BLE001 - model/HTTP failures of any kind: reported, nothing committed
            result.reason = f"{failure_reason(exc)}; nothing was committed"
        finally:
            ws.close()
        if not result.ok:
            result.staged_ops = list(ws.staged)  # what it would have written, for the trace
        result.tool_calls = list(ws.calls)
        result.requests = list(trace.records)
        result.usage = trace.usage()
        result.latency_ms = (time.perf_counter() - started) * 1000
        log_calls(self.store, chat_id, trace.records)
        return result

    def _agent(self, schema: Schema, active: list[str], settings: Settings, vectors: bool) -> Agent[Workspace, str]:
        """One agent per schema, active types and settings (building the tool schemas costs more than a step)."""
        profile = TaskModel(settings, "curate", self._model.given).profile
        system = system_prompt(settings, self.prompts)
        key = (id(schema), tuple(active), vectors, system, profile.model_dump_json() if profile else None)
        cached = self._agents.get(key)
        if cached is not None and cached[0] is schema:
            return cached[1]
        agent = Agent(None, output_type=str, deps_type=Workspace, system_prompt=system,
                      tools=agent_tools(run_tools(schema, active, vector_search=vectors)), retries=3,
                      model_settings=model_settings(profile) if profile else None)
        self._agents[key] = (schema, agent)  # keeps `schema` alive, so its id is not reused
        return agent

    def _user_prompt(self, chat_id: str, schema: Schema, settings: Settings, messages: list[Message], floor: int,
                     seq: int, focus: Message, active: list[str], scouts: str | None = None) -> str:
        turns = settings.extraction.context_turns
        start = floor
        users = 0
        while start > 0 and users < turns + 1:
            start -= 1
            users += messages[start].role == "user" if start < len(messages) else 0
        floors = range(start, min(floor, len(messages)))
        profile = settings.profiles.get(settings.tasks.get("curate", "default"))
        shown, _ = fitted_messages([*messages[:floor], focus], [*floors, floor], floors_budget(profile))
        context = "\n\n".join(_line(f, shown[f]) for f in floors)
        focus = shown[floor]  # cut to the model's context too, with a note
        compressed = [n for n, s in schema.types.items() if s.compression.mode == "hierarchical"]
        return self.prompts.render("curator_user", floor=floor, seq=seq,
                                   active_types=", ".join(active) or "(none this run)",
                                   compressed_types=", ".join(compressed) or "(none)",
                                   extracted=self._extracted(chat_id, floor) or "(nothing)",
                                   scouts=scouts or "(no scouts ran)",
                                   context=context or "(none)", focus=_line(floor, focus))

    def _extracted(self, chat_id: str, floor: int) -> str:
        """The extractor's ops at this floor, one line each (channel `both`: the curator builds on them)."""
        lines = []
        for record in self.store.commits(chat_id, since_floor=floor):
            if record.origin != "extract" or record.anchor_floor != floor:
                continue
            for op in record.ops:
                if op["op"] == "create_node":
                    lines.append(f"- created {op['type']} {op['id']}: {op.get('title') or op.get('fields')}")
                elif op["op"] == "update_node":
                    lines.append(f"- updated {op['id']}: set {sorted(op.get('set_fields', {}))}")
                elif op["op"] == "link":
                    lines.append(f"- linked {op['source']} -{op['relation']}-> {op['target']}")
        return "\n".join(lines)


def system_prompt(settings: Settings, prompts: Prompts = SHIPPED) -> str:
    language = settings.extraction.language
    rule = "the language the chat is written in" if language == "auto" else language
    return prompts.render("curator_system", language_rule=rule)


def _focus(chat_id: str, messages: list[Message], floor: int | None,
           draft_reply: str | None) -> tuple[int, int, Message]:
    """The floor to curate, its cadence step (seq) and the reply itself (stored or drafted)."""
    floors = assistant_floors(messages)
    if draft_reply is not None:
        if not draft_reply.strip():
            raise CuratorError("the draft reply is empty")
        floor = len(messages) if floor is None else floor
        if floor < 0 or floor > len(messages):
            raise CuratorError(f"floor {floor} is outside chat {chat_id!r} (it has {len(messages)} floors)")
        seq = sum(1 for f in floors if f < floor) + 1
        return floor, seq, Message("assistant", "draft", draft_reply)
    if floor is None:
        if not floors:
            raise CuratorError(f"chat {chat_id!r} has no assistant reply to curate",
                               "Store the chat's messages first, or pass the drafted reply.")
        floor = floors[-1]
    if floor not in floors:
        raise CuratorError(f"floor {floor} of chat {chat_id!r} is not an assistant reply with text",
                           "Give the floor of an assistant reply, or pass the drafted reply (--draft).")
    return floor, floors.index(floor) + 1, messages[floor]


def _line(floor: int, message: Message) -> str:
    return f"[floor {floor}] {message.name or message.role} ({message.role}): {message.text}"
