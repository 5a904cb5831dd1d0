"""History sync: keep memory true to the chat when the user edits, deletes or swipes.

The client sends the chat (every message, or a tail window starting at an explicit floor). Each floor's hash is
compared with the stored one; the earliest dirty floor (an edit, a swipe, a deletion, a shorter chat) has every
commit anchored at or after it rolled back (extraction, curator and maintenance alike). Derived state follows:
the vector index reconciles through the store's change hook, recall results cached for those floors are dropped,
and the floors from there are due for extraction again. A reply swiped away goes on the swipe shelf; swiping back
to it restores its commits with no model call.

If the stored hashes or the commit log are damaged, memory is cleared and rebuilt from the chat, and the report
says so (`rebuilt`, `rebuild_reason`).

Nothing is lost: what a sync reverts (commits and the floors it replaces) goes to the trash as one batch (`batch` in
the report), which `Memory.undo` puts back. A sync that would leave the chat without a user or assistant message, or
revert more than `max_revert` commits, can be refused before it changes anything (`RollbackRefused`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from curator.errors import CuratorError, RollbackRefused
from curator.extract.extractor import due_floors
from curator.store.commit_log import count_from
from curator.store.message_rows import floor_hashes, set_floor_hashes
from curator.store.messages import Message
from curator.settings import Settings
from curator.store.shelf import Shelf
from curator.store.store import Store

if TYPE_CHECKING:
    from curator.extract.channel import ChannelWriter, FloorResult

log = logging.getLogger("curator.sync")

# Called with (chat_id, floor) once memory at or after `floor` is gone: recall caches, listeners.
FloorsDropped = Callable[[str, int], None]


@dataclass
class HistoryReport:
    chat_id: str
    floors: int  # messages in the chat after the sync
    dirty_floor: int | None = None
    reason: str | None = None  # edited | swiped | deleted | shorter | hash missing
    reverted: list[int] = field(default_factory=list)  # commit ids rolled back
    batch: int | None = None  # the trash batch keeping what was reverted (`undo` restores it)
    shelved: int = 0  # commits put on the swipe shelf
    restored: list[int] = field(default_factory=list)  # commit ids restored from the shelf (no model call)
    rebuilt: bool = False
    rebuild_reason: str | None = None
    due: list[int] = field(default_factory=list)  # floors queued for (re-)extraction
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["seconds"] = round(self.seconds, 4)
        return data


@dataclass(frozen=True)
class Dirty:
    floor: int
    reason: str


def find_dirty_floor(stored: Sequence[Message], stored_hashes: Sequence[int | None], incoming: Sequence[Message],
                     start: int = 0) -> Dirty | None:
    """The earliest floor at or after `start` where the stored chat and the incoming one (its floors from
    `start` on, to the end) part ways. Floors below `start` were not sent and are never dirty."""
    for offset, new in enumerate(incoming):
        floor = start + offset
        if floor >= len(stored):
            return None  # the rest is new floors, appended
        old = stored[floor]
        if stored_hashes[floor] is None:
            return Dirty(floor, "hash missing")
        if stored_hashes[floor] != new.hash:
            swiped = old.role == new.role == "assistant" and old.swipe_id != new.swipe_id
            return Dirty(floor, "swiped" if swiped else "edited")
    end = start + len(incoming)
    if end < len(stored):
        return Dirty(end, "deleted" if incoming else "shorter")
    return None


def _has_chat(messages: Sequence[Message]) -> bool:
    return any(m.role in ("user", "assistant") for m in messages)


def _shelvable(stored: Sequence[Message], merged: Sequence[Message], floor: int) -> bool:
    """The newest reply was replaced or removed, nothing after it: a swipe, a regenerate, an edit of the last
    reply. Its memory may come back, so it is worth keeping."""
    if floor != len(stored) - 1 or stored[floor].role != "assistant":
        return False
    if len(merged) <= floor:
        return True
    new = merged[floor]
    return new.role == "assistant" and new.name == stored[floor].name


class HistorySync:
    """Sync for the chats of one store. `on_floors_dropped` hears of every rollback it makes."""

    def __init__(self, store: Store, settings: Settings, shelf: Shelf,
                 on_floors_dropped: Sequence[FloorsDropped] = ()) -> None:
        self.store, self.settings, self.shelf = store, settings, shelf
        self.on_floors_dropped = list(on_floors_dropped)

    def sync(self, chat_id: str, messages: Sequence[Message], start: int = 0, *, reason: str = "sync",
             max_revert: int | None = None, allow_empty: bool = True) -> HistoryReport:
        """Bring the stored chat and its memory in line with `messages` (the floors from `start` to the end).
        `reason` names the sync in the trash (sync, proxy). Refused (RollbackRefused, nothing changed) when it would
        revert more than `max_revert` commits (None: no limit), or, unless `allow_empty`, leave a chat that had
        messages with no user or assistant message."""
        began = time.perf_counter()
        self.store.chat(chat_id)  # ChatNotFound before anything else
        stored = self.store.messages(chat_id)
        if start < 0 or start > len(stored):
            raise CuratorError(f"a tail window must start at a stored floor or right after the last one "
                               f"(0..{len(stored)}), not {start}",
                               "Send the whole chat, or a tail window that starts at or before the first new floor.")
        merged = list(stored[:start]) + list(messages)
        report = HistoryReport(chat_id, len(merged))
        damaged = self._damaged_hashes(chat_id, stored)
        if damaged is not None:
            self._rebuild(chat_id, merged, report, f"stored hash of floor {damaged} does not match its message")
        else:
            hashes = [m.hash for m in stored]
            dirty = find_dirty_floor(stored, hashes, messages, start)
            if dirty is not None:
                self._check(chat_id, stored, merged, dirty.floor, max_revert, allow_empty)
                report.dirty_floor, report.reason = dirty.floor, dirty.reason
                self._roll_back(chat_id, stored, merged, dirty.floor, report, reason)
            elif len(merged) != len(stored):
                self.store.set_messages_from(chat_id, len(stored), merged[len(stored):])  # floors appended
            self._restore(chat_id, merged, dirty.floor if dirty else len(stored), report)
        report.due = [f for f, _ in due_floors(self.store, chat_id, self.settings)]
        report.seconds = time.perf_counter() - began
        if report.reverted or report.rebuilt:
            log.info("sync %s: %s", chat_id, report.to_dict())
        return report

    def would_revert(self, chat_id: str, messages: Sequence[Message], start: int = 0) -> tuple[int | None, int]:
        """(the floor a sync of `messages` would roll back from, or None; how many commits it would revert)."""
        stored = self.store.messages(chat_id)
        dirty = find_dirty_floor(stored, [m.hash for m in stored], messages, start)
        if dirty is None:
            return None, 0
        return dirty.floor, self.would_revert_from(chat_id, floor=dirty.floor)

    def would_revert_from(self, chat_id: str, floor: int) -> int:
        """How many commits a rollback of `floor` would revert (those anchored at or after it)."""
        return count_from(self.store, chat_id, floor)

    def _check(self, chat_id: str, stored: list[Message], merged: list[Message], floor: int,
               max_revert: int | None, allow_empty: bool) -> None:
        if not allow_empty and not _has_chat(merged) and _has_chat(stored):
            raise RollbackRefused(f"the sync holds no user or assistant message: it would empty chat {chat_id!r} "
                                  f"({len(stored)} floors) and revert its memory",
                                  "Nothing was changed. Check that this is the chat you meant (a file cut by a crash "
                                  "holds only its header); send `allow_rollback: true` if you mean it.")
        if max_revert is not None:
            count = self.would_revert_from(chat_id, floor)
            if count > max_revert:
                raise RollbackRefused(f"the sync would revert {count} commits of chat {chat_id!r} (every one anchored "
                                      f"at floor {floor} or later; more than {max_revert} need a deliberate yes)",
                                      "Nothing was changed. Send `allow_rollback: true` (CLI: --yes) if you mean "
                                      "it; what it reverts can be undone (`curator undo`).")

    def _roll_back(self, chat_id: str, stored: list[Message], merged: list[Message], floor: int,
                   report: HistoryReport, reason: str = "sync") -> None:
        try:
            result = self.store.rollback(chat_id, floor, reason=reason, detail=f"floor {floor} {report.reason}",
                                         messages=merged[floor:])
        except (CuratorError, ValueError, KeyError, TypeError) as exc:  # an undo record that cannot be read
            self._rebuild(chat_id, merged, report, f"the commit log cannot be rolled back to floor {floor}: {exc}")
            return
        report.reverted, report.batch = [c.id for c in result.reverted], result.batch
        if _shelvable(stored, merged, floor):
            self.shelf.drop(chat_id, floor + 1)
            self.shelf.put(chat_id, floor, stored[floor], result.reverted)
            report.shelved = len(result.reverted)
        else:
            self.shelf.drop(chat_id, floor)
        self.floors_dropped(chat_id, floor)

    def _restore(self, chat_id: str, merged: list[Message], floor: int, report: HistoryReport) -> None:
        """The reply now at the first new floor may be one the shelf knows (a swipe back)."""
        if floor < len(merged) and merged[floor].role == "assistant":
            restored = self.shelf.restore(chat_id, floor, merged[floor])
            report.restored = [c.id for c in restored or []]

    def _damaged_hashes(self, chat_id: str, stored: list[Message]) -> int | None:
        legacy = []
        for (floor, saved), message in zip(floor_hashes(self.store, chat_id), stored, strict=True):
            if saved != message.hash:
                if saved != message.legacy_hash:
                    return floor
                legacy.append((floor, message.hash))
        if legacy:  # written when the hash still covered the swipe index: same floor, new form of its hash
            set_floor_hashes(self.store, chat_id, legacy)
        return None

    def _rebuild(self, chat_id: str, merged: list[Message], report: HistoryReport, reason: str) -> None:
        log.warning("chat %s: %s; clearing its memory and rebuilding it from the chat", chat_id, reason)
        report.rebuilt, report.rebuild_reason, report.dirty_floor = True, reason, 0
        self.clear(chat_id, messages=merged, detail=reason)

    def clear(self, chat_id: str, messages: Sequence[Message] | None = None, detail: str = "") -> int:
        """Forget the chat's whole memory before a rebuild (into the trash); returns the commits removed. With
        `messages`, they become the chat's floors in the same transaction."""
        removed = clear_memory(self.store, self.shelf, chat_id, messages=messages, detail=detail)
        self.floors_dropped(chat_id, 0)
        return removed

    def floors_dropped(self, chat_id: str, floor: int) -> None:
        """Tell the listeners (recall caches) that memory at or after `floor` is gone."""
        for callback in self.on_floors_dropped:
            callback(chat_id, floor)


def clear_memory(store: Store, shelf: Shelf, chat_id: str, messages: Sequence[Message] | None = None,
                 detail: str = "") -> int:
    """Forget a chat's whole memory (commit log, graph, shelf; the log goes to the trash), keeping its settings,
    and its messages unless `messages` replaces them. Returns the commits removed. The next extraction starts
    again from the first floor."""
    removed = store.clear_graph(chat_id, reason="rebuild", detail=detail, messages=messages)
    shelf.drop(chat_id, 0)
    return removed


async def extract_due(writer: ChannelWriter, chat_id: str, *,
                      on_step: Callable[[FloorResult, int, int], None] | None = None,
                      should_stop: Callable[[], bool] | None = None,
                      lock: AbstractContextManager[object] | None = None,
                      on_idle: Callable[[], None] | None = None) -> list[FloorResult]:
    """Write every floor still due with the chat's channel (`writer`: a `curator.extract.channel.ChannelWriter`),
    one floor at a time, stopping at the first failure or when `should_stop` says so. `lock` (the chat's writer
    lock) is held for each floor; see `ChannelWriter.write_due`."""
    return await writer.write_due(chat_id, on_step=on_step, should_stop=should_stop, writer=lock, on_idle=on_idle)
