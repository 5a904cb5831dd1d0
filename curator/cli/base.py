"""What every `curator` command module shares: the Typer app, global options, error reporting."""

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, ParamSpec, TypeVar

import typer

from curator.cli.session import open_memory as open_memory  # the commands' way to the Memory, re-exported
from curator.cli.session import run_reported, state
from curator.errors import NoModelProfile

if TYPE_CHECKING:
    from curator.settings import Settings, Task

P = ParamSpec("P")
T = TypeVar("T")

# rich_markup_mode=None: click's plain help shows flags as flags (`--json`, not `--json <bool>`) and renders without
# loading rich's markdown machinery (most of `curator --help`'s start-up time).
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="memory-curator: a memory graph for long role-play chats.")

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
        result: list[T] = []
        if run_reported(lambda: result.append(command(*args, **kwargs))):
            raise typer.Exit(1) from None
        return result[0]

    return run


def require_models(*tasks: "Task") -> None:
    """Stop before anything is created when a task has no model profile (the error carries the settings hint)."""
    settings = _settings()
    for task in tasks:
        settings.profile_for(task)


def require_channel_models() -> None:
    """`require_models` for the writers of the configured `extraction.channel` (none for `off`)."""
    if no_model_configured():
        raise NoModelProfile("default", "extract")  # what the default settings' extractor would raise
    from curator.settings import writers_of  # not the channel itself: a missing model is told before any LLM code loads

    task: dict[str, Task] = {"extractor": "extract", "curator": "curate"}
    require_models(*(task[writer] for writer in writers_of(_settings().extraction.channel)))


def no_model_configured() -> bool:
    """Neither a config.yaml in the data directory nor CURATOR_MODEL: the default settings, whose extractor has no
    model. Told without loading the settings' models (a cheap error stays cheap: issue 33); tests/test_cli_quick.py
    checks that the default settings raise the same error."""
    import os

    from curator.paths import data_dir

    return not os.environ.get("CURATOR_MODEL") and not (data_dir(state["data"]) / "config.yaml").exists()


def _settings() -> "Settings":
    from curator.paths import data_dir
    from curator.settings import load_settings

    return load_settings(data_dir(state["data"]))  # reads config.yaml if there is one; creates nothing
