"""Where `curator serve` may listen, checked before anything heavy loads: a loopback address or a token, and a
free port (standard library only; the service's guard uses the same `is_loopback`)."""

from __future__ import annotations

import ipaddress
import socket

from curator.errors import CuratorError

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")  # the Host names of this machine (`request_guard.py`)


def is_loopback(host: str) -> bool:
    """Only 127.0.0.0/8, ::1 and `localhost` are this machine alone; "" and 0.0.0.0 mean every interface."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse to listen beyond this machine without a token."""
    if not is_loopback(host) and not token:
        where = host or "every interface (an empty --host)"
        raise CuratorError(f"refusing to serve on {where} without a bearer token",
                           "Set --token (or $CURATOR_TOKEN), or bind to 127.0.0.1.")


def check_port_free(host: str, port: int) -> None:
    """A busy port is one line naming it, before the banner and before the app loads."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise CuratorError(f"cannot listen on {host}:{port}: {exc.strerror}",
                               "Another program (perhaps another `curator serve`) holds the port: stop it or pass "
                               "--port N.") from None
