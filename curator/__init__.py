"""memory-curator: a typed, event-sourced memory graph for long role-play chats.

    import curator
    with curator.open("./data") as memory:
        memory.create_chat("my-chat", "default")
        memory.commit("my-chat", [{"op": "create_node", "type": "character_sheet", "fields": {"name": "Eileen"}}],
                      anchor_floor=1)
        memory.rollback("my-chat", floor=1)
"""

import os as _os
import sys as _sys

# OpenBLAS's idle threads spin for 2^28 cycles (~0.1 s) after they start and after each product before they sleep:
# ~0.1 CPU-s of a one-shot recall here, on products far too small to share (bench/README.md, issue 33). A shorter
# spin (2^4 cycles) keeps every thread for large products. Read by OpenBLAS when numpy loads, so set only before
# that, and never over the user's own choice.
if "numpy" not in _sys.modules:
    _os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
# In a checkout (tests run from the repository, or `pip install -e .`) the brief's folders tools/, schemas/ and
# prompts/ sit beside this package; the wheel ships them inside it. Either way they import as curator.tools,
# curator.schemas and curator.prompts, and an install adds one top-level name: curator.
_checkout = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if not _os.path.isdir(_os.path.join(__path__[0], "schemas")) and _os.path.isfile(
    _os.path.join(_checkout, "schemas", "__init__.py")
):
    __path__.append(_checkout)

from curator.errors import (  # noqa: E402
    ChatExists,
    ChatFileError,
    ChatNotFound,
    CuratorError,
    ImportFileError,
    MessageError,
    MigrationFailed,
    NotFound,
    OpError,
    StoreCorrupt,
    StoreError,
    StoreLocked,
    StoreTooNew,
)
# The rest loads on first use (PEP 562), so `import curator` (and every `curator ...` command) costs only what it
# touches: the store needs no model, vector or service code.
_LAZY = {
    "Edge": "curator.store.graph", "Node": "curator.store.graph", "Message": "curator.store.messages",
    "Memory": "curator.api.memory", "open": "curator.api.memory", "AsyncMemory": "curator.api.async_memory",
    "Models": "curator.llm.access", "CommitRecord": "curator.store.store",
    "RollbackResult": "curator.store.store", "Store": "curator.store.store",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'curator' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0"

__all__ = [
    "AsyncMemory",
    "ChatExists",
    "ChatFileError",
    "ChatNotFound",
    "CommitRecord",
    "CuratorError",
    "Edge",
    "ImportFileError",
    "Memory",
    "Message",
    "MessageError",
    "MigrationFailed",
    "Models",
    "Node",
    "NotFound",
    "OpError",
    "RollbackResult",
    "Store",
    "StoreCorrupt",
    "StoreError",
    "StoreLocked",
    "StoreTooNew",
    "open",
]
