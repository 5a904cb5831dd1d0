"""What a `curator` run shares whichever parser read its arguments (typer's app, or `quick.py`'s): the global
options, opening the store, and reporting errors as one line + hint. No typer and no rich here: a fresh `curator
chats` imports this module and prints without either."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from curator.cli.guards import INPUT_ERRORS, input_error_message
from curator.errors import CuratorError

if TYPE_CHECKING:
    from curator.api.memory import Memory
    from curator.store.store import Store

state: dict[str, Any] = {"data": None, "debug": False, "store": None}  # the global options of this run


def open_store() -> Store:
    """The store of `--data` alone, for a read-only command that needs nothing but the graph (no settings, models or
    vector index: `curator chats`, `curator show`; a fresh process does not load the Memory API for them). A missing
    store is an error and nothing is created."""
    from curator.paths import data_dir
    from curator.store.store import Store

    require_store()
    return Store(data_dir(state["data"]), store=state["store"])  # as Memory opens it


def open_memory(existing: bool = False) -> Memory:
    """The Memory of `--data`. `existing`: a read-only command; a missing store is an error and nothing is created."""
    from curator.api.memory import Memory  # loaded by the commands that use it, not by `--help`

    if existing:
        require_store()
    return Memory(state["data"], store=state["store"])


def require_chat(chat_id: str) -> None:
    """Stop with the missing-chat error (and create nothing) before a command loads the Memory API: a mistyped
    chat id is told in a tenth of the CPU the settings, schema and model code would take to load."""
    with open_store() as store:
        store.schema_outline(chat_id)  # ChatNotFound, as Memory would raise it; the schema is not validated


def require_store() -> None:
    """Stop with an error, creating nothing, when `--data` (or `--store`) holds no memory store."""
    from curator.paths import data_dir
    from curator.store.db import store_exists
    from curator.store.location import redact, store_url

    where = data_dir(state["data"])
    url = store_url(where, state["store"])
    if not store_exists(where, url):
        raise CuratorError(
            f"no memory store in {redact(url) if url else where}",
            "Nothing was created. Pass --data (or set CURATOR_DATA) "
            "to the directory you used, or start one with `curator init` or `curator demo`.",
        )


def run_reported(command: Callable[[], object]) -> int:
    """Run `command`; a known error becomes one line + hint on stderr and exit code 1 (`--debug` adds the
    traceback), anything else propagates. Returns the exit code."""
    try:
        command()
    except (CuratorError, *INPUT_ERRORS) as exc:
        from curator.cli import console

        if state["debug"]:
            import traceback  # here: only --debug prints one (~3 ms of a one-shot command's start)

            traceback.print_exc()
        if isinstance(exc, CuratorError) or _is_schema_error(exc):
            console.print_error(str(exc), getattr(exc, "hint", "") or _schema_hint(exc))
        else:  # bad files, damaged databases: one line, not a traceback
            console.print_error(*input_error_message(exc))
        return 1
    return 0


def _is_schema_error(exc: Exception) -> bool:
    from curator.schemas import SchemaError  # not loaded for `--help`

    return isinstance(exc, SchemaError)


def _schema_hint(exc: Exception) -> str:
    from curator.schemas import SchemaError, preset_names

    if not isinstance(exc, SchemaError):
        return ""
    if not any(issue.type or issue.field for issue in exc.issues):  # the file itself: missing, unreadable, not YAML
        return (f"Give a preset ({', '.join(preset_names())}) or the path of a schema file; "
                "`curator schema show default --format yaml` prints one to start from.")
    return "Fix the schema file at the types and fields named above; `curator schema show default --format yaml` " \
        "prints an example."
