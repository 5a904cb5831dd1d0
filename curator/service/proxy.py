"""The OpenAI-compatible proxy: memory for any front end that speaks the chat-completions API, with no plugin.

`POST /v1/chat/completions` (or `/v1/chats/{chat_id}/chat/completions`): the chat id comes from the path, the
`X-Curator-Chat` header or the request's `user` field. The proxy syncs the request's messages (its user and
assistant messages are the chat's floors; system messages are not), recalls for the last user message,
injects the memory at the configured position/depth/role, forwards the request to the upstream model and
returns its answer unchanged (streamed or not). Then, in the background, the answer becomes the next floor and
its extraction is queued as a job.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field

import httpx2
from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response, StreamingResponse
from starlette.background import BackgroundTask

from curator.errors import CuratorError
from curator.store.messages import Message
from curator.service.server.security import error_body

log = logging.getLogger("curator.proxy")
router = APIRouter(tags=["proxy"])
CHAT_HEADER = "x-curator-chat"
RECALL_TURNS = 6  # of the request's last messages reach recall (the query is built from them)


@dataclass
class ProxyConfig:
    upstream: str | None  # OpenAI-compatible base URL, e.g. https://api.openai.com/v1
    key_env: str | None = None  # the variable holding the upstream key; else the client's own header is passed on
    timeout: float = 600.0
    _client: httpx2.AsyncClient | None = field(default=None, repr=False)

    def client(self) -> httpx2.AsyncClient:
        if self._client is None:
            self._client = httpx2.AsyncClient(timeout=self.timeout)
        return self._client


def floors_of(messages: list[dict]) -> list[Message]:
    """The chat's floors in a chat-completions request: its user and assistant messages, in order."""
    floors = []
    for index, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m:
            raise CuratorError(f"messages[{index}] is not a chat message (no role)")
        if m["role"] in ("user", "assistant"):
            floors.append(Message(m["role"], str(m.get("name") or ""), _text(m.get("content"))))
    return floors


def _text(content) -> str:
    if isinstance(content, list):  # content parts: keep the text ones
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return content if isinstance(content, str) else ""


def inject(messages: list[dict], text: str, placement: dict) -> list[dict]:
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


def _chat_id(request: Request, body: dict, path_chat: str | None) -> str:
    chat_id = path_chat or request.headers.get(CHAT_HEADER) or body.get("user")
    if not chat_id or not isinstance(chat_id, str):
        raise CuratorError("no chat id: give it in the path (/v1/chats/{id}/chat/completions), the X-Curator-Chat "
                           "header or the request's `user` field")
    return chat_id


@router.post("/v1/chat/completions")
async def completions(request: Request):
    return await _proxy(request, None)


@router.post("/v1/chats/{chat_id}/chat/completions")
async def chat_completions(request: Request, chat_id: str):
    return await _proxy(request, chat_id)


async def _proxy(request: Request, path_chat: str | None):
    service, config = request.app.state.service, request.app.state.proxy
    if not config.upstream:
        return error_body(503, "no_upstream", "the proxy has no upstream model", "Start the service with --upstream URL.")
    try:
        body = json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return error_body(400, "invalid_json", f"request body is not JSON: {exc}")
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
        return error_body(400, "invalid_request", "a chat-completions request needs a non-empty `messages` list")
    chat_id = _chat_id(request, body, path_chat)
    floors = floors_of(body["messages"])
    injection, start = await run_in_threadpool(_prepare, service, chat_id, floors)
    forwarded = dict(body, messages=inject(body["messages"], injection.text if injection else "",
                                           injection.placement if injection else {}))
    headers = {"content-type": "application/json"}
    key = os.environ.get(config.key_env, "") if config.key_env else ""
    if key:
        headers["authorization"] = f"Bearer {key}"
    elif not request.app.state.service_token and request.headers.get("authorization"):
        headers["authorization"] = request.headers["authorization"]  # the client's own upstream key
    url = config.upstream.rstrip("/") + "/chat/completions"
    extra = {"x-curator-chat": chat_id,
             "x-curator-memory-tokens": str(injection.tokens if injection else 0)}
    client = config.client()
    if body.get("stream"):
        upstream = await client.send(client.build_request("POST", url, json=forwarded, headers=headers), stream=True)
        collected: list[str] = []

        async def relay():
            try:
                async for chunk in upstream.aiter_bytes():
                    collected.append(chunk.decode("utf-8", errors="replace"))
                    yield chunk
            finally:
                await upstream.aclose()

        after = (BackgroundTask(_after_stream, service, chat_id, start + len(floors), collected)
                 if upstream.is_success else None)
        return StreamingResponse(relay(), status_code=upstream.status_code, headers=extra,
                                 media_type=upstream.headers.get("content-type", "text/event-stream"),
                                 background=after)
    upstream = await client.post(url, json=forwarded, headers=headers)
    after = None
    if upstream.is_success:
        after = BackgroundTask(_remember, service, chat_id, start + len(floors), _reply_text(upstream.content))
    return Response(upstream.content, status_code=upstream.status_code, headers=extra,
                    media_type=upstream.headers.get("content-type", "application/json"), background=after)


def window_start(stored: list[Message], floors: list[Message], probe: int = 3) -> int:
    """Where the request's messages start in the stored chat. Front ends drop the oldest messages once the
    context is full, so the request is often a tail of the chat: it starts at the stored floor from which the
    most of its first messages match (one of its first `probe` messages may itself be edited). 0 when nothing
    matches: then it is the whole chat."""
    best, best_run = 0, 0
    by_hash: dict[int, list[int]] = {}
    for floor, message in enumerate(stored):
        by_hash.setdefault(message.hash, []).append(floor)
    for offset, message in enumerate(floors[:probe]):
        for floor in by_hash.get(message.hash, ()):
            start = floor - offset
            if start < 0:
                continue
            run = 0  # how many of the request's messages from `offset` on match the stored floors
            while (start + offset + run < len(stored) and offset + run < len(floors)
                   and stored[start + offset + run].hash == floors[offset + run].hash):
                run += 1
            if run > best_run or (run == best_run and start > best):
                best, best_run = start, run
    return best


def _prepare(service, chat_id: str, floors: list[Message]) -> tuple[object | None, int]:
    """Sync the request's floors (creating the chat on first sight) and recall for its last user message.
    Returns the injection (None when there is nothing to recall for) and the floor the request starts at."""
    if not service.memory.store.has_chat(chat_id):
        try:
            service.memory.create_chat(chat_id, "default")
        except CuratorError:
            if not service.memory.store.has_chat(chat_id):  # not a lost race with another request
                raise
    if not floors:
        return None, len(service.memory.store.messages(chat_id))  # a system-only call: memory stays as it is
    with service.writer(chat_id):
        start = window_start(service.memory.store.messages(chat_id), floors)
        service.sync(chat_id, floors, start, extract=False)
    user = next((i for i in range(len(floors) - 1, -1, -1) if floors[i].role == "user"), None)
    if user is None:
        return None, start
    turns = floors[max(0, user - RECALL_TURNS + 1):user + 1]  # the query is built from the recent turns
    return service.recall(chat_id, floors[user].text, user_floor=start + user, messages=turns), start


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


def _after_stream(service, chat_id: str, floor: int, chunks: list[str]) -> None:
    _remember(service, chat_id, floor, _stream_text(chunks))


def _remember(service, chat_id: str, floor: int, text: str) -> None:
    """The answer becomes floor `floor`; its extraction (and anything else due) is queued."""
    if not text.strip():
        return
    try:
        with service.writer(chat_id):
            if len(service.memory.store.messages(chat_id)) != floor:
                return  # another request moved the chat on meanwhile; its next request carries this reply
            service.sync(chat_id, [Message("assistant", "", text)], floor, extract=True)
    except CuratorError as exc:  # the chat moved on meanwhile (another request synced it): nothing to add
        log.info("proxy: reply of chat %s not remembered: %s", chat_id, exc)
