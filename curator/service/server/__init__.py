"""The HTTP service: a FastAPI app over one data directory (`curator serve`).

`create_app(memory, ...)` builds it; routers per area live in `routes_*.py`, the OpenAI-compatible proxy in
`curator/proxy.py`. Every endpoint is under `/api/v1`, except the proxy's `/v1/chat/completions`.
"""

from curator.service.server.app import ServiceConfig, create_app

__all__ = ["ServiceConfig", "create_app"]
