"""Ctrl-C while the main thread waits for other threads' work (curator/waiting.py)."""

from __future__ import annotations

import _thread
import threading
import time
from concurrent.futures import Future

import pytest

from curator import waiting


def _later(seconds: float, action) -> None:
    threading.Thread(target=lambda: (time.sleep(seconds), action()), daemon=True).start()


def test_a_signal_noted_by_another_thread_interrupts_the_wait():
    """`interrupt_main` from another thread notes a SIGINT as a signal caught by another thread does: a plain
    `future.result()` stays blocked until the future is done; the wait gets out within its slices, before."""
    future: Future[int] = Future()
    _later(0.2, _thread.interrupt_main)
    _later(30, lambda: future.set_result(1))
    with pytest.raises(KeyboardInterrupt):
        waiting.result(future)
    assert not future.done()


def test_the_result_and_the_exception_come_back_as_future_result_gives_them():
    done: Future[int] = Future()
    _later(0.3, lambda: done.set_result(7))
    assert waiting.result(done) == 7
    failed: Future[int] = Future()
    failed.set_exception(TimeoutError("the model did not answer"))  # not taken for the wait's own timeout
    with pytest.raises(TimeoutError, match="did not answer"):
        waiting.result(failed)


def test_outside_the_main_thread_it_waits_as_future_result_does():
    future: Future[int] = Future()
    _later(0.2, lambda: future.set_result(3))
    got: list[int] = []
    worker = threading.Thread(target=lambda: got.append(waiting.result(future)))
    worker.start()
    worker.join(10)
    assert got == [3]
