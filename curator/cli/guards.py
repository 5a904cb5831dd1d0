"""What the CLI asks before it erases memory, and the errors it turns into a message instead of a traceback."""

from __future__ import annotations

import os
import sqlite3
from typing import TYPE_CHECKING

from curator.errors import CuratorError

if TYPE_CHECKING:
    from curator.api.memory import Memory

# Faults of the input or of the data directory, not of the program: reported in one line with exit code 1.
INPUT_ERRORS = (OSError, RecursionError, UnicodeError, OverflowError, sqlite3.DatabaseError, ValueError)


def confirm_rollback(memory: Memory, chat: str, floor: int, assume_yes: bool) -> None:
    """Refuse negative floors; on a terminal, ask before reverting more than `history.ask_above` commits
    (config.yaml; 3 by default)."""
    if floor < 0:
        raise CuratorError(f"cannot roll back to floor {floor}: floors start at 0",
                           "Floor 0 reverts every commit of the chat; a later floor keeps what came before it.")
    memory.chat(chat)
    reverted = len(memory.store.commits(chat, since_floor=floor))
    if reverted > memory.settings.history.ask_above:
        confirm(f"Revert {reverted} commits of chat {chat!r} (every one anchored at floor {floor} or later)? "
                f"They are kept: `curator undo --chat {chat}` brings them back.", assume_yes)


def confirm(question: str, assume_yes: bool) -> None:
    """Ask on a terminal (abort on no); say nothing when not on one or when told yes."""
    if not assume_yes and os.isatty(0):
        import typer  # here, not at import: the listings that share this module's errors load no typer

        typer.confirm(question, abort=True)


def input_error_message(exc: BaseException) -> tuple[str, str]:
    """(message, hint) for an error of the INPUT_ERRORS kinds."""
    if isinstance(exc, IsADirectoryError):
        return f"{exc.filename}: is a directory, not a file", "Give the path of one file."
    if isinstance(exc, RecursionError):
        return "the input is nested too deeply to read", "Check that the file is the kind the command expects."
    if isinstance(exc, UnicodeError):
        return f"the input holds text that is not valid Unicode ({exc})", "Save the file as UTF-8."
    if isinstance(exc, OverflowError):
        return f"a number is out of range ({exc})", "Floors and counts are integers below 2^63."
    if isinstance(exc, sqlite3.DatabaseError):
        return f"the database could not be read ({exc})", \
            "The data directory's memory.db is damaged: restore it from a backup or export, or use another --data."
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}{f': {exc.filename}' if exc.filename else ''}", \
            "Check the path and that it can be read."
    return f"invalid input: {exc}", "Check the values given to the command."
