"""One SSL context per process (and CA setting): making one costs ~17 ms of CPU, and every model build asked for
one (each maintenance job built its own). Used by `models.build_model` and `clients`."""

from __future__ import annotations

import os
import ssl
import threading
from typing import Any

import httpx2

_ssl_lock = threading.Lock()
_ssl_contexts: dict[tuple[Any, ...], ssl.SSLContext] = {}


def shared_ssl_context() -> ssl.SSLContext:
    """The SSL context httpx2 would make by default (`verify=True`, honouring SSL_CERT_FILE / SSL_CERT_DIR), made
    once per process and CA setting."""
    key = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    with _ssl_lock:
        ctx = _ssl_contexts.get(key)
        if ctx is None:
            ctx = _ssl_contexts[key] = httpx2.create_ssl_context(verify=True, cert=None, trust_env=True)
        return ctx


def ssl_contexts_made() -> int:
    """How many SSL contexts this process made through `shared_ssl_context` (for tests)."""
    return len(_ssl_contexts)
