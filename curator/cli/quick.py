"""The read-only commands `curator chats`, `curator show` and `curator recall`, in their plain argument forms,
answered without loading typer: typer builds a pydantic adapter per parameter and, with rich, costs about 0.2 CPU-s
before a command runs, more than a listing itself and a third of a one-shot recall at 10k nodes. `parse` accepts
only the forms below; anything else (`--help`, an unknown or misspelt option, another command) returns None and goes
to typer's app, which runs the same functions and reports usage errors as usual."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from curator.cli.session import open_memory, open_store, require_chat, run_reported, state
from curator.errors import CuratorError

# global options that take a value / that are flags, as typer's callback declares them (curator/cli/base.py)
_GLOBAL_VALUES = {"--data": "data", "--store": "store"}
_GLOBAL_FLAGS = {"--debug": "debug"}
# per command: options that take a value, and flags (their keyword arguments)
_COMMANDS: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "chats": ({}, {"--json": "json_"}),
    "show": ({"--chat": "chat", "-c": "chat"}, {"--archived": "archived", "--json": "json_"}),
    # recall's text options (--turns and --budget, a file and a number, are left to typer's checks)
    "recall": ({"--chat": "chat", "-c": "chat", "--query": "query", "-q": "query", "--mode": "mode", "--at": "at"},
               {"--json": "json_"}),
}
_REQUIRED = {"show": ("chat",), "recall": ("chat",)}


def chats(json_: bool = False) -> None:
    """List the chats in the data directory."""
    from curator.cli import console

    with open_store() as store:
        rows = [{"chat": c, **store.graph(c).stats()} for c in store.chats()]
    if json_:
        console.print_json(rows)
        return
    if not rows:
        sys.stdout.write("no chats yet\n")
    for row in rows:
        sys.stdout.write(f"{row['chat']}: {row['nodes_active']} active nodes, {row['edges']} edges, "
                         f"{row['commits']} commits\n")


def show(chat: str, archived: bool = False, json_: bool = False) -> None:
    """Show a chat's memory graph."""
    from curator.cli import console

    with open_store() as store:
        graph = store.graph(chat)
        if json_:
            console.print_json({"chat": chat, "stats": graph.stats(),
                                "nodes": [n.to_dict() for n in graph.nodes(archived=None if archived else False)],
                                "edges": [e.to_dict() for e in graph.edges()]})
            return
        console.print_graph(chat, graph, store.schema_outline(chat), include_archived=archived)


def recall(chat: str, query: str | None = None, turns: Path | None = None, mode: str | None = None,
           budget: int | None = None, at: str | None = None, json_: bool = False) -> None:
    """Recall the memories for the next generation and show the injection."""
    from curator.cli import console

    if mode not in (None, "hybrid", "rag", "llm"):
        raise CuratorError(f"unknown recall mode {mode!r}", "Use --mode hybrid, rag or llm.")
    if not (query or "").strip() and turns is None:
        raise CuratorError("nothing to recall for: give --query TEXT, --turns FILE or both")
    messages = None
    if turns is not None:
        from curator.extract.chatfile import read_chat

        messages = read_chat(turns).messages
    require_chat(chat)
    with open_memory(existing=True) as memory:
        if budget is not None and budget < 1:
            raise CuratorError(f"budget {budget} is not a token count", "Give a positive number of tokens.")
        options: dict[str, Any] = {"budget_tokens": budget} if budget else {}
        if at is not None:
            options["at"] = at
        injection = memory.recall(chat, query or "", mode=mode, messages=messages, **options)
    if json_:
        console.print_json(injection.to_dict())
    else:
        console.print_injection(injection)


def parse(argv: list[str]) -> tuple[str, dict[str, object], dict[str, object]] | None:
    """(command, global options, command options) for a plain form of `chats`, `show` or `recall`; None for anything
    else."""
    options: dict[str, object] = {}
    rest = _take(argv, _GLOBAL_VALUES, _GLOBAL_FLAGS, options)
    if rest is None or not rest or rest[0] not in _COMMANDS:
        return None
    values, flags = _COMMANDS[rest[0]]
    kwargs: dict[str, object] = {}
    left = _take(rest[1:], values, flags, kwargs)
    if left != [] or any(name not in kwargs for name in _REQUIRED.get(rest[0], ())):
        return None
    return rest[0], options, kwargs


def _take(argv: list[str], values: dict[str, str], flags: dict[str, str], into: dict[str, object]) -> list[str] | None:
    """Read the leading options of `argv` into `into`; the rest (from the first word that is no option), or None
    when an option is malformed (missing value, a value given to a flag, a repeat)."""
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        name, eq, value = argv[i].partition("=")
        if eq and not name.startswith("--"):  # click reads `-c=x` as the value "=x": leave it to typer
            return None
        if name in flags and not eq and flags[name] not in into:
            into[flags[name]] = True
        elif name in values and values[name] not in into:
            if not eq:
                i += 1
                if i == len(argv) or argv[i].startswith("-"):
                    return None
                value = argv[i]
            if not value:
                return None
            into[values[name]] = value
        else:
            return None
        i += 1
    return argv[i:]


def run(argv: list[str]) -> int | None:
    """Run a plain `chats`, `show` or `recall` and return its exit code; None when `argv` is anything else."""
    parsed = parse(argv)
    if parsed is None:
        return None
    command, options, kwargs = parsed
    state.update(data=options.get("data"), debug=bool(options.get("debug")), store=options.get("store"))
    json_, archived = bool(kwargs.get("json_")), bool(kwargs.get("archived"))
    if command == "chats":
        return run_reported(lambda: chats(json_=json_))
    if command == "recall":
        text = {k: str(v) for k, v in kwargs.items()}
        return run_reported(lambda: recall(text["chat"], query=text.get("query"), mode=text.get("mode"),
                                           at=text.get("at"), json_=json_))
    return run_reported(lambda: show(str(kwargs["chat"]), archived=archived, json_=json_))
