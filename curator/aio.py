"""Running a coroutine to its end from synchronous code, whether or not an event loop runs in this thread.

Outside a loop (a script, the CLI, a service worker thread) the coroutine runs on a loop of its own, in this thread.
Inside one (a FastAPI handler, a pydantic-ai tool, a Jupyter cell) `asyncio.run` would refuse, and the coroutine
cannot be awaited without giving up being synchronous: it runs on a loop of its own in a worker thread while this
thread waits, as any blocking call would make it wait. In async code, await `AsyncMemory` instead."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
# Threads are reused (each keeps its store connection), and several may wait at once: a coroutine run here may
# itself call synchronous code that comes back (nested calls), and several loops may each call in.
_workers = ThreadPoolExecutor(max_workers=32, thread_name_prefix="curator-sync")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """The result of `coro`, run to its end (see the module's docstring); its exception is raised here."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    context = contextvars.copy_context()  # the caller's context variables, as an await would see them
    return _workers.submit(context.run, asyncio.run, coro).result()
