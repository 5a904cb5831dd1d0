"""How the proxy reads what a front end sends: which stored floors a request's messages are, whether a reply came
back only reformatted by the front end, and whether a request asks for a chat reply at all.

Front ends do not send back the reply they were given byte for byte. SillyTavern, for one, puts the character's
name in the `name` field (names behaviour "Completion Object") or in front of the text ("Message Content"), trims
leading and trailing whitespace (`trim_spaces`), cuts the tail at a stop string, and removes a leading `Name:` the
model wrote. Such a copy is the same floor: the stored text becomes the client's, the memory extracted from it
stays. Anything else (a real edit) is a change and rolls back as usual.

It also sends requests whose answer is not a chat message: impersonation (the model writes the user's next
message), quiet prompts (extensions such as Summarize) and Continue (the answer extends the last reply). They are
marked by a system instruction after the last user/assistant message; `request_kind` recognises SillyTavern's
default instructions, and any front end can say it with the `X-Curator-Kind` header.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from curator.service.proxy_guard import check_rollback
from curator.store.message_rows import rewrite_messages
from curator.store.messages import Message

if TYPE_CHECKING:
    from curator.api.memory import Memory
    from curator.store.store import Store
    from curator.sync.history import HistoryReport

KIND_HEADER = "x-curator-kind"
KINDS = ("chat", "impersonate", "quiet", "continue")

# The start of SillyTavern's (1.12.x) default instructions, after its macros are filled in; lower case.
MARKERS: dict[str, tuple[str, ...]] = {
    "impersonate": ("[write your next reply from the point of view of ",),
    "continue": ("[continue the following message.",),
    # the default quiet prompts of Summarize, Expressions, image generation (and its "In the next response...")
    "quiet": ("ignore previous instructions", "in the next response i want you to provide only",
              "[pause your roleplay"),
}

_NAME_PREFIX = re.compile(r"^\s*([^\s:][^:\n]{0,63}):[ \t]*")
_SPACE = re.compile(r"\s+")


def squash(text: str) -> str:
    """Text with every run of whitespace as one space, trimmed: the form formatting changes leave alone."""
    return _SPACE.sub(" ", text).strip()


def _without_prefix(text: str) -> str | None:
    match = _NAME_PREFIX.match(text)
    return text[match.end():] if match else None


def loose_key(message: Message) -> tuple[str, str]:
    """A floor's key for lining up a request with the stored chat: role and squashed text without a leading
    `Name:`. Two floors with the same key may be the same floor; `same_floor` decides."""
    text = _without_prefix(message.text)
    return message.role, squash(text if text is not None else message.text)


def same_floor(stored: Message, client: Message) -> bool:
    """True when `client` is `stored` as a front end changes it: another `name` field, a `Name:` prefix added
    or removed, whitespace trimmed or collapsed, or (for a reply) its tail cut by a stop string or a regex."""
    if stored.role != client.role:
        return False
    if stored.text == client.text:
        return True  # at most the name differs
    old, new = squash(stored.text), squash(client.text)
    candidates = [(old, new)]
    for text, other, old_side in ((client.text, old, False), (stored.text, new, True)):
        cut = _without_prefix(text)
        if cut is not None:
            candidates.append((squash(cut), other) if old_side else (other, squash(cut)))
    old_cut, new_cut = _without_prefix(stored.text), _without_prefix(client.text)
    if old_cut is not None and new_cut is not None:
        candidates.append((squash(old_cut), squash(new_cut)))
    for old_text, new_text in candidates:
        if old_text == new_text:
            return True
        if stored.role == "assistant" and new_text and old_text.startswith(new_text):
            return True  # the tail was cut (stop string, regex, the front end's own clean-up)
    return False


def window_start(stored: Sequence[Message], floors: Sequence[Message], probe: int = 3) -> int:
    """Where the request's messages start in the stored chat. Front ends drop the oldest messages once the
    context is full, so the request is often a tail of the chat: it starts at the stored floor from which the
    most of its first messages match (one of its first `probe` messages may itself be edited). Floors match
    by `loose_key`, so a reply the front end reformatted still lines up. 0 when nothing matches: then it is
    the whole chat."""
    best, best_run = 0, 0
    keys = [loose_key(m) for m in stored]
    incoming = [loose_key(m) for m in floors]
    by_key: dict[tuple[str, str], list[int]] = {}
    for floor, key in enumerate(keys):
        by_key.setdefault(key, []).append(floor)
    for offset, key in enumerate(incoming[:probe]):
        for floor in by_key.get(key, ()):
            start = floor - offset
            if start < 0:
                continue
            run = 0  # how many of the request's messages from `offset` on match the stored floors
            while (start + offset + run < len(stored) and offset + run < len(floors)
                   and keys[start + offset + run] == incoming[offset + run]):
                run += 1
            if run > best_run or (run == best_run and start > best):
                best, best_run = start, run
    return best


def adopt_client_copies(stored: Sequence[Message], floors: Sequence[Message], start: int) -> dict[int, Message]:
    """The stored floors (from `start`) that the request carries as a front end's copy (`same_floor`) but not
    byte for byte: floor -> the client's version, which becomes the stored one with no rollback."""
    adopted: dict[int, Message] = {}
    for offset, client in enumerate(floors):
        floor = start + offset
        if floor >= len(stored):
            break
        old = stored[floor]
        if old.hash == client.hash:
            continue
        if not same_floor(old, client):
            break  # a real change: from here on history sync decides
        adopted[floor] = Message(client.role, client.name, client.text, old.swipe_id, list(old.swipes), old.sent_at)
    return adopted


class ShelvedCopies:
    """The replies the proxy saw go on the swipe shelf (regenerated or swiped away), per chat and floor. When the
    front end swipes back it sends its own copy of one; that copy stands for the shelved reply, so the shelf
    restores its memory with no model call. Kept in memory only: losing it costs a model call, never correctness."""

    KEEP = 8  # replies remembered per floor

    def __init__(self) -> None:
        self.entries: dict[tuple[str, int], list[Message]] = {}

    def remember(self, chat_id: str, floor: int, message: Message) -> None:
        kept = self.entries.setdefault((chat_id, floor), [])
        if message not in kept:
            kept.append(message)
            del kept[:-self.KEEP]

    def original(self, chat_id: str, floor: int, client: Message) -> Message | None:
        for message in reversed(self.entries.get((chat_id, floor), [])):
            if message.hash != client.hash and same_floor(message, client):
                return message
        return None


class Syncing(Protocol):
    """What `sync_request` needs of the service (`curator.service.server.state.Service`)."""

    memory: Memory
    shelved_copies: ShelvedCopies

    def sync(self, chat_id: str, messages: list[Message], start: int = 0,
             extract: bool = True) -> tuple[HistoryReport, dict[str, Any] | None]: ...


def sync_request(service: Syncing, chat_id: str, floors: list[Message], max_rollback: int | None = None) -> int:
    """Sync a request's floors into the chat (under the chat's writer lock, held by the caller): line them up
    with the stored chat, adopt the front end's copies of stored floors, let a copy of a shelved reply bring
    its memory back, then history sync for the rest. Returns the floor the request starts at. A request that would
    roll back more than `max_rollback` floors (after adopting copies) raises RollbackRefused and changes nothing."""
    store = service.memory.store
    copies = service.shelved_copies
    stored = store.messages(chat_id)
    start = window_start(stored, floors)
    adopted = adopt_client_copies(stored, floors, start)
    check_rollback([adopted.get(f, m) for f, m in enumerate(stored)], floors, start, max_rollback)
    adopt(store, chat_id, adopted)
    synced, restored = list(floors), {}
    first = next((i for i in range(len(floors)) if start + i >= len(stored)
                  or (start + i not in adopted and stored[start + i].hash != floors[i].hash)), None)
    if first is not None and floors[first].role == "assistant":
        original = copies.original(chat_id, start + first, floors[first])
        if original is not None:  # a swipe back to a reply the shelf holds in the proxy's recorded form
            synced[first] = original
            restored[start + first] = floors[first]
    before = store.messages(chat_id) if adopted else stored
    report, _job = service.sync(chat_id, synced, start, extract=False)
    if report.shelved and report.dirty_floor is not None and report.dirty_floor < len(before):
        copies.remember(chat_id, report.dirty_floor, before[report.dirty_floor])
    if restored:
        adopt(store, chat_id, {f: Message(m.role, m.name, m.text) for f, m in restored.items()})
    return start


def adopt(store: Store, chat_id: str, copies: dict[int, Message]) -> None:
    """Store the front end's copies of floors as the floors' text: the same floor, so no rollback, and the
    memory extracted from it stays."""
    if copies:
        rewrite_messages(store, chat_id, copies)


def request_kind(messages: list[dict[str, Any]], header: str | None = None,
                 markers: dict[str, tuple[str, ...]] | None = None) -> str:
    """`chat` for a request whose answer is the chat's next message; `impersonate`, `quiet` or `continue`
    for one whose answer is not a new floor: the `X-Curator-Kind` header when given, else a system message after
    the last user/assistant message that starts like one of the `markers`."""
    if header:
        kind = header.strip().lower()
        if kind in KINDS:
            return kind
    markers = MARKERS if markers is None else markers
    last = max((i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") in ("user", "assistant")),
               default=-1)
    for message in messages[last + 1:]:
        if not isinstance(message, dict) or message.get("role") != "system":
            continue
        text = squash(_content_text(message.get("content"))).lower()
        for kind in ("continue", "impersonate", "quiet"):
            if any(text.startswith(marker) for marker in markers.get(kind, ())):
                return kind
    return "chat"


SPEAKER_HEADER = "x-curator-speaker"
# SillyTavern's group nudge (1.12.x default `group_nudge_prompt`): "[Write the next reply only as {{char}}.]"
_GROUP_NUDGE = re.compile(r"\[write the next reply only as (?P<name>[^\]\n]{1,100}?)\.?\]", re.IGNORECASE)


def next_speaker(messages: list[dict[str, Any]], header: str | None = None) -> str | None:
    """Who the front end asks to speak next: the `X-Curator-Speaker` header (percent-encoded UTF-8) when given,
    else the character SillyTavern's group nudge names (a system message of a group chat's request); None when
    neither says (recall then assumes nobody in a group chat: `curator/recall/story.py`)."""
    if header and header.strip():
        from urllib.parse import unquote

        return unquote(header.strip())[:200]
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "system":
            found = _GROUP_NUDGE.search(_content_text(message.get("content")))
            if found:
                return found["name"].strip()
    return None


def continued(reply: Message, addition: str, postfix: str = " ") -> Message:
    """The reply after Continue: SillyTavern joins the old text and the continuation with its continue postfix
    (a space by default); the form is immaterial, a front end's copy with another joint is the same floor."""
    text = reply.text.rstrip() + postfix + addition.lstrip() if addition.strip() else reply.text
    return Message(reply.role, reply.name, text, reply.swipe_id, list(reply.swipes), reply.sent_at)


def _content_text(content: object) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return content if isinstance(content, str) else ""
