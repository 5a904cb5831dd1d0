"""The FastAPI app: routers per area, the guard (token, body size, rate), errors as JSON 4xx, jobs on startup."""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi_offline import FastAPIOffline
from pydantic_ai.models import Model

from curator.schemas import SchemaError

from curator import __version__
from curator.errors import ChatExists, CuratorError, NotFound, RollbackRefused, StoreLocked
from curator.api.memory import Memory
from curator.llm.access import NO_MODELS, Models
from curator.service.server import (routes_chats, routes_events, routes_frontends, routes_graph, routes_panel,
                                    routes_settings, routes_story, routes_trash, routes_work)
from curator.service.server.request_guard import SitePolicy
from curator.service.server.security import BodyTooLarge, GuardMiddleware, Limits, error_body
from curator.service.server.state import build_service
from curator.vectors.embeddings import warm_up
from curator.vectors.profile import EmbeddingProfile

log = logging.getLogger("curator.server")


@dataclass
class ServiceConfig:
    token: str | None = None  # bearer token; required (by `curator serve`) off loopback
    limits: Limits = field(default_factory=Limits)
    models: Models = NO_MODELS  # pydantic-ai models in place of the configured ones, per task (tests, scripted runs)
    model: Model | None = None  # the extraction model's, in short (`models.extract`)
    workers: int = 4  # job threads (per process)
    job_lease: float | None = None  # seconds a job's worker holds it between renewals (None: job_queue's default)
    upstream: str | None = None  # the proxy's real model endpoint (OpenAI-compatible base URL)
    upstream_key_env: str | None = None  # the variable holding the upstream's API key
    proxy: bool = True
    site: SitePolicy = field(default_factory=SitePolicy)  # Host / Origin allow-lists (request_guard)
    proxy_max_rollback: int | None = None  # a cap on the floors a proxy request may roll back (None: no cap)
    upstream_timeout: float = 600.0  # seconds the proxy waits for the upstream
    request_log: bool = False  # a line per request on the `curator.requests` logger (`serve` without --quiet)


def _start_warm_up(memory: Memory) -> threading.Thread | None:
    try:  # the settings are read here, in the server's thread
        profile = memory.settings.embedding
    except Exception:  # a bad config.yaml: the first request that needs it reports it, as before
        return None
    thread = threading.Thread(target=_warm_up, args=(profile,), name="curator-warm-up", daemon=True)
    thread.start()
    return thread


def _warm_up(profile: EmbeddingProfile) -> None:
    """The embedder's models, loaded while the service waits for its first request (curator.vectors.embeddings)."""
    try:
        if warm_up(profile):
            log.info("embedding models loaded (%s)", profile.key)
    except Exception:  # the first recall reports it to its caller; here it is only logged
        log.exception("could not load the embedding models in advance")


def _allow_chat_model_key(memory: Memory, key_env: str) -> None:
    try:
        settings = memory.settings
    except CuratorError:  # a bad config.yaml: the first request that needs it reports it
        return
    if key_env not in settings.chat_model_keys:
        memory.settings = settings.model_copy(update={"chat_model_keys": (*settings.chat_model_keys, key_env)})


def create_app(memory: Memory, config: ServiceConfig | None = None) -> FastAPI:
    config = config or ServiceConfig()
    if config.upstream_key_env:  # the proxy's chats extract with their upstream model (and its key) by default
        _allow_chat_model_key(memory, config.upstream_key_env)
    service = build_service(memory, config.models.with_task("extract", config.model), config.workers,
                            job_lease=config.job_lease)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service.jobs.recover()  # jobs a crash interrupted: resumed, or failed visibly
        warming = _start_warm_up(memory)
        yield
        service.jobs.shutdown(wait=True)
        if warming is not None:  # a model half loaded at exit aborts the process (onnxruntime's threads)
            warming.join(timeout=60)

    # FastAPIOffline: /docs and /redoc load their scripts from the package (fastapi-offline), not from a CDN
    app = FastAPIOffline(title="memory-curator", version=__version__, lifespan=lifespan,
                  description="Memory for long role-play chats: sync, recall, graph, jobs; an OpenAI-compatible "
                              "proxy at /v1/chat/completions.")
    app.state.service = service
    app.state.service_token = config.token
    app.add_middleware(GuardMiddleware, token=config.token, limits=config.limits, policy=config.site)
    if config.request_log:  # outermost: refusals are logged too
        from curator.service.request_log import RequestLog

        app.add_middleware(RequestLog)
    from curator.service.server.errors import ERROR_RESPONSES

    for module in (routes_chats, routes_graph, routes_work, routes_frontends, routes_events, routes_trash,
                   routes_settings, routes_story):
        app.include_router(module.router, prefix="/api/v1", responses=ERROR_RESPONSES)
    routes_panel.install(app, ERROR_RESPONSES)  # the panel's extra reads (overview, last injection, ...) under /api/v1
    from curator.service.panel import mount_panel

    mount_panel(app, config.site.allowed_origins)  # the panel's static files at /panel (framed by those origins)
    if config.proxy:
        from curator.service.proxy import ProxyConfig
        from curator.service.proxy import router as proxy_router

        app.state.proxy = ProxyConfig(config.upstream, config.upstream_key_env, timeout=config.upstream_timeout,
                                      max_rollback=config.proxy_max_rollback)
        app.include_router(proxy_router)
    _error_handlers(app)
    from curator.service.server.errors import install_error_handlers

    install_error_handlers(app)  # unknown routes, body-parse errors, out-of-range numbers: the same error shape
    return app


def _error_handlers(app: FastAPI) -> None:
    @app.exception_handler(CuratorError)
    async def curator_error(request: Request, exc: CuratorError) -> JSONResponse:
        if isinstance(exc, RollbackRefused):
            return error_body(409, "rollback_refused", str(exc), exc.hint)
        status = (404 if isinstance(exc, NotFound) else 409 if isinstance(exc, ChatExists)
                  else 503 if isinstance(exc, StoreLocked) else 400)
        return error_body(status, type(exc).__name__, str(exc), exc.hint)

    @app.exception_handler(BodyTooLarge)
    async def body_too_large(request: Request, exc: BodyTooLarge) -> JSONResponse:
        return error_body(413, "body_too_large", exc.detail, "Send a tail window of the chat (`start`) instead.")

    @app.exception_handler(SchemaError)
    async def schema_error(request: Request, exc: SchemaError) -> JSONResponse:
        return error_body(422, "SchemaError", str(exc), "Fix the schema at the places listed.")

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        where = ".".join(str(p) for p in errors[0]["loc"]) if errors else ""
        message = f"{where}: {errors[0]['msg']}" if errors else "invalid request"
        response = error_body(422, "invalid_request", message, "See the OpenAPI document at /docs.")
        return response
