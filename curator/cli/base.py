"""What every `curator` command module shares: the Typer app, global options, error reporting."""

import functools
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec, TypeVar

import typer

from curator.cli import console
from curator.cli.guards import INPUT_ERRORS, input_error_message
from curator.errors import CuratorError

if TYPE_CHECKING:
    from curator.api.memory import Memory
    from curator.settings import Settings, Task
    from curator.store.store import Store

P = ParamSpec("P")
T = TypeVar("T")

# rich_markup_mode=None: click's plain help shows flags as flags (`--json`, not `--json <bool>`) and renders without
# loading rich's markdown machinery (most of `curator --help`'s start-up time).
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="memory-curator: a memory graph for long role-play chats.")

state: dict[str, Any] = {"data": None, "debug": False, "store": None}  # the global options of this run
ChatOpt = Annotated[str, typer.Option("--chat", "-c", help="Chat id.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


@app.callback()
def _main(
    data: Annotated[Path | None, typer.Option("--data", help="Data directory (default: $CURATOR_DATA or "
                                                 "~/.local/share/memory-curator).")] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
    store: Annotated[str | None, typer.Option("--store", help="Keep the store in PostgreSQL: postgresql://user:"
                                              "password@host:port/db (default: $CURATOR_STORE, `store:` in "
                                              "config.yaml, else SQLite in the data directory).")] = None,
) -> None:
    state.update(data=data, debug=debug, store=store)


def reported(command: Callable[P, T]) -> Callable[P, T]:
    """Turn known errors into one line + hint and exit code 1; --debug adds the traceback."""

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return command(*args, **kwargs)
        except (CuratorError, *INPUT_ERRORS) as exc:
            if state["debug"]:
                traceback.print_exc()
            if isinstance(exc, CuratorError) or _is_schema_error(exc):
                console.print_error(str(exc), getattr(exc, "hint", "") or _schema_hint(exc))
            else:  # bad files, damaged databases: one line, not a traceback
                console.print_error(*input_error_message(exc))
            raise typer.Exit(1) from None

    return run


def open_memory(existing: bool = False) -> "Memory":
    """The Memory of `--data`. `existing`: a read-only command; a missing store is an error and nothing is created."""
    from curator.api.memory import Memory  # loaded by the commands that use it, not by `--help`

    if existing:
        _require_store()
    return Memory(state["data"], store=state["store"])


def open_store() -> "Store":
    """The store of `--data` alone, for a read-only command that needs nothing but the graph (no settings, models or
    vector index: `curator chats`, `curator show`; a fresh process does not load the Memory API for them). A missing
    store is an error and nothing is created."""
    from curator.paths import data_dir
    from curator.store.store import Store

    _require_store()
    return Store(data_dir(state["data"]), store=state["store"])  # as Memory opens it


def _require_store() -> None:
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


def require_models(*tasks: "Task") -> None:
    """Stop before anything is created when a task has no model profile (the error carries the settings hint)."""
    settings = _settings()
    for task in tasks:
        settings.profile_for(task)


def require_channel_models() -> None:
    """`require_models` for the writers of the configured `extraction.channel` (none for `off`)."""
    from curator.settings import writers_of  # not the channel itself: a missing model is told before any LLM code loads

    task: dict[str, Task] = {"extractor": "extract", "curator": "curate"}
    require_models(*(task[writer] for writer in writers_of(_settings().extraction.channel)))


def _settings() -> "Settings":
    from curator.paths import data_dir
    from curator.settings import load_settings

    return load_settings(data_dir(state["data"]))  # reads config.yaml if there is one; creates nothing


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

