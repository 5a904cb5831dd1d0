"""A shortcut for the openai SDK's reshaping of chat-completion parameters.

Before each request the SDK walks the whole request body against its TypedDicts (`async_maybe_transform`), every
message against each of the six message types, to rename aliased keys, format dates and files and dump pydantic
models: 0.6-1.3 ms CPU per extraction request, the largest single cost of the client. For the chat-completion
parameters nothing of the kind exists (checked below, once, on the installed SDK's own types: no `PropertyInfo`
anywhere in them), so for a body of plain JSON values the walk only drops the omitted top-level values and copies
the rest. The shortcut does exactly that, and hands anything else (a pydantic model, a tuple, an omitted value
deeper down, another parameter type) to the SDK's own walk.
"""

from __future__ import annotations

import threading
import typing
from typing import Any

_PLAIN = (str, int, float, bool, type(None))
_installed: bool | None = None
_lock = threading.Lock()


class _NotPlain(Exception):
    pass


def _copy(value: Any) -> Any:
    """A copy of plain JSON (dicts with str keys, lists, scalars); anything else raises _NotPlain."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is dict:
        out = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _NotPlain
            out[key] = _copy(item)
        return out
    if kind is list:
        return [_copy(item) for item in value]
    raise _NotPlain


def _has_property_info(root: Any) -> bool:
    """Whether any type reachable from `root` carries openai's `PropertyInfo` (an alias or a format)."""
    from openai._utils import is_typeddict
    from openai._utils._transform import PropertyInfo
    from pydantic import BaseModel

    seen: set[int] = set()
    stack = [root]
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        if any(isinstance(m, PropertyInfo) for m in getattr(t, "__metadata__", ())):
            return True
        if isinstance(t, type) and issubclass(t, BaseModel):
            return True  # a pydantic type in the parameters: leave the SDK's walk alone
        if is_typeddict(t):
            stack.extend(typing.get_type_hints(t, include_extras=True).values())
        stack.extend(typing.get_args(t))
    return False


def fast_transform(data: Any) -> Any | None:
    """The body the SDK's walk would give for `data` (a dict of create parameters), or None to defer to it."""
    from openai._utils import is_given

    if type(data) is not dict:
        return None
    try:
        return {key: _copy(value) for key, value in data.items() if is_given(value)}
    except _NotPlain:
        return None


def install() -> bool:
    """Put the shortcut in front of the chat-completions resource's walk, once per process, if the installed SDK's
    parameter types allow it. Returns whether it is in place."""
    global _installed
    with _lock:
        if _installed is not None:
            return _installed
        _installed = False
        try:
            from openai.resources.chat.completions import completions as module
            from openai.types.chat import completion_create_params as params
        except ImportError:
            return False
        original = getattr(module, "async_maybe_transform", None)
        verified = {params.CompletionCreateParams, params.CompletionCreateParamsNonStreaming,
                    params.CompletionCreateParamsStreaming}
        if original is None or any(_has_property_info(t) for t in verified):
            return False

        async def async_maybe_transform(data, expected_type):
            if expected_type in verified:
                shortcut = fast_transform(data)
                if shortcut is not None:
                    return shortcut
            return await original(data, expected_type)

        async_maybe_transform.__wrapped__ = original
        module.async_maybe_transform = async_maybe_transform
        _installed = True
        return True
