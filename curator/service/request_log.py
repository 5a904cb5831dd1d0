"""`curator serve`'s request log: one line per request on stderr (method, path, status, milliseconds, and for the
proxy the chat and the memory it injected), and the service's own notices ("created chat X"). `--quiet` keeps
only warnings. Standard library only: it wraps the app before the app is loaded (curator/service/early.py)."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger("curator.requests")
# response headers worth a word in the line: the proxy's chat, what it was, the memory it injected
_NOTED = {b"x-curator-chat": "chat", b"x-curator-kind": "kind", b"x-curator-memory-tokens": "memory_tokens"}


def configure(quiet: bool) -> None:
    """Send the `curator` loggers to stderr, one line each: INFO and up (the request log and notices such as a
    chat the proxy created), or only warnings with `quiet`. Called by `curator serve` (and its workers)."""
    root = logging.getLogger("curator")
    root.setLevel(logging.WARNING if quiet else logging.INFO)
    if not any(getattr(h, "_curator", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", datefmt="%Y-%m-%d %H:%M:%S"))
        handler._curator = True  # type: ignore[attr-defined]
        root.addHandler(handler)
        root.propagate = False


class RequestLog:
    """ASGI middleware: a line per HTTP request once its response has started, with how long the whole took."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not log.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        seen: dict[str, Any] = {"status": None, "notes": ""}

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                seen["status"] = message["status"]
                notes = {_NOTED[k]: v.decode("latin-1") for k, v in message.get("headers", ()) if k in _NOTED}
                seen["notes"] = "".join(f" {name}={value}" for name, value in notes.items())
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            ms = (time.perf_counter() - started) * 1000
            path = scope.get("path", "")  # not the query string: it may carry what the user wrote
            log.info("%s %s %s %.0f ms%s", scope.get("method", "?"), path[:300], seen["status"] or "-", ms,
                     seen["notes"])
