"""Running the app with uvicorn: in the foreground (`curator serve`) or in a thread on a free loopback port
(tests, benchmarks)."""

from __future__ import annotations

import socket
import threading
import time
from typing import TYPE_CHECKING, Self

import uvicorn

if TYPE_CHECKING:
    from starlette.types import ASGIApp


class ThreadedServer:
    """`with ThreadedServer(app) as server: httpx.get(server.url + "/api/v1/health")`"""

    def __init__(self, app: ASGIApp, host: str = "127.0.0.1") -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> Self:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the service did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)
        self.sock.close()
