"""Requests a web page in the user's browser cannot forge, and a service DNS rebinding cannot reach.

A browser sends "simple" cross-site requests (a form post, `text/plain`, no custom header) without asking the
server first, and a page whose name was rebound to 127.0.0.1 reaches a loopback service under a foreign `Host`.
So, on every route (API, proxy, panel), before the token check:

- `Host` must be on the allow-list: the loopback names, the bound address and `allowed_hosts` (421 otherwise).
  The check is the MCP server's own (`mcp.server.transport_security`), so `curator mcp --http` and the service
  agree; `*` in `allowed_hosts` turns it off.
- An `Origin` header, when sent, must be the service's own origin or on `allowed_origins` (403 otherwise).
- POST, PUT, PATCH and DELETE must carry `Content-Type: application/json` or an `X-Curator-Client` header,
  body or not (415 otherwise): either makes a browser ask first (CORS preflight), which the service never allows.
  The proxy (`/v1/...`) takes `application/json` only, as the OpenAI API does. A method or path the service does
  not have is left to the router (405, 404): it changes nothing.
- With `*` in `allowed_hosts` the Host check is off, but the Origin check stays: a page's own origin counts as
  the service's only under a host named on the list (loopback, the bound address, `--allow-host`), since a
  DNS-rebinding page names its own host in both `Host` and `Origin`.
- A JSON body must be text a store can hold: a lone UTF-16 surrogate escape (`\\ud800`) is refused (400).

An origin on `allowed_origins` (e.g. SillyTavern's page, where the companion extension runs) is also let *read*:
its requests get CORS headers naming it, and its preflights are answered (any other origin's are refused with
403), so its scripts can send the JSON and `X-Curator-Client` writes above. No cookie is ever honoured (the
service has none; the bearer token is a header), so allowing an origin lends it nothing but this service.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import JSONResponse

from curator.errors import CuratorError
from curator.service.bind import LOOPBACK_NAMES
from curator.service.server.security import error_body

CORS_METHODS = "GET, POST, PUT, PATCH, DELETE"
CORS_HEADERS = ("authorization, content-type, x-curator-client, x-curator-chat, x-curator-kind, "
                "x-curator-allow-rollback, x-curator-history-floors")
CORS_EXPOSED = "x-curator-chat, x-curator-kind, x-curator-memory-tokens, x-curator-history-tokens-saved"
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CLIENT_HEADER = "x-curator-client"
_ORIGIN = re.compile(r"^https?://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.\-]*)(:(\d{1,5}|\*))?$")
# `\uD800`-`\uDFFF` escapes, with the backslashes before them (an even count is an escaped backslash, not an escape).
_SURROGATE_ESCAPE = re.compile(rb"(\\+)u([dD][89a-fA-F][0-9a-fA-F]{2})")


@dataclass(frozen=True)
class SitePolicy:
    """Which `Host` and `Origin` values the service answers. `bind_host` is the address it listens on."""

    bind_host: str = "127.0.0.1"
    allowed_hosts: tuple[str, ...] = ()  # extra host names (with or without `:port`); "*" = any host
    allowed_origins: tuple[str, ...] = ()  # extra origins, e.g. "http://localhost:8000" or "http://localhost:*"
    _checker: TransportSecurityMiddleware = field(init=False, repr=False, compare=False)
    _named: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for origin in self.allowed_origins:
            if not _ORIGIN.match(origin):
                raise CuratorError(f"--allow-origin {origin!r} is not a web origin",
                                   "Give scheme, host and port as the browser shows them, e.g. "
                                   "http://127.0.0.1:8000 (SillyTavern's address) or http://localhost:* (any "
                                   "port); never * (every web page could then use the service).")
        hosts: list[str] = []
        for name in (*LOOPBACK_NAMES, _bracketed(self.bind_host), *map(_bracketed, self.allowed_hosts)):
            if name and name not in hosts:
                hosts += [name] if ":" in name.rsplit("]", 1)[-1] else [name, f"{name}:*"]
        settings = TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                             allowed_origins=list(self.allowed_origins))
        object.__setattr__(self, "_checker", TransportSecurityMiddleware(settings))
        # the host names a page's own origin may carry when `*` turns the Host check off
        object.__setattr__(self, "_named", frozenset(h.lower() for h in hosts if h != "*" and not h.endswith(":*")
                                                     and not h.startswith("*")))

    async def refusal(self, request: Request) -> JSONResponse | None:
        """A JSON 4xx for a request from the wrong site, or None."""
        origin = request.headers.get("origin")
        any_host = "*" in self.allowed_hosts  # the Host check is off; the Origin check stays
        if origin is not None and _same_origin(origin, request, self._named if any_host else None):
            origin = None  # the panel's own pages
        checked = await self._checker.validate_request(_checked_view(request, origin, any_host), is_post=False)
        if checked is not None and checked.status_code == 421:
            return error_body(421, "misdirected_request", f"this service does not answer for host "
                              f"{request.headers.get('host', '')!r}",
                              "Use http://127.0.0.1:PORT, or start the service with --allow-host NAME.")
        if checked is not None:
            return error_body(403, "forbidden_origin", f"requests from origin {origin!r} are not allowed",
                              "Call the service from its own pages, or start it with --allow-origin ORIGIN.")
        if request.method in STATE_CHANGING and _routed(request):
            return _content_type_refusal(request)
        return None

    def cross_origin(self, request: Request) -> str | None:
        """The origin of an allowed cross-site caller (asked after `refusal` let the request through), which gets
        CORS headers; None for the service's own pages and for callers that send no Origin."""
        origin = request.headers.get("origin")
        if origin is None or not self.allowed_origins or _same_origin(origin, request):
            return None
        return origin

    def cors_headers(self, origin: str, request: Request) -> list[tuple[bytes, bytes]]:
        """What an allowed origin's answer carries; for a preflight (OPTIONS), what it may send too."""
        headers = [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin"),
                   (b"access-control-expose-headers", CORS_EXPOSED.encode())]
        if request.method == "OPTIONS":
            headers += [(b"access-control-allow-methods", CORS_METHODS.encode()),
                        (b"access-control-allow-headers", CORS_HEADERS.encode()),
                        (b"access-control-max-age", b"600")]
            if request.headers.get("access-control-request-private-network") == "true":
                headers.append((b"access-control-allow-private-network", b"true"))  # a LAN page to loopback
        return headers

    @staticmethod
    def reads_body(request: Request) -> bool:
        """Whether the body must be read whole and checked before the route runs (JSON that changes state)."""
        return request.method in STATE_CHANGING and _json(request.headers.get("content-type", ""))

    @staticmethod
    def body_refusal(body: bytes) -> JSONResponse | None:
        if lone_surrogate(body):
            return error_body(400, "invalid_text", "the body holds a lone UTF-16 surrogate (e.g. \\ud800), "
                              "which is not text", "Send valid Unicode: characters outside the BMP as a surrogate "
                              "pair, or plain UTF-8.")
        return None


def _bracketed(host: str) -> str:
    """An IPv6 address as it appears in a Host header."""
    host = host.strip()
    if host in ("", "*", "0.0.0.0", "::"):
        return ""  # a wildcard bind is not a name clients use: they are named with --allow-host
    return f"[{host}]" if ":" in host and not host.startswith("[") and host.count(":") > 1 else host


def _same_origin(origin: str, request: Request, named: frozenset[str] | None = None) -> bool:
    """Whether `origin` is the service's own (its Host). `named`: with the Host check off, the host names it may
    carry (a rebinding page's Host is its own, so Host alone proves nothing)."""
    host = request.headers.get("host", "")
    if not host or origin.lower() not in (f"http://{host}".lower(), f"https://{host}".lower()):
        return False
    if named is None:
        return True
    name = host.lower().rsplit(":", 1)[0] if not host.endswith("]") else host.lower()
    return host.lower() in named or name in named


def _routed(request: Request) -> bool:
    """Whether a route of the app takes this path and method (else the router answers 404 or 405)."""
    from starlette.routing import Match

    app = request.scope.get("app")
    routes = getattr(getattr(app, "router", None), "routes", None)
    if routes is None:
        return True
    return any(route.matches(request.scope)[0] == Match.FULL for route in routes)


def _checked_view(request: Request, origin: str | None, any_host: bool) -> Request:
    """The request as the MCP check should see it: without its own (same-site) Origin, and under a loopback Host
    when every host is allowed."""
    drop_origin = origin is None and "origin" in request.headers
    if not drop_origin and not any_host:
        return request
    headers = [(k, v) for k, v in request.scope["headers"] if not (drop_origin and k == b"origin")
               and not (any_host and k == b"host")]
    if any_host:
        headers.append((b"host", b"localhost"))
    return Request(dict(request.scope, headers=headers))


def _json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def _content_type_refusal(request: Request) -> JSONResponse | None:
    content_type = request.headers.get("content-type", "")
    if _json(content_type):
        return None
    if request.url.path.startswith("/v1/"):
        return error_body(415, "unsupported_media_type", "the proxy takes `Content-Type: application/json` only",
                          "Send the chat-completions request as JSON, as the OpenAI API expects.")
    if CLIENT_HEADER in request.headers:
        return None
    return error_body(415, "unsupported_media_type",
                      f"{request.method} needs `Content-Type: application/json` (or an X-Curator-Client header)",
                      "Send a JSON body (`{}` when there is nothing to say); this keeps other web pages from "
                      "calling the service through your browser.")


def lone_surrogate(body: bytes) -> bool:
    """Whether a JSON body escapes half of a UTF-16 surrogate pair (text no store or encoder can hold)."""
    if b"\\u" not in body:
        return False
    expect_low_at = -1  # where the low half of a pair must start
    for match in _SURROGATE_ESCAPE.finditer(body):
        if len(match.group(1)) % 2 == 0:
            continue  # an escaped backslash followed by the letters "uD8..": plain text
        high = match.group(2)[1:2].lower() in b"89ab"
        start = match.start(1) + len(match.group(1)) - 1
        if expect_low_at >= 0:
            if high or start != expect_low_at:
                return True
            expect_low_at = -1
        elif high:
            expect_low_at = match.end()
        else:
            return True
    return expect_low_at >= 0
