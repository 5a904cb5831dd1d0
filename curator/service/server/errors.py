"""Every answer that is not a success has the documented shape `{"error": {code, message, hint}}`: unknown routes
and methods, bodies that do not parse, numbers too large for the store, text that is not Unicode, and (logged,
without a traceback in the answer) anything unexpected."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException

from curator.service.server.security import error_body

log = logging.getLogger("curator.server")

_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
          409: "conflict", 413: "body_too_large", 415: "unsupported_media_type", 422: "invalid_request",
          429: "rate_limited", 503: "unavailable"}
_HINTS = {404: "See the OpenAPI document at /docs for the routes this service has.",
          405: "See the OpenAPI document at /docs for the methods of this route.",
          400: "Send a JSON body that parses (at most a few hundred levels deep)."}


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")  # the proxy's upstream errors also carry OpenAI's `type`

    code: str
    message: str
    hint: str = ""


class ErrorOut(BaseModel):
    """Every refusal: what went wrong (`message`), a stable `code`, and what to do next (`hint`)."""

    error: ErrorDetail


# What every route of the API may answer besides its success: documented, so the OpenAPI document says what a client
# really gets (a 4xx refusal, a 5xx for a store that is busy or a bug), in the one error shape.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    "4XX": {"model": ErrorOut, "description": "Refused: the request is wrong or not allowed; nothing was changed."},
    "5XX": {"model": ErrorOut, "description": "The store is busy (503) or the service failed (500)."},
}


def allowed_methods(app: object, path: str) -> list[str]:
    """Every method some route takes at this path (the `Allow` of a 405), not only the first matching route's."""
    methods: set[str] = set()
    for route in getattr(getattr(app, "router", None), "routes", []):
        regex, taken = getattr(route, "path_regex", None), getattr(route, "methods", None)
        if regex is not None and taken and regex.match(path):
            methods |= set(taken)
    return sorted(methods)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 400 and "parsing the body" in message:
            message = "the request body could not be parsed (not JSON, or nested too deeply)"
        response = error_body(exc.status_code, _CODES.get(exc.status_code, f"http_{exc.status_code}"), message,
                              _HINTS.get(exc.status_code, ""))
        for name, value in (exc.headers or {}).items():
            response.headers[name] = value
        if exc.status_code == 405:
            response.headers["Allow"] = ", ".join(allowed_methods(request.app, request.url.path))
        return response

    @app.exception_handler(OverflowError)
    async def too_large(request: Request, exc: OverflowError) -> JSONResponse:
        return error_body(400, "number_out_of_range", f"a number in the request is out of range: {exc}",
                          "Floors, anchors, limits and offsets are integers below 2^63.")

    @app.exception_handler(RecursionError)
    async def too_deep(request: Request, exc: RecursionError) -> JSONResponse:
        return error_body(400, "too_deep", "the request is nested too deeply", "Send flatter JSON.")

    @app.exception_handler(UnicodeError)
    async def not_text(request: Request, exc: UnicodeError) -> JSONResponse:
        return error_body(
            400,
            "invalid_text",
            f"the request holds text that is not valid Unicode: {getattr(exc, 'reason', exc)}",
            "Send UTF-8 text without lone surrogates.",
        )

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return error_body(500, "internal_error", f"unexpected {type(exc).__name__}; the service log has the details",
                          "This is a bug: please report it with the log lines.")
