"""The OpenAI-compatible proxy: memory for any front end that speaks the chat-completions API, with no plugin.

`POST /v1/chat/completions` (or `/v1/chats/{chat_id}/chat/completions`): the chat id comes from the path, the
`X-Curator-Chat` header (percent-encoded) or the request's `user` field. The proxy syncs the request's messages
(its user and assistant messages are the chat's floors; system messages are not), recalls for the last user message,
injects the memory at the configured position/depth/role, forwards the request to the upstream model and
returns its answer unchanged (streamed or not). Then, in the background, the answer becomes the next floor and
its extraction is queued as a job. An edit far back is synced like any other: what it reverts is kept in the trash
and reported in the `X-Curator-Reverted` headers (`curator undo` or the panel restore it). Only a request that would
replace the chat or empty most of it is refused with 409 unless it says so (`proxy_guard`).

What a front end really sends (`proxy_match`): its copy of a reply the proxy recorded (a name added, whitespace
trimmed, the tail cut at a stop string) is the same floor, adopted with no rollback; impersonate and quiet requests
store nothing, a Continue extends the reply it continues; with `n` > 1 nothing is stored until the next request
shows which choice the user kept. The upstream side (keys, transport errors, pass-through endpoints) is in
`proxy_upstream`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx2
from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response, StreamingResponse
from starlette.background import BackgroundTask

from curator.errors import ChatExists, CuratorError, RollbackRefused
from curator.store.messages import Message
from curator.store.store import utc_now
from curator.service.history_window import HEADER as WINDOW_HEADER, SAVED_HEADER, history_floors, keep_recent_floors
from curator.service.proxy_guard import allowed, check_chat_id, encode_chat_id, header_chat_id
from curator.service.proxy_match import (  # noqa: F401
    KIND_HEADER, SPEAKER_HEADER, PromptNames, chat_names, continued, next_speaker, prompt_names, reply_name,
    request_kind, sync_request, window_start)
from curator.service.proxy_upstream import no_upstream, upstream_error, upstream_headers
from curator.service.proxy_upstream import router as upstream_router
from curator.service.server.security import error_body

if TYPE_CHECKING:
    from curator.recall.injection import Injection
    from curator.service.server.state import Service
    from curator.sync.history import HistoryReport

log = logging.getLogger("curator.proxy")
router = APIRouter(tags=["proxy"])
router.include_router(upstream_router)  # /v1/models, /v1/embeddings, /v1/completions pass through
CHAT_HEADER = "x-curator-chat"
RECALL_TURNS = 6  # of the request's last messages reach recall (the query is built from them)


@dataclass
class ProxyConfig:
    upstream: str | None  # OpenAI-compatible base URL, e.g. https://api.openai.com/v1
    key_env: str | None = None  # the variable holding the upstream key; else the client's own header is passed on
    timeout: float = 600.0  # seconds to wait for the upstream (`curator serve --upstream-timeout`)
    max_rollback: int | None = None  # a cap on the floors a request may roll back (proxy_guard); None: no cap
    _client: httpx2.AsyncClient | None = field(default=None, repr=False)

    def client(self) -> httpx2.AsyncClient:
        if self._client is None:
            self._client = httpx2.AsyncClient(timeout=self.timeout)
        return self._client


def floors_of(messages: list[dict[str, Any]]) -> list[Message]:
    """The chat's floors in a chat-completions request: its user and assistant messages, in order (the name a
    message carries in its `name` field is the floor's name)."""
    floors = []
    for index, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("name", ""),
                                                                                         (str, type(None))):
            raise CuratorError(f"messages[{index}] is not a chat message (a `role` and, if any, a `name` as text)",
                               "Each message is an object with a `role` (user, assistant, system) and its `content`.")
        if m["role"] in ("user", "assistant"):
            floors.append(Message(m["role"], str(m.get("name") or ""), _text(m.get("content"))))
    return floors


def _text(content: object) -> str:
    if isinstance(content, list):  # content parts: keep the text ones
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return content if isinstance(content, str) else ""


def inject(messages: list[dict[str, Any]], text: str, placement: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's messages with the memory inserted: `at_depth` puts a message of `role` `depth` messages
    from the end (never above the leading system messages); `system` appends it to the first system message."""
    if not text:
        return messages
    role = placement.get("role", "system")
    if placement.get("position") == "system" and messages and messages[0].get("role") == "system":
        first = dict(messages[0])
        first["content"] = f"{_text(first.get('content')) or first.get('content') or ''}\n\n{text}".strip()
        return [first, *messages[1:]]
    leading = next((i for i, m in enumerate(messages) if m.get("role") != "system"), len(messages))
    at = max(len(messages) - int(placement.get("depth", 0)), leading)
    return [*messages[:at], {"role": role, "content": text}, *messages[at:]]


def _chat_id(request: Request, body: dict[str, Any], path_chat: str | None) -> str:
    chat_id = path_chat or header_chat_id(request.headers.get(CHAT_HEADER)) or body.get("user")
    if not chat_id or not isinstance(chat_id, str):
        base = str(request.base_url).rstrip("/")
        raise CuratorError(  # the message is what SillyTavern shows: it says what to set there
            f"no chat id: the proxy keeps one memory per chat. In SillyTavern (API: Chat Completion, source: "
            f"Custom (OpenAI-compatible)) set Custom Endpoint (Base URL) to {base}/v1/chats/<chat id>, e.g. "
            f"{base}/v1/chats/my-story; or keep {base}/v1 and add `X-Curator-Chat: <chat id>` under Additional "
            f"Parameters > Include Request Headers.",
            "Other clients: the path /v1/chats/<chat id>/chat/completions, the X-Curator-Chat header, or the "
            "request's `user` field.")
    return check_chat_id(chat_id)


# The request as the proxy reads it; every other field goes to the upstream as given.
CHAT_REQUEST: dict[str, Any] = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "required": ["messages"], "description": "An OpenAI chat-completions request.",
    "properties": {"messages": {"type": "array", "minItems": 1, "items": {
        "type": "object", "required": ["role"],
        "properties": {"role": {"type": "string"}, "name": {"type": ["string", "null"]}}}},
        "user": {"description": "the chat id, when neither the path nor X-Curator-Chat names it"}}}}}}}
ANSWERS: dict[int | str, dict[str, Any]] = {
    "200": {"description": "The upstream's answer, unchanged: JSON, or server-sent events when streamed. Headers: "
                           "X-Curator-Chat, X-Curator-Kind, X-Curator-Memory-Tokens, X-Curator-Recall, and "
                           "X-Curator-Reverted(-Batch) when the request's sync reverted memory (kept; "
                           "POST /api/v1/chats/{id}/undo restores it).",
            "content": {"application/json": {"schema": {}}, "text/event-stream": {"schema": {}}}},
    "4XX": {"description": "Refused (nothing changed), or the upstream's own refusal passed on.",
            "content": {"application/json": {"schema": {}}}},
    "5XX": {"description": "The upstream failed, is down (502), too slow (504) or not set (503).",
            "content": {"application/json": {"schema": {}}}},
}


@router.post("/v1/chat/completions", openapi_extra=CHAT_REQUEST, responses=ANSWERS)
async def completions(request: Request) -> Response:
    return await _proxy(request, None)


@router.post("/v1/chats/{chat_id}/chat/completions", openapi_extra=CHAT_REQUEST, responses=ANSWERS)
async def chat_completions(request: Request, chat_id: str) -> Response:
    return await _proxy(request, chat_id)


async def _proxy(request: Request, path_chat: str | None) -> Response:
    service, config = request.app.state.service, request.app.state.proxy
    if not config.upstream:
        return no_upstream()
    try:
        body = json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        return error_body(400, "invalid_json", f"request body is not JSON: {exc}")
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
        return error_body(400, "invalid_request", "a chat-completions request needs a non-empty `messages` list")
    chat_id = _chat_id(request, body, path_chat)
    floors = floors_of(body["messages"])
    if isinstance(body.get("model"), str) and body["model"].strip():  # no extraction model: the upstream's extracts
        await run_in_threadpool(_own_model, service, chat_id, config, body["model"].strip())
    kind = request_kind(body["messages"], request.headers.get(KIND_HEADER), tails=service.request_tails,
                        chat_id=chat_id, stream=bool(body.get("stream")))
    window = history_floors(_history_setting(service, chat_id), request.headers.get(WINDOW_HEADER))
    speaker = next_speaker(body["messages"], request.headers.get(SPEAKER_HEADER))  # a group chat's next member
    try:
        injection, start, report, name = await run_in_threadpool(
            _prepare, service, chat_id, floors, allowed(request.headers), str(request.base_url), config.max_rollback,
            prompt_names(body["messages"], body.get("stop")), speaker)
    except RollbackRefused as exc:
        return error_body(409, "rollback_refused", str(exc), exc.hint)
    messages, dropped, saved = keep_recent_floors(body["messages"], window if injection and injection.text else 0)
    forwarded = dict(body, messages=inject(messages, injection.text if injection else "",
                                           injection.placement if injection else {}))
    headers = upstream_headers(request, config.key_env, request.app.state.service_token)
    url = config.upstream.rstrip("/") + "/chat/completions"
    extra = {"x-curator-chat": encode_chat_id(chat_id), "x-curator-kind": kind,
             "x-curator-memory-tokens": str(injection.tokens if injection else 0),
             "x-curator-recall": "none" if injection is None else "reused" if injection.reused else "fresh",
             **reverted_headers(report, chat_id)}
    if window:
        extra[SAVED_HEADER] = str(saved)
        log.info("proxy: chat %s: %d old messages (%d tokens) left to memory", chat_id, dropped, saved)
    # What the answer does to the chat: a new floor (chat), an addition to the last reply (continue), or
    # nothing (impersonate, quiet, a request with no chat message; several choices, until the next request shows
    # the one kept).
    keep = kind in ("chat", "continue") and _choices(body) == 1 and bool(floors)
    end = start + len(floors)
    client = config.client()
    if body.get("stream"):
        try:
            upstream = await client.send(client.build_request("POST", url, json=forwarded, headers=headers),
                                         stream=True)
        except httpx2.TransportError as exc:
            return upstream_error(config.upstream, exc)
        collected: list[str] = []

        async def relay() -> AsyncIterator[bytes]:
            try:
                async for chunk in upstream.aiter_bytes():
                    collected.append(chunk.decode("utf-8", errors="replace"))
                    yield chunk
            except httpx2.TransportError as exc:  # the upstream broke off mid-stream: end the stream, keep nothing
                log.warning("proxy: upstream %s broke off a stream: %s", config.upstream, type(exc).__name__)
                collected.clear()
            finally:
                await upstream.aclose()

        after = (BackgroundTask(_after_stream, service, chat_id, end, collected, kind, name)
                 if upstream.is_success and keep else None)
        return StreamingResponse(relay(), status_code=upstream.status_code, headers=extra,
                                 media_type=upstream.headers.get("content-type", "text/event-stream"),
                                 background=after)
    try:
        upstream = await client.post(url, json=forwarded, headers=headers)
    except httpx2.TransportError as exc:
        return upstream_error(config.upstream, exc)
    after = None
    if upstream.is_success and keep:
        after = BackgroundTask(_remember, service, chat_id, end, _reply_text(upstream.content), kind, name)
    return Response(upstream.content, status_code=upstream.status_code, headers=extra,
                    media_type=upstream.headers.get("content-type", "application/json"), background=after)


def _choices(body: dict[str, Any]) -> int:
    n = body.get("n")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 1 else 1


def reverted_headers(report: HistoryReport | None, chat_id: str) -> dict[str, str]:
    """What the request's sync reverted, for the client: the trash batch, how many commits, from which floor, and
    how to put it back."""
    if report is None or report.batch is None:
        return {}
    return {"x-curator-reverted-batch": str(report.batch),
            "x-curator-reverted": f"{len(report.reverted)} commit(s) from floor {report.dirty_floor} "
                                  f"({report.reason}); restore: POST /api/v1/chats/{encode_chat_id(chat_id)}/undo "
                                  f'{{"batch": {report.batch}}} or `curator undo --chat <id> {report.batch}`'}


def _prepare(service: Service, chat_id: str, floors: list[Message], allow: bool = False, base_url: str = "",
             max_rollback: int | None = None,
             given: PromptNames | None = None,
             speaker: str | None = None) -> tuple[Injection | None, int, HistoryReport | None, str]:
    """Sync the request's floors (creating the chat on first sight) and recall for its last user message.
    Returns the injection (None when there is nothing to recall for), the floor the request starts at, the sync's
    report (None when nothing was synced) and the name the front end gives the speaker of the reply."""
    _ensure_chat(service, chat_id)
    if not floors:  # a system-only call: memory stays as it is, and its answer is no floor
        return None, len(service.memory.store.messages(chat_id)), None, ""
    with service.writer(chat_id):  # nothing replaced or emptied without intent (proxy_guard)
        given = given or prompt_names([])
        start, report = sync_request(service, chat_id, floors, allow=allow, base_url=base_url,
                                     max_rollback=max_rollback, given=given.names)
        name = reply_name(service.memory.store.messages(chat_id), floors, given)
    user = next((i for i in range(len(floors) - 1, -1, -1) if floors[i].role == "user"), None)
    if user is None:
        return None, start, report, name
    turns = floors[max(0, user - RECALL_TURNS + 1):user + 1]  # the query is built from the recent turns
    return (service.recall(chat_id, floors[user].text, user_floor=start + user, messages=turns, speaker=speaker),
            start, report, name)


def _ensure_chat(service: Service, chat_id: str) -> None:
    """Create the chat a request names on first sight (default schema), and say so: in the log ("created chat X")
    and in the chat's events, which the panel's overview shows. A typo in a chat id is a new chat, so it must be
    seen."""
    if service.memory.store.has_chat(chat_id):
        return
    try:
        service.memory.create_chat(chat_id, "default")
    except ChatExists:  # another request created it meanwhile
        return
    log.info("proxy: created chat %s (a request named a chat id this service did not have; schema default)",
             chat_id)
    service.event_log.add(chat_id, {"at": utc_now(), "event": "created", "by": "proxy",
                                    "note": "a request named a chat id this service did not have"})


def _own_model(service: Service, chat_id: str, config: ProxyConfig, model: str) -> None:
    """With no extraction model configured, a chat's memory is written by its own upstream model: the one its
    requests name, at the proxy's upstream (with its key variable). Kept in the chat's settings (`model`)."""
    from curator.service.server.frontend_status import model_update

    settings = service.memory.settings
    if (service.models.extract is not None or "default" in settings.profiles
            or not settings.extraction.upstream_fallback):
        return
    _ensure_chat(service, chat_id)
    own = {"base_url": config.upstream, "model": model, **({"api_key_env": config.key_env} if config.key_env else {})}
    with service.writer(chat_id):
        model_update(service, chat_id, own)


def _history_setting(service: Service, chat_id: str) -> int:
    """The chat's `recall.history_floors` (its own, else config.yaml's; a chat not made yet: config.yaml's)."""
    if service.memory.store.has_chat(chat_id):
        return service.memory.recall_settings(chat_id).history_floors
    return service.memory.settings.recall.history_floors


def _reply_text(content: bytes) -> str:
    try:
        data = json.loads(content)
        return _text(data["choices"][0]["message"].get("content"))
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return ""


def _stream_text(chunks: list[str]) -> str:
    """The reply's text from a server-sent-events stream of chat.completion.chunk objects."""
    text = []
    for line in "".join(chunks).splitlines():
        if not line.startswith("data:") or line[5:].strip() == "[DONE]":
            continue
        try:
            delta = json.loads(line[5:])["choices"][0].get("delta", {})
        except (ValueError, KeyError, IndexError, TypeError):
            continue
        text.append(delta.get("content") or "")
    return "".join(text)


def _after_stream(service: Service, chat_id: str, floor: int, chunks: list[str], kind: str = "chat",
                  name: str = "") -> None:
    _remember(service, chat_id, floor, _stream_text(chunks), kind, name)


def _remember(service: Service, chat_id: str, floor: int, text: str, kind: str = "chat", name: str = "") -> None:
    """The answer becomes floor `floor`, named as the front end names the speaker (a Continue: is added to the reply
    at `floor - 1`); its extraction (and anything else due) is queued."""
    if not text.strip():
        return
    try:
        with service.writer(chat_id):
            stored = service.memory.store.messages(chat_id)
            if len(stored) != floor:
                return  # another request moved the chat on meanwhile; its next request carries this reply
            if kind == "continue":
                if not stored or stored[-1].role != "assistant":
                    return  # nothing to continue: the front end sends the whole reply next time
                service.sync(chat_id, [continued(stored[-1], text)], floor - 1, extract=True, reason="proxy")
                return
            service.sync(chat_id, [Message("assistant", name, text)], floor, extract=True, reason="proxy")
    except CuratorError as exc:  # the chat moved on meanwhile (another request synced it): nothing to add
        log.info("proxy: reply of chat %s not remembered: %s", chat_id, exc)
