"""memory-curator: a typed, event-sourced memory graph for long role-play chats.

    import curator
    with curator.open("./data") as memory:
        memory.create_chat("my-chat", "default")
        memory.commit("my-chat", [{"op": "create_node", "type": "character_sheet", "fields": {"name": "Eileen"}}],
                      anchor_floor=1)
        memory.rollback("my-chat", floor=1)
"""

from .errors import (
    ChatExists,
    ChatFileError,
    ChatNotFound,
    CuratorError,
    ImportFileError,
    MigrationFailed,
    NotFound,
    OpError,
    StoreCorrupt,
    StoreError,
    StoreLocked,
    StoreTooNew,
)
from .graph import Edge, Node
from .messages import Message
from .service import Memory, open
from .store import CommitRecord, RollbackResult, Store

__version__ = "0.1.0"

__all__ = [
    "ChatExists", "ChatFileError", "ChatNotFound", "CommitRecord", "CuratorError", "Edge", "ImportFileError",
    "Memory", "Message", "MigrationFailed", "Node", "NotFound", "OpError", "RollbackResult", "Store",
    "StoreCorrupt", "StoreError", "StoreLocked", "StoreTooNew", "open",
]
