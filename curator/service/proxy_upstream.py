"""The proxy's side towards the real model: which key to send, what a transport failure looks like to the client,
and the endpoints passed through unchanged (`/v1/models`, `/v1/embeddings`, `/v1/completions`, each also under
`/v1/chats/{chat_id}/`, so a front end whose base URL names the chat finds them too).

A front end with no key set sends a placeholder (SillyTavern sends `Authorization: Bearer undefined`); it is
replaced by the configured upstream key, or dropped. When the upstream cannot be reached or does not answer in
time the client gets a 502 or 504 with an OpenAI-shaped error naming the upstream and what to check, and the log
gets one line, not a traceback.

With no extraction model configured, the upstream extracts too (`extraction.upstream_fallback`, on by default): each
chat's own model is the one its requests name, at the upstream's URL, with `--upstream-key-env`'s key
(`proxy._own_model`).
`extraction_status` is what `serve`'s banner, `/api/v1/health` and the panel say about it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import httpx2
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from curator.errors import CuratorError

if TYPE_CHECKING:
    from curator.api.memory import Memory
    from curator.settings import Settings, Task

log = logging.getLogger("curator.proxy")
router = APIRouter(tags=["proxy"])

PLACEHOLDER_KEYS = {"", "undefined", "null", "none", "nokey", "no-key", "sk-no-key-required"}
_HOP_HEADERS = {"content-length", "transfer-encoding", "connection", "content-encoding", "keep-alive"}


def upstream_headers(request: Request, key_env: str | None, service_token: str | None) -> dict[str, str]:
    """Headers for the upstream: JSON, and the key: the configured one (`--upstream-key-env`), else the
    client's own `Authorization` unless it is a placeholder or the service's token."""
    headers = {"content-type": "application/json"}
    key = os.environ.get(key_env, "") if key_env else ""
    if key:
        headers["authorization"] = f"Bearer {key}"
        return headers
    given = request.headers.get("authorization", "")
    if given and not service_token and not is_placeholder(given):
        headers["authorization"] = given  # the client's own upstream key
    return headers


def is_placeholder(authorization: str) -> bool:
    """`Bearer undefined`, `Bearer ` and the like: a front end with no key set."""
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return not authorization.strip()
    return value.strip().lower() in PLACEHOLDER_KEYS


def upstream_error(upstream: str, exc: Exception) -> JSONResponse:
    """A transport failure as the client should see it: 504 for a timeout, else 502; OpenAI's error shape."""
    timeout = isinstance(exc, httpx2.TimeoutException) and not isinstance(exc, httpx2.ConnectTimeout)
    status = 504 if timeout else 502
    what = "did not answer in time" if timeout else "could not be reached"
    hint = ("Check that the model server behind it is running and answers at that URL (`curator serve "
            "--upstream URL`, an OpenAI-compatible base URL ending in /v1)"
            + ("; a slow model may need a longer timeout." if timeout else "."))
    message = f"the proxy's upstream model at {upstream} {what} ({type(exc).__name__}: {exc or 'no detail'})"
    log.warning("proxy: upstream %s %s: %s", upstream, what, type(exc).__name__)
    return JSONResponse({"error": {"message": message, "type": "upstream_error",
                                   "code": "upstream_timeout" if timeout else "upstream_unreachable",
                                   "hint": hint}}, status_code=status)


def _configured(settings: Settings, task: Task) -> bool:
    try:
        settings.profile_for(task)
    except CuratorError:
        return False
    return True


def extraction_status(memory: Memory, upstream: str | None, key_env: str | None = None,
                      override: bool = False) -> dict[str, Any]:
    """Whether replies can be extracted, and by which model: {ok, model, source, warning}. `override`: the service
    was given a model object (tests, scripted runs)."""
    if override:
        return {"ok": True, "model": "given", "source": "override", "warning": ""}
    try:
        settings = memory.settings
    except CuratorError as exc:
        return {"ok": False, "model": None, "source": None, "warning": f"the settings cannot be read: {exc}"}
    from curator.settings import writers_of

    channel = settings.extraction.channel
    writers = writers_of(channel)
    if not writers:
        return {"ok": True, "model": None, "source": "off", "warning": "extraction is off (extraction.channel: off)"}
    task: Task = "extract" if "extractor" in writers else "curate"
    if _configured(settings, task):
        return {"ok": True, "model": settings.profile_for(task).model, "source": "config", "warning": ""}
    if task == "extract" and upstream and settings.extraction.upstream_fallback:
        return {"ok": True, "model": None, "source": "upstream",
                "warning": "no extraction model configured: each chat's replies are extracted by the upstream model "
                           "its requests name" + ("" if key_env else
                                                                          "; give --upstream-key-env if the upstream "
                                                                          "needs a key")}
    return {"ok": False, "model": None, "source": None,
            "warning": f"no model for the {task!r} task: every reply's extraction will fail. Add `profiles: "
                       "{default: {model: ..., base_url: ...}}` to config.yaml, set CURATOR_MODEL, or start the "
                       "proxy with --upstream (extraction.upstream_fallback)"}


def no_upstream() -> JSONResponse:
    return JSONResponse({"error": {"message": "the proxy has no upstream model", "type": "upstream_error",
                                   "code": "no_upstream", "hint": "Start the service with --upstream URL."}},
                        status_code=503)


async def pass_through(request: Request, path: str) -> Response:
    """Forward the request to `<upstream>/<path>` as it is (body and query), answer with the upstream's reply."""
    config = request.app.state.proxy
    if not config.upstream:
        return no_upstream()
    url = config.upstream.rstrip("/") + "/" + path
    headers = upstream_headers(request, config.key_env, request.app.state.service_token)
    body = await request.body() if request.method == "POST" else None
    if body is not None and not _json_object(body):
        return JSONResponse({"error": {"message": "the request body is not a JSON object", "type": "invalid_request",
                                       "code": "invalid_json", "hint": "Send the request as a JSON object, as the "
                                       "OpenAI API expects."}}, status_code=400)
    try:
        upstream = await config.client().request(request.method, url, content=body, headers=headers,
                                                 params=dict(request.query_params))
    except httpx2.TransportError as exc:
        return upstream_error(config.upstream, exc)
    passed = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_HEADERS}
    return Response(upstream.content, status_code=upstream.status_code, headers=passed)


def _json_object(body: bytes) -> bool:
    import json

    try:
        return isinstance(json.loads(body), dict)
    except (ValueError, RecursionError):
        return False


def _endpoint(path: str, in_chat: bool) -> Callable[..., Awaitable[Response]]:
    async def relay(request: Request) -> Response:
        return await pass_through(request, path)

    async def relay_in_chat(request: Request, chat_id: str) -> Response:  # the chat id is part of the base URL
        return await pass_through(request, path)

    chosen = relay_in_chat if in_chat else relay
    chosen.__name__ = f"pass_{path}"
    return chosen


ANY_JSON: dict[str, Any] = {"content": {"application/json": {"schema": {}}}}
# What the pass-through endpoints answer: the upstream's own answer, status and body, unchanged.
PASSED: dict[int | str, dict[str, Any]] = {"200": {"description": "The upstream's answer, unchanged.", **ANY_JSON},
          "4XX": {"description": "The upstream's (or the proxy's) refusal.", **ANY_JSON},
          "5XX": {"description": "The upstream failed, is down (502), too slow (504) or not set (503).", **ANY_JSON}}
JSON_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": {"type": "object"}}}}}

# The endpoints a front end checks or uses besides chat completions, at /v1 and under a chat's URL.
for _method, _path in (("GET", "models"), ("POST", "embeddings"), ("POST", "completions")):
    for _prefix in ("/v1", "/v1/chats/{chat_id}"):
        router.add_api_route(f"{_prefix}/{_path}", _endpoint(_path, "chat_id" in _prefix), methods=[_method],
                             name=f"{_path}{'_in_chat' if 'chat_id' in _prefix else ''}", responses=PASSED,
                             openapi_extra=JSON_BODY if _method == "POST" else None)
