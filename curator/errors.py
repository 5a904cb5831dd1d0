"""The error hierarchy. Every error the engine raises on purpose is a CuratorError with a message that says
what went wrong and where, and a `hint` that says what to do next (the CLI prints both)."""

from __future__ import annotations


class CuratorError(Exception):
    """Base of every deliberate error; `hint` tells the user what to do next."""

    hint: str = ""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        if hint is not None:
            self.hint = hint


class NoModelProfile(CuratorError):
    """A task's model profile is not configured."""

    def __init__(self, name: str, task: str) -> None:
        super().__init__(f"no model profile {name!r} for task {task!r}",
                         f"Add `profiles: {{{name}: {{model: ..., base_url: ...}}}}` to config.yaml in the data "
                         "directory, or set CURATOR_MODEL (and CURATOR_BASE_URL, CURATOR_API_KEY).")


class StoreError(CuratorError):
    """The database cannot be used as it is."""


class StoreCorrupt(StoreError):
    hint = "Restore the file from a backup, or move it away and re-import an export."


class StoreLocked(StoreError):
    hint = "Another process is writing to this data directory; wait for it or stop it, then retry."


class StoreTooNew(StoreError):
    hint = "This database was written by a newer memory-curator; upgrade the package to open it."


class MigrationFailed(StoreError):
    hint = "Nothing was changed. Report the message above; the database is still at its previous version."


class NotFound(CuratorError):
    """A chat, node or edge that does not exist."""


class ChatNotFound(NotFound):
    hint = "List chats with `curator chats`, or create one with `curator init --chat ID`."


class ChatExists(CuratorError):
    hint = "Pick another chat id, or work with the existing chat."


class OpError(CuratorError):
    """An op in a commit is invalid; `index` is its position in the commit (0-based)."""

    def __init__(self, message: str, index: int | None = None, hint: str | None = None) -> None:
        self.index = index
        prefix = f"op #{index}: " if index is not None else ""
        super().__init__(prefix + message, hint)
        self.reason = message


class RollbackRefused(CuratorError):
    """A sync or a proxy request would erase more memory than it may without saying so; nothing was changed."""


class ImportFileError(CuratorError):
    """A graph file to import is malformed; nothing was imported."""

    hint = "Fix the file (the message says where) and import again; the store was not changed."


class MessageError(CuratorError, ValueError):
    """A message given to the library is not one (a dict without a role or text, an unknown key)."""

    hint = ('Give each message as a curator.Message or a dict such as {"role": "user", "name": "Ann", '
            '"content": "Hello"} (role: user, assistant or system; name optional).')


class ChatFileError(CuratorError):
    """A chat file (SillyTavern .jsonl or plain JSONL) is malformed."""

    hint = "Check the file at the line named above; nothing was stored."


class MissingExtra(CuratorError, ImportError):
    """A feature whose packages are an optional extra that is not installed (pydantic-ai-slim's way): the message
    names the feature and the one command that installs them."""

    def __init__(self, extra: str, feature: str) -> None:
        super().__init__(f'{feature} needs the "{extra}" extra: pip install "memory-curator[{extra}]"')
        self.extra = extra
