"""The `curator` command line: the library, one command per operation, `--json` everywhere."""

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import typer

from curator.cli import console, quick
from curator.cli.base import ChatOpt, JsonOpt, app, open_memory, reported, require_channel_models
from curator.errors import CuratorError

if TYPE_CHECKING:
    from curator.extract.channel import FloorResult
    from curator.store.exchange import ImportMode

schema_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                         help="List, show and validate schemas.")
app.add_typer(schema_app, name="schema")
vectors_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                          help="The vector index: rebuild and status.")
app.add_typer(vectors_app, name="vectors")


@app.command()
@reported
def init(
    chat: Annotated[str | None, typer.Option("--chat", "-c", help="Also create this chat.")] = None,
    schema: Annotated[str, typer.Option(help="Preset name or schema file for the new chat.")] = "default",
    json_: JsonOpt = False,
) -> None:
    """Create the data directory (and optionally a chat)."""
    with open_memory() as memory:
        created = memory.create_chat(chat, schema).id if chat else None
        if json_:
            console.print_json({"data_dir": str(memory.data_dir), "chat": created})
            return
        console.out.print(f"data directory ready: {memory.data_dir}")
        if created:
            console.out.print(f"created chat [bold]{console.escape(created)}[/] with schema {schema}")


@app.command()
@reported
def chats(json_: JsonOpt = False) -> None:
    """List the chats in the data directory."""
    quick.chats(json_)


@app.command()
@reported
def show(
    chat: ChatOpt,
    archived: Annotated[bool, typer.Option("--archived", help="Include archived nodes.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Show a chat's memory graph."""
    quick.show(chat, archived, json_)


@app.command()
@reported
def export(
    chat: ChatOpt,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to this file (default: stdout).")] = None,
    fmt: Annotated[
        str, typer.Option("--format", help="graph (memory-curator/graph) | worldinfo (SillyTavern)")
    ] = "graph",
) -> None:
    """Export a chat's graph as memory-curator/graph JSON (no vectors) or as a SillyTavern World Info file."""
    if fmt not in ("graph", "worldinfo"):
        raise CuratorError(f"unknown export format {fmt!r}", "Use --format graph or --format worldinfo.")
    from curator.store.exchange import dumps

    with open_memory(existing=True) as memory:
        text = dumps(memory.export(chat) if fmt == "graph" else memory.world_info(chat))
    if output is None:
        sys.stdout.write(text)
        return
    tmp = output.with_name(output.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(output)  # never leave a half-written export behind
    console.err.print(f"exported {chat} to {output}")


@app.command("import")
@reported
def import_(
    file: Annotated[Path, typer.Argument(help="A memory-curator/graph JSON file.")],
    chat: ChatOpt,
    mode: Annotated[str, typer.Option(help="restore | bind_latest | bind_floor")] = "restore",
    floor: Annotated[int | None, typer.Option(help="Target floor for bind_floor.")] = None,
    max_bytes: Annotated[int | None, typer.Option("--max-bytes", help="Largest file accepted.")] = None,
    json_: JsonOpt = False,
) -> None:
    """Import a graph file into a chat as one commit (restore, bind_latest or bind_floor)."""
    if mode not in ("restore", "bind_latest", "bind_floor"):
        raise CuratorError(f"unknown import mode {mode!r}", "Use restore, bind_latest or bind_floor.")
    with open_memory() as memory:
        record = memory.import_(chat, file, mode=cast("ImportMode", mode), floor=floor, max_bytes=max_bytes)
        if json_:
            console.print_json({"commit": record.id, "anchor_floor": record.anchor_floor, "ops": len(record.ops)})
        else:
            console.print_commit(record, "imported as")


@app.command()
@reported
def rollback(
    chat: ChatOpt,
    floor: Annotated[int, typer.Option(help="Revert every commit anchored at this floor or later.")],
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Roll a chat's memory back to how it was before `floor` (asks first when it reverts more than a few
    commits on a terminal; `--yes` skips the question)."""
    from curator.cli.guards import confirm_rollback

    with open_memory(existing=True) as memory:
        confirm_rollback(memory, chat, floor, assume_yes=yes or json_)
        result = memory.rollback(chat, floor)
    if json_:
        console.print_json({"floor": floor, "reverted": [c.id for c in result.reverted],
                            "reapplied": result.reapplied, "dropped": [c.id for c in result.dropped],
                            "batch": result.batch})
    else:
        console.print_rollback(result)


@schema_app.command("list")
@reported
def schema_list(json_: JsonOpt = False) -> None:
    """List the bundled schema presets."""
    from curator.schemas import load_schema, preset_names

    names = preset_names()
    if json_:
        console.print_json([{"name": n, "types": list(load_schema(n).types)} for n in names])
        return
    for name in names:
        console.out.print(f"{name}: {', '.join(load_schema(name).types)}")


@schema_app.command("show")
@reported
def schema_show(
    ref: Annotated[str, typer.Argument(help="Preset name or schema file.")] = "default",
    fmt: Annotated[str, typer.Option("--format", help="table | yaml | json")] = "table",
    json_: JsonOpt = False,
) -> None:
    """Show a schema's types and settings."""
    from curator.schemas import dump_schema, load_schema

    schema = load_schema(ref)
    if json_ or fmt == "json":
        sys.stdout.write(dump_schema(schema, "json") + "\n")
    elif fmt == "yaml":
        sys.stdout.write(dump_schema(schema, "yaml"))
    else:
        console.print_schema(schema)


@schema_app.command("validate")
@reported
def schema_validate(
    path: Annotated[Path, typer.Argument(help="A schema YAML/JSON file.")], json_: JsonOpt = False
) -> None:
    """Check a schema file; every problem is reported with its file, type and field."""
    from curator.schemas import SchemaError, load_schema

    try:
        schema = load_schema(path)
    except SchemaError as exc:
        if json_:
            console.print_json({"valid": False, "issues": [vars(i) for i in exc.issues]})
            raise typer.Exit(1) from None
        raise
    if json_:
        console.print_json({"valid": True, "name": schema.name, "types": list(schema.types)})
    else:
        console.out.print(f"{path}: valid schema {schema.name!r} with types {', '.join(schema.types)}")


@app.command()
@reported
def ingest(
    file: Annotated[Path, typer.Argument(help="A SillyTavern .jsonl chat or a JSONL of {role, name, content}.")],
    chat: ChatOpt,
    schema: Annotated[str, typer.Option(help="Preset or schema file, for a new chat.")] = "default",
    limit: Annotated[int | None, typer.Option(help="Extract at most this many steps now.")] = None,
    json_: JsonOpt = False,
) -> None:
    """Replay a chat file floor by floor, extracting memory as a live chat would (resumable)."""
    from curator.extract.chatfile import chat_messages  # not ingest: a bad file is told before any LLM code loads

    # Before anything is created: the file must be a chat, and the writing channel needs its model (unless
    # `--limit 0` asks to store the messages only).
    chat_messages(file)
    if limit != 0:
        require_channel_models()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with open_memory() as memory, Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("steps"),
        TimeRemainingColumn(), TextColumn("{task.fields[cost]}"), console=console.err, disable=json_,
    ) as progress:
        task = None  # the bar appears with the first step, not as an empty "0/?" before an error
        totals = {"calls": 0, "tokens": 0}
        # Index as you go: with the index open, each step's commit embeds its new nodes (and the messages of their
        # sources), so no later recall pays for the whole chat; the bar counts what was embedded.
        index = memory.index if limit != 0 else None

        def on_step(result: "FloorResult", done: int, due: int) -> None:
            nonlocal task
            if task is None:
                task = progress.add_task(f"ingest {chat}", total=due, cost="")
            totals["calls"] += result.usage.calls
            totals["tokens"] += result.usage.input_tokens + result.usage.output_tokens
            progress.update(task, completed=done, total=due,
                            cost=f"floor {result.floor} · {totals['calls']} LLM calls · {totals['tokens']} tokens"
                                 + (f" · {index.embedded_total} embedded" if index is not None else ""))

        try:
            report = memory.ingest(chat, file, schema=schema, on_step=on_step, limit=limit)
        except KeyboardInterrupt:
            progress.stop()
            console.err.print("interrupted: every finished step is saved; run the same command to continue")
            raise typer.Exit(130) from None
    if json_:
        console.print_json(report.to_dict())
        return
    data = report.to_dict()
    if report.rolled_back_from is not None:
        console.out.print(f"the chat changed from floor {report.rolled_back_from}: memory rolled back to before it")
    console.out.print(f"{chat}: {data['floors']} floors, {data['steps_done']}/{data['steps_due']} extraction steps "
                      f"in {data['seconds']:.1f}s · {data['usage']['calls']} LLM calls, "
                      f"{data['usage']['input_tokens']}+{data['usage']['output_tokens']} tokens")
    if report.failed:
        raise CuratorError(f"extraction of floor {report.failed.floor} failed: {report.failed.reason}",
                           "Nothing was committed for that floor; fix the cause and run the same command again.")


@app.command()
@reported
def usage(chat: ChatOpt, json_: JsonOpt = False) -> None:
    """LLM calls, tokens and latency spent on a chat, and its failed extraction steps."""
    with open_memory(existing=True) as memory:
        data = memory.usage(chat)
    if json_:
        console.print_json(data)
        return
    for task, row in data["usage"].items():
        console.out.print(f"{task}: {row['calls']} calls ({row['failed_calls']} failed), {row['input_tokens']} in + "
                          f"{row['output_tokens']} out tokens, {row['latency_ms'] / 1000:.1f}s")
    if data["failed_steps"]:
        console.out.print(f"{len(data['failed_steps'])} extraction step(s) failed and are not extracted yet "
                          "(a step fails on a failed call, or on output that stayed invalid after its retries):")
    for step in data["failed_steps"]:
        tries = f", {step['attempts']} attempts" if step.get("attempts", 1) > 1 else ""
        console.out.print(f"  [yellow]failed[/] floor {step['floor']} (seq {step['seq']}, {step['calls']} calls"
                          f"{tries}): {console.escape(step['reason'])}", highlight=False)


@app.command()
@reported
def recall(
    chat: ChatOpt,
    query: Annotated[str | None, typer.Option("--query", "-q", help="The user's message being answered.")] = None,
    turns: Annotated[
        Path | None,
        typer.Option(
            "--turns",
            help="The recent turns (SillyTavern .jsonl or JSONL of {role, name, content}), oldest first: "
            "the query is built from them; without --query the last user message is the one answered.",
        ),
    ] = None,
    mode: Annotated[str | None, typer.Option(help="hybrid (default) | rag | llm")] = None,
    budget: Annotated[int | None, typer.Option(help="Token budget for both blocks.")] = None,
    at: Annotated[str | None, typer.Option(help="Recall over the memory as it was at this story time ('day 5', a "
                                                "date, a floor).")] = None,
    json_: JsonOpt = False,
) -> None:
    """Recall the memories for the next generation and show the injection: the persistent block, the recalled
    block and what was left out and why."""
    quick.recall(chat, query, turns, mode, budget, at, json_)


@vectors_app.command("rebuild")
@reported
def vectors_rebuild(
    chat: ChatOpt,
    full: Annotated[bool, typer.Option("--full", help="Re-embed every node.")] = False,
    floors: Annotated[str | None, typer.Option(help="Re-embed the nodes of a floor range, e.g. 10-40.")] = None,
    json_: JsonOpt = False,
) -> None:
    """Re-embed what is missing or stale (a changed embedding profile makes it a full rebuild)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    span = _floor_range(floors) if floors else None
    with open_memory(existing=True) as memory, Progress(
        TextColumn("[bold]embedding"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), console=console.err,
        disable=json_,
    ) as progress:
        task = progress.add_task("embed", total=None)
        try:
            report = memory.rebuild_vectors(chat, full=full, floors=span, progress=lambda done, total: progress.update(
                task, completed=done, total=total))
        except KeyboardInterrupt:  # what was written is saved batch by batch (`VectorIndex._checkpoint`)
            progress.stop()
            console.err.print(f"interrupted: the vectors written so far are kept; `curator vectors rebuild --chat "
                              f"{chat}` (without --full) goes on from there", highlight=False)
            raise typer.Exit(130) from None
    if json_:
        console.print_json(report.to_dict())
        return
    console.out.print(f"{chat}: {report.mode} sync: {report.embedded} embedded, {report.updated_metadata} updated, "
                      f"{report.deleted} deleted, {report.unchanged} unchanged")
    for node_id, error in report.failed.items():
        console.out.print(f"[yellow]failed[/] {console.escape(f'{node_id}: {error}')}")


@vectors_app.command("status")
@reported
def vectors_status(chat: ChatOpt, json_: JsonOpt = False) -> None:
    """How much of the chat is indexed, and with which embedding profile."""
    with open_memory(existing=True) as memory:
        memory.store.chat(chat)
        data = memory.index.status(chat)
    if json_:
        console.print_json(data)
    else:
        # a profile key is provider:model:dimension; without a dimension it would end in a bare colon
        made, configured = (str(p).rstrip(":") if p else "nothing yet" for p in (data["profile"],
                                                                                  data["current_profile"]))
        staged = f"; {data['staged']} writes staged for Chroma's next batch" if data["staged"] else ""
        console.out.print(f"{chat}: {data['indexed']}/{data['nodes']} nodes indexed with {made} "
                          f"(configured: {configured}){staged}")


def _floor_range(text: str) -> tuple[int, int]:
    try:
        start, _, end = text.partition("-")
        return int(start), int(end or start)
    except ValueError:
        raise CuratorError(f"bad floor range {text!r}", "Write it as A-B, e.g. 10-40.") from None


def main() -> None:
    app()


# The other command modules register their commands on `app` when imported (after it is complete).
from curator.cli import curate as cli_curate, maintain as cli_maintain, serve as cli_serve  # noqa: E402, F401
from curator.cli import history_cmd as cli_history, settings_cmd as cli_settings, store_cmd as cli_store  # noqa: E402, F401
from curator.cli import demo as cli_demo, sillytavern as cli_sillytavern  # noqa: E402, F401
from curator.cli import story_cmd as cli_story  # noqa: E402, F401

if __name__ == "__main__":
    main()
