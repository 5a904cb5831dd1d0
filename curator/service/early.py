"""The service's first second: `curator serve` listens before the app is loaded.

Loading the app (FastAPI, the routers, the proxy, the vector index) costs a few seconds of CPU. `EarlyApp` is the
ASGI app uvicorn serves from the start: it answers `/api/v1/health` at once (`"ready": false` until the app is
loaded), and every other request waits for the app and then goes to it, so nothing is refused while it loads. The
app is loaded in a thread beside the server (`load_in_background`); its lifespan (recovering jobs, warming the
embedder) runs once it is there, before any request reaches it. Nothing here imports the web stack: only the
standard library.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from contextlib import AbstractAsyncContextManager
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

HEALTH = "/api/v1/health"


class EarlyApp:
    """Serves while `ready(app)` has not been called; then passes everything to `app`. `health_hosts`: the Host
    names the early health answer is given to (the service's allow-list; others wait for the app's own check)."""

    def __init__(self, health_hosts: tuple[str, ...], on_error: Callable[[BaseException], None] | None = None):
        self.health_hosts = {h.lower() for h in health_hosts}
        self.on_error = on_error  # told when the app cannot be loaded or started (`serve` stops then)
        self.app: ASGIApp | None = None
        self.error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loaded: asyncio.Event | None = None  # set once the app is loaded and its lifespan has started
        self._lifespan: AbstractAsyncContextManager[Any] | None = None
        self._pending: tuple[ASGIApp | None, BaseException | None] | None = None  # loaded before the loop ran
        self._guard = threading.Lock()

    # ---- the loader's side (any thread) ---------------------------------------------------------
    def ready(self, app: ASGIApp | None, error: BaseException | None = None) -> None:
        """Hand over the loaded app (or the error that stopped the loading)."""
        with self._guard:
            loop = self._loop
            if loop is None:
                self._pending = (app, error)
                return
        try:
            loop.call_soon_threadsafe(lambda: loop.create_task(self._start(app, error)))
        except RuntimeError:  # the server stopped (Ctrl-C) while the app was loading
            pass

    async def _start(self, app: ASGIApp | None, error: BaseException | None) -> None:
        try:
            if app is not None:
                lifespan = getattr(getattr(app, "router", None), "lifespan_context", None)
                if lifespan is not None:  # a FastAPI/Starlette app: its startup runs before it gets a request
                    self._lifespan = lifespan(app)
                    await self._lifespan.__aenter__()
        except BaseException as exc:  # noqa: BLE001 - reported to every request, and by `serve`
            app, error = None, exc
        self.app, self.error = app, error
        if error is not None and self.on_error is not None:
            self.on_error(error)
        assert self._loaded is not None
        self._loaded.set()

    # ---- ASGI -----------------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan_events(receive, send)
            return
        if self.app is None and self.error is None:
            if scope["type"] == "http" and scope.get("path") == HEALTH and self._host_ok(scope):
                await _json(send, 200, {"ok": True, "ready": False})
                return
            assert self._loaded is not None
            await self._loaded.wait()
        if self.app is None:
            if scope["type"] == "http":
                await _json(send, 503, {"error": {"code": "not_started", "message": f"the service could not start: "
                                                  f"{self.error}", "hint": "See the output of `curator serve`."}})
            return
        await self.app(scope, receive, send)

    async def _lifespan_events(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                with self._guard:
                    self._loop = asyncio.get_running_loop()
                    self._loaded = asyncio.Event()
                    pending, self._pending = self._pending, None
                if pending is not None:
                    await self._start(*pending)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._lifespan is not None:
                    await self._lifespan.__aexit__(None, None, None)
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _host_ok(self, scope: Scope) -> bool:
        if "*" in self.health_hosts:
            return True
        host = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"host"), "")
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return host.lower() in self.health_hosts or name.lower() in self.health_hosts


async def _json(send: Send, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})


def load_in_background(early: EarlyApp, load: Callable[[], ASGIApp]) -> threading.Thread:
    """Run `load` in a thread and hand its app to `early` (a failure goes to `early.on_error` and the requests)."""

    def run() -> None:
        try:
            app = load()
        except BaseException as exc:  # noqa: BLE001 - the server is told, and stops
            early.ready(None, exc)
            return
        early.ready(app)

    thread = threading.Thread(target=run, name="curator-load-app", daemon=True)
    thread.start()
    return thread
