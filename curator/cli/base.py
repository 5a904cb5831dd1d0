"""What every `curator` command module shares: the Typer app, global options, error reporting."""

from __future__ import annotations

import functools
import traceback
from pathlib import Path
from typing import Annotated

import typer

from curator.schemas import SchemaError

from curator.cli import console
from curator.cli.guards import INPUT_ERRORS, input_error_message
from curator.errors import CuratorError
from curator.service.memory import Memory

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="memory-curator: a memory graph for long role-play chats.")

state = {"data": None, "debug": False}
ChatOpt = Annotated[str, typer.Option("--chat", "-c", help="Chat id.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


@app.callback()
def _main(
    data: Annotated[Path | None, typer.Option("--data", help="Data directory (default: $CURATOR_DATA or "
                                                 "~/.local/share/memory-curator).")] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
) -> None:
    state.update(data=data, debug=debug)


def reported(command):
    """Turn known errors into one line + hint and exit code 1; --debug adds the traceback."""

    @functools.wraps(command)
    def run(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except (CuratorError, SchemaError) as exc:
            if state["debug"]:
                traceback.print_exc()
            console.print_error(str(exc), getattr(exc, "hint", "") or _schema_hint(exc))
            raise typer.Exit(1) from None
        except INPUT_ERRORS as exc:  # bad files, damaged databases: one line, not a traceback
            if state["debug"]:
                traceback.print_exc()
            console.print_error(*input_error_message(exc))
            raise typer.Exit(1) from None

    return run


def open_memory() -> Memory:
    return Memory(state["data"])


def _schema_hint(exc: Exception) -> str:
    return "Fix the schema file at the places listed; `curator schema show default --format yaml` prints an example." \
        if isinstance(exc, SchemaError) else ""

