"""How the proxy reads what a front end sends: which stored floors a request's messages are, whether a reply came
back only reformatted by the front end, and whether a request asks for a chat reply at all.

Front ends do not send back the reply they were given byte for byte. SillyTavern, for one, puts the character's
name in the `name` field (names behaviour "Completion Object") or in front of the text ("Message Content"), trims
leading and trailing whitespace (`trim_spaces`), cuts the tail at a stop string, and removes a leading `Name:` the
model wrote. Such a copy is the same floor: the stored text becomes the client's, the memory extracted from it
stays. Anything else (a real edit) is a change and rolls back as usual. Only a name the chat uses counts as a
`Name:` prefix (`chat_names`): "Chapter 3:" or "Note:" at the start of one reply is its text.

It also sends requests whose answer is not a chat message: impersonation (the model writes the user's next
message), quiet prompts (extensions such as Summarize, `/gen`) and Continue (the answer extends the last reply).
They are marked by a system instruction after the last user/assistant message; `request_kind` recognises
SillyTavern's default instructions, an instruction appended after the ones the chat's ordinary requests end with (a
`/gen` prompt, a rewritten impersonation prompt), a request that holds no chat message at all, and the
`X-Curator-Kind` header any front end can send.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
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
# SillyTavern's default main prompt names both speakers; its default stop strings name the user ("\nAlex:").
_MAIN_PROMPT = re.compile(r"Write ([^\n']{1,64})'s next reply in a fictional chat between ([^\n]{1,64}?) and "
                          r"([^\n]{1,64}?)\.")
_STOP_NAME = re.compile(r"\n([^\n:]{1,64}):")
_SPACE = re.compile(r"\s+")


def squash(text: str) -> str:
    """Text with every run of whitespace as one space, trimmed: the form formatting changes leave alone."""
    return _SPACE.sub(" ", text).strip()


def _prefix(text: str) -> str | None:
    match = _NAME_PREFIX.match(text)
    return match.group(1).strip() if match else None


def _without_prefix(text: str, names: frozenset[str]) -> str | None:
    """The text without a leading `Name:` when Name is one of `names` (the chat's), else None."""
    match = _NAME_PREFIX.match(text)
    return text[match.end():] if match and match.group(1).strip() in names else None


@dataclass(frozen=True)
class PromptNames:
    """Who a request says speaks: the character (`speaker`) and every name it gives (main prompt, stop strings)."""

    speaker: str = ""
    names: frozenset[str] = frozenset()


def prompt_names(messages: list[Any], stop: object = None) -> PromptNames:
    """The names a request gives outside its floors: SillyTavern's default main prompt ("Write Eileen's next reply in
    a fictional chat between Eileen and Alex.") and its names-as-stop-strings ("\nAlex:")."""
    speaker, names = "", set[str]()
    for m in messages:
        if isinstance(m, dict) and m.get("role") == "system":
            for found in _MAIN_PROMPT.finditer(_content_text(m.get("content"))):
                speaker = speaker or found[1].strip()
                names |= {found[1].strip(), found[2].strip(), found[3].strip()}
    for text in stop if isinstance(stop, list) else [stop]:
        if isinstance(text, str) and (named := _STOP_NAME.fullmatch(text)):
            names.add(named[1].strip())
    return PromptNames(speaker, frozenset(n for n in names if n))


def chat_names(*chats: Sequence[Message]) -> frozenset[str]:
    """The names a chat uses: those of its floors' `name` fields, and a `Name:` prefix that starts at least two of
    its floors (a front end that writes each message as "Name: text"). A "Chapter 3:" heading is no name."""
    names = {m.name.strip() for chat in chats for m in chat if m.name.strip()}
    texts = {(m.role, m.text) for chat in chats for m in chat}
    counts = Counter(p for _, text in texts if (p := _prefix(text)))
    return frozenset(names | {p for p, n in counts.items() if n >= 2})


def loose_key(message: Message, names: frozenset[str] = frozenset()) -> tuple[str, str]:
    """A floor's key for lining up a request with the stored chat: role and squashed text without a leading
    `Name:` (one of `names`). Two floors with the same key may be the same floor; `same_floor` decides."""
    text = _without_prefix(message.text, names)
    return message.role, squash(text if text is not None else message.text)


def same_floor(stored: Message, client: Message, names: frozenset[str] = frozenset()) -> bool:
    """True when `client` is `stored` as a front end changes it: another `name` field, a `Name:` prefix (one of
    `names`, the chat's) added or removed, whitespace trimmed or collapsed, or (for a reply) its tail cut by a stop
    string or a regex."""
    if stored.role != client.role:
        return False
    if stored.text == client.text:
        return True  # at most the name differs
    names = names | {n for n in (stored.name.strip(), client.name.strip()) if n}
    old, new = squash(stored.text), squash(client.text)
    candidates = [(old, new)]
    for text, other, old_side in ((client.text, old, False), (stored.text, new, True)):
        cut = _without_prefix(text, names)
        if cut is not None:
            candidates.append((squash(cut), other) if old_side else (other, squash(cut)))
    old_cut, new_cut = _without_prefix(stored.text, names), _without_prefix(client.text, names)
    if old_cut is not None and new_cut is not None:
        candidates.append((squash(old_cut), squash(new_cut)))
    for old_text, new_text in candidates:
        if old_text == new_text:
            return True
        if stored.role == "assistant" and new_text and old_text.startswith(new_text):
            return True  # the tail was cut (stop string, regex, the front end's own clean-up)
    return False


def window_start(stored: Sequence[Message], floors: Sequence[Message], probe: int = 3,
                 names: frozenset[str] = frozenset()) -> int:
    """Where the request's messages start in the stored chat. Front ends drop the oldest messages once the
    context is full, so the request is often a tail of the chat: it starts at the stored floor from which the
    most of its first messages match (one of its first `probe` messages may itself be edited). Floors match
    by `loose_key`, so a reply the front end reformatted still lines up. 0 when nothing matches: then it is
    the whole chat."""
    best, best_run = 0, 0
    keys = [loose_key(m, names) for m in stored]
    incoming = [loose_key(m, names) for m in floors]
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


def adopt_client_copies(stored: Sequence[Message], floors: Sequence[Message], start: int,
                        names: frozenset[str] = frozenset()) -> dict[int, Message]:
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
        if not same_floor(old, client, names):
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

    def original(self, chat_id: str, floor: int, client: Message,
                 names: frozenset[str] = frozenset()) -> Message | None:
        for message in reversed(self.entries.get((chat_id, floor), [])):
            if message.hash != client.hash and same_floor(message, client, names):
                return message
        return None


class Syncing(Protocol):
    """What `sync_request` needs of the service (`curator.service.server.state.Service`)."""

    memory: Memory
    shelved_copies: ShelvedCopies

    def sync(self, chat_id: str, messages: list[Message], start: int = 0, extract: bool = True, *,
             reason: str = "sync") -> tuple[HistoryReport, dict[str, Any] | None]: ...


def sync_request(service: Syncing, chat_id: str, floors: list[Message], *, allow: bool = False, base_url: str = "",
                 max_rollback: int | None = None,
                 given: frozenset[str] = frozenset()) -> tuple[int, HistoryReport]:
    """Sync a request's floors into the chat (under the chat's writer lock, held by the caller): line them up
    with the stored chat, adopt the front end's copies of stored floors, let a copy of a shelved reply bring
    its memory back, then history sync for the rest (what it reverts goes to the trash, reason `proxy`). Returns
    (the floor the request starts at, the sync's HistoryReport). Unless `allow`, a request that would replace the
    chat or empty most of it raises RollbackRefused and changes nothing (`proxy_guard.check_rollback`)."""
    store = service.memory.store
    copies = service.shelved_copies
    stored = store.messages(chat_id)
    names = chat_names(stored, floors) | given
    start = window_start(stored, floors, names=names)
    adopted = adopt_client_copies(stored, floors, start, names)
    if not allow:
        check_rollback([adopted.get(f, m) for f, m in enumerate(stored)], floors, start,
                       lambda floor: service.memory.history.would_revert_from(chat_id, floor),
                       service.memory.settings.history.ask_above, base_url, max_rollback)
    adopt(store, chat_id, adopted)
    synced, restored = list(floors), {}
    first = next((i for i in range(len(floors)) if start + i >= len(stored)
                  or (start + i not in adopted and stored[start + i].hash != floors[i].hash)), None)
    if first is not None and floors[first].role == "assistant":
        original = copies.original(chat_id, start + first, floors[first], names)
        if original is not None:  # a swipe back to a reply the shelf holds in the proxy's recorded form
            synced[first] = original
            restored[start + first] = floors[first]
    before = store.messages(chat_id) if adopted else stored
    report, _job = service.sync(chat_id, synced, start, extract=False, reason="proxy")
    if report.shelved and report.dirty_floor is not None and report.dirty_floor < len(before):
        copies.remember(chat_id, report.dirty_floor, before[report.dirty_floor])
    if restored:
        adopt(store, chat_id, {f: Message(m.role, m.name, m.text) for f, m in restored.items()})
    return start, report


def adopt(store: Store, chat_id: str, copies: dict[int, Message]) -> None:
    """Store the front end's copies of floors as the floors' text: the same floor, so no rollback, and the
    memory extracted from it stays."""
    if copies:
        rewrite_messages(store, chat_id, copies)


@dataclass(frozen=True)
class Tail:
    """What a chat's ordinary requests end with: the system messages after its last chat message, and whether they
    stream."""

    texts: tuple[str, ...]
    stream: bool


def request_kind(messages: list[dict[str, Any]], header: str | None = None,
                 markers: dict[str, tuple[str, ...]] | None = None, *, tails: dict[str, Tail] | None = None,
                 chat_id: str | None = None, stream: bool = False) -> str:
    """`chat` for a request whose answer is the chat's next message; `impersonate`, `quiet` or `continue`
    for one whose answer is not a new floor. In order: the `X-Curator-Kind` header; `quiet` for a request with no
    user or assistant message; a system message after the last user/assistant message that starts like one of
    the `markers`; `quiet` for a request that appends a system message to what the chat's ordinary requests end
    with (`tails`, learned per chat from the requests taken as `chat`: SillyTavern puts a `/gen` or quiet prompt,
    and a rewritten impersonation prompt, after everything else), or that is not streamed, unlike the chat's
    ordinary requests, and ends otherwise (SillyTavern never streams a quiet prompt)."""
    if header:
        kind = header.strip().lower()
        if kind in KINDS:
            return kind
    markers = MARKERS if markers is None else markers
    last = max((i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") in ("user", "assistant")),
               default=-1)
    if last < 0:
        return "quiet"  # nothing of the chat in it: its answer is no floor
    trailing = tuple(squash(_content_text(m.get("content"))) for m in messages[last + 1:]
                     if isinstance(m, dict) and m.get("role") == "system")
    for text in trailing:
        for kind in ("continue", "impersonate", "quiet"):
            if any(text.lower().startswith(marker) for marker in markers.get(kind, ())):
                return kind
    if tails is None or chat_id is None:
        return "chat"
    known = tails.get(chat_id)
    if known is not None and _appended(known, trailing, stream):
        return "quiet"
    tails[chat_id] = Tail(trailing, stream)
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


def _appended(known: Tail, trailing: tuple[str, ...], stream: bool) -> bool:
    if known.texts and len(trailing) > len(known.texts) and trailing[:len(known.texts)] == known.texts:
        return True
    return known.stream and not stream and bool(trailing) and trailing != known.texts


def reply_name(stored: Sequence[Message], floors: Sequence[Message], given: PromptNames = PromptNames()) -> str:
    """The name the front end gives the speaker of the next reply, for the floor the proxy stores (and the
    extraction prompt): the `name` field of the request's newest reply, else the `Name:` prefix it carries (a name
    the chat uses), else the character its main prompt names, else the stored chat's newest reply's name; "" when the
    front end names no one."""
    names = chat_names(stored, floors) | given.names
    for message in reversed(floors):
        if message.role != "assistant":
            continue
        if message.name.strip():
            return message.name.strip()
        prefix = _prefix(message.text)
        if prefix in names:
            return prefix
        break
    if given.speaker:
        return given.speaker
    return next((m.name for m in reversed(stored) if m.role == "assistant" and m.name.strip()), "")


def continued(reply: Message, addition: str, postfix: str = " ") -> Message:
    """The reply after Continue: SillyTavern joins the old text and the continuation with its continue postfix
    (a space by default); the form is immaterial, a front end's copy with another joint is the same floor."""
    text = reply.text.rstrip() + postfix + addition.lstrip() if addition.strip() else reply.text
    return Message(reply.role, reply.name, text, reply.swipe_id, list(reply.swipes), reply.sent_at)


def _content_text(content: object) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return content if isinstance(content, str) else ""
