"""Waiting in the main thread for work done in other threads, without losing Ctrl-C.

A SIGINT can stay noted but unhandled while the main thread waits on a lock and other threads run: seen on
CPython 3.11, where `curator vectors rebuild` went on for 12 minutes after a Ctrl-C, to the end of a 100k-node
build (bench/README.md, issue 33). Its C handler had run; the main thread's loop was not told. So the main thread
waits in short slices and, between them, asks for the noted handlers to run: `signal.pthread_sigmask` does that
(it calls `PyErr_CheckSignals`), and leaves the mask as it was when given no signal."""

from __future__ import annotations

import signal
import threading
from concurrent.futures import Future, wait
from typing import TypeVar

T = TypeVar("T")
SLICE = 0.1  # seconds between two looks at the noted signals: how late a Ctrl-C can be, at worst

_CAN_LOOK = hasattr(signal, "pthread_sigmask")  # not on Windows, whose handlers run in a thread of their own


def result(future: Future[T]) -> T:
    """`future.result()`, from which Ctrl-C (KeyboardInterrupt) gets out within `SLICE` in the main thread."""
    if _CAN_LOOK and threading.current_thread() is threading.main_thread():
        while not future.done():
            wait([future], timeout=SLICE)
            if not future.done():
                signal.pthread_sigmask(signal.SIG_BLOCK, ())  # runs a noted SIGINT's handler: KeyboardInterrupt
    return future.result()
