"""The HTTP service: a FastAPI app over one data directory (`curator serve`).

`create_app(memory, ...)` builds it; routers per area live in `routes_*.py`, the OpenAI-compatible proxy in
`curator/service/proxy.py`. Every endpoint is under `/api/v1`, except the proxy's `/v1/chat/completions`. FastAPI
and uvicorn come with the `server` extra (`pip install "memory-curator[server]"`).
"""

from curator.errors import MissingExtra

try:
    import fastapi  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as exc:
    raise MissingExtra("server", "the HTTP service") from exc

from curator.service.server.app import ServiceConfig, create_app  # noqa: E402

__all__ = ["ServiceConfig", "create_app"]
