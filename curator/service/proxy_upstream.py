"""The proxy's side towards the real model: which key to send, what a transport failure looks like to the client,
and the endpoints passed through unchanged (`/v1/models`, `/v1/embeddings`, `/v1/completions`, each also under
`/v1/chats/{chat_id}/`, so a front end whose base URL names the chat finds them too).

A front end with no key set sends a placeholder (SillyTavern sends `Authorization: Bearer undefined`); it is
replaced by the configured upstream key, or dropped. When the upstream cannot be reached or does not answer in
time the client gets a 502 or 504 with an OpenAI-shaped error naming the upstream and what to check, and the log
gets one line, not a traceback.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable

import httpx2
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

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
    try:
        upstream = await config.client().request(request.method, url, content=body, headers=headers,
                                                 params=dict(request.query_params))
    except httpx2.TransportError as exc:
        return upstream_error(config.upstream, exc)
    passed = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_HEADERS}
    return Response(upstream.content, status_code=upstream.status_code, headers=passed)


def _endpoint(path: str) -> Callable[[Request], Awaitable[Response]]:
    async def relay(request: Request) -> Response:
        return await pass_through(request, path)

    relay.__name__ = f"pass_{path}"
    return relay


# The endpoints a front end checks or uses besides chat completions, at /v1 and under a chat's URL.
for _method, _path in (("GET", "models"), ("POST", "embeddings"), ("POST", "completions")):
    for _prefix in ("/v1", "/v1/chats/{chat_id}"):
        router.add_api_route(f"{_prefix}/{_path}", _endpoint(_path), methods=[_method],
                             name=f"{_path}{'_in_chat' if 'chat_id' in _prefix else ''}")
