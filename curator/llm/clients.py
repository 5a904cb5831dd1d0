"""Models shared per profile, so a step does not pay for building one.

Building a model was ~20 ms CPU, nearly all of it a new SSL context (OpenSSL parsing the CA bundle), and every
maintenance job built its own. Two levels of sharing:

- one SSL context per process (per CA settings): it is never changed after it is made, so any thread and any
  event loop can use it;
- one model (pydantic-ai model, openai client, httpx2 client with our retrying transport) per profile *and*
  running event loop: an httpx2 client's pooled connections belong to the loop that opened them, and the
  service runs each job in its own thread with its own `asyncio.run`, so a model is never handed to another
  loop, and one whose loop has closed is dropped, never reused.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic_ai.models import Model

from curator.settings import ModelProfile

@dataclass
class _Entry:
    loop: weakref.ref[Any]
    model: Model


class ModelCache:
    """One model per (profile, running event loop). Thread-safe; a model is handed out only inside the loop it
    was built for. `builds` counts the models built (tests)."""

    def __init__(self, build: Callable[[ModelProfile], Model] | None = None) -> None:
        self._build = build
        self._lock = threading.Lock()
        self._entries: dict[tuple[Any, ...], _Entry] = {}
        self.builds = 0

    def get(self, profile: ModelProfile) -> Model:
        loop = asyncio.get_running_loop()  # outside a loop there is nothing to bind a client to: an error
        # The key is everything the model is built from: the profile's fields and the API key its variable holds
        # now (as a digest: the cache's keys are no second copy of the secret).
        key = (profile.model_dump_json(), hashlib.sha256(profile.api_key().encode()).hexdigest(), id(loop))
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.loop() is loop and not loop.is_closed():
                return entry.model
            self._prune()
            model = self._builder()(profile)
            self.builds += 1
            self._entries[key] = _Entry(weakref.ref(loop), model)
            return model

    def _builder(self) -> Callable[[ModelProfile], Model]:
        if self._build is None:
            from curator.llm.models import build_model

            return build_model
        return self._build

    def _prune(self) -> None:
        """Drop the models of loops that closed or are gone (their connections cannot be used again)."""
        for key, entry in list(self._entries.items()):
            loop = entry.loop()
            if loop is None or loop.is_closed():
                del self._entries[key]

    def __len__(self) -> int:
        with self._lock:
            self._prune()
            return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


shared_models = ModelCache()


def shared_model(profile: ModelProfile) -> Model:
    """The model for `profile` in the running event loop, built on first use (see the module's docstring)."""
    return shared_models.get(profile)
