"""Who may call the service and how much: bearer token, request body size, request rate per client."""

from __future__ import annotations

import hmac
import threading
import time
from dataclasses import dataclass
from typing import Protocol

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from curator.service.bind import check_bind, is_loopback  # noqa: F401 - re-exported

OPEN_PATHS = {"/api/v1/health", "/"}  # answered without a token (liveness checks; `/` redirects to the panel)
# The panel's static files hold no data (everything it shows comes from the API with the token), and a browser
# cannot send a bearer header when it navigates to a page.
OPEN_PREFIXES = ("/panel/",)


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = 8 * 1024 * 1024
    rate_per_minute: int = 0  # requests per client address; 0 = no limit
    burst: int = 60


def error_body(status: int, code: str, message: str, hint: str = "") -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message, "hint": hint}}, status_code=status)


def _open(path: str) -> bool:
    return path in OPEN_PATHS or path == "/panel" or path.startswith(OPEN_PREFIXES)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _preflight(headers: list[tuple[bytes, bytes]], send: Send) -> None:
    """A CORS preflight of an allowed origin, answered before the token check (a browser sends none with it)."""
    await send({"type": "http.response.start", "status": 204, "headers": [*headers, (b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b""})


def _with_headers(send: Send, headers: list[tuple[bytes, bytes]]) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *headers]}
        await send(message)

    return sending


class Policy(Protocol):
    """The site checks the guard runs first (`request_guard.SitePolicy`: Host, Origin, content type)."""

    async def refusal(self, request: Request) -> JSONResponse | None: ...

    def reads_body(self, request: Request) -> bool: ...

    def body_refusal(self, body: bytes) -> JSONResponse | None: ...

    def cross_origin(self, request: Request) -> str | None: ...

    def cors_headers(self, origin: str, request: Request) -> list[tuple[bytes, bytes]]: ...


class BodyTooLarge(HTTPException):
    """Raised while a body without a declared length is read, once it passes the limit (answered with 413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body over {limit} bytes")


class GuardMiddleware:
    """Token, body size and rate checks before any route runs, each with a JSON 4xx. A plain ASGI middleware,
    so a body sent without a length is counted as it streams in, never buffered whole to be measured."""

    def __init__(self, app: ASGIApp, token: str | None, limits: Limits, policy: Policy | None = None) -> None:
        self.app, self.token, self.limits = app, token, limits
        self.policy = policy  # request_guard.SitePolicy: Host, Origin and content-type checks (None: none)
        self._buckets: dict[str, tuple[float, float]] = {}
        self._guard = threading.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        request = Request(scope)
        refusal = await self.policy.refusal(request) if self.policy is not None else None
        origin = self.policy.cross_origin(request) if self.policy is not None and refusal is None else None
        if self.policy is not None and origin is not None:  # an --allow-origin caller (SillyTavern's page)
            cors = self.policy.cors_headers(origin, request)
            if request.method == "OPTIONS" and "access-control-request-method" in request.headers:
                return await _preflight(cors, send)
            send = _with_headers(send, cors)
        refusal = refusal or self._refusal(request)
        if refusal is not None:
            return await refusal(scope, receive, send)
        if self.policy is not None and self.policy.reads_body(request):
            try:
                body = await self._whole_body(receive)
            except BodyTooLarge as exc:
                return await error_body(413, "body_too_large", exc.detail, "Send a smaller body.")(scope, receive, send)
            refusal = self.policy.body_refusal(body)
            if refusal is not None:
                return await refusal(scope, receive, send)
            receive = _replay(body, receive)
        elif request.headers.get("content-length") is None:
            receive = self._counted(receive)
        return await self.app(scope, receive, send)

    async def _whole_body(self, receive: Receive) -> bytes:
        """The request's body, read up to the size limit (checks that need all of it)."""
        chunks, seen = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            seen += len(chunks[-1])
            if seen > self.limits.max_body_bytes:
                raise BodyTooLarge(self.limits.max_body_bytes)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    def _refusal(self, request: Request) -> JSONResponse | None:
        if self.token and not _open(request.url.path) and not self._authorized(request):
            response = error_body(401, "unauthorized", "missing or wrong bearer token",
                                  "Send `Authorization: Bearer <token>` with the service's token.")
            response.headers["WWW-Authenticate"] = "Bearer"
            return response
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limits.max_body_bytes):
            return error_body(413, "body_too_large", f"request body over {self.limits.max_body_bytes} bytes",
                              "Send a tail window of the chat (`start`) instead of the whole chat.")
        if self.limits.rate_per_minute and not self._take(request.client.host if request.client else "?"):
            response = error_body(429, "rate_limited", f"over {self.limits.rate_per_minute} requests per minute",
                                  "Wait a little and retry.")
            response.headers["Retry-After"] = "1"
            return response
        return None

    def _counted(self, receive: Receive) -> Receive:
        limit, seen = self.limits.max_body_bytes, 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        return counted

    def _authorized(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), (self.token or "").encode())

    def _take(self, client: str) -> bool:
        """Token bucket per client: `burst` requests at once, refilled at the per-minute rate."""
        rate = self.limits.rate_per_minute / 60.0
        now = time.monotonic()
        with self._guard:
            tokens, last = self._buckets.get(client, (float(self.limits.burst), now))
            tokens = min(float(self.limits.burst), tokens + (now - last) * rate)
            if tokens < 1:
                self._buckets[client] = (tokens, now)
                return False
            self._buckets[client] = (tokens - 1, now)
            return True
