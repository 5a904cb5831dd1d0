"""CLI commands of the service and of history safety: `curator serve`, `curator mcp`, `curator sync`,
`curator rebuild`."""

import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from curator.cli import console
from curator.cli.base import ChatOpt, JsonOpt, app, open_memory, reported
from curator.errors import CuratorError, MissingExtra

if TYPE_CHECKING:
    from fastapi import FastAPI

    from curator.service.server import ServiceConfig


@app.command()
@reported
def serve(
    host: Annotated[str, typer.Option(help="Address to bind; anything but loopback needs a token.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8787,
    token: Annotated[str | None, typer.Option(envvar="CURATOR_TOKEN", help="Bearer token clients must send.")] = None,
    upstream: Annotated[str | None, typer.Option(envvar="CURATOR_UPSTREAM",
                                                 help="The proxy's real model: an OpenAI-compatible base URL.")] = None,
    upstream_key_env: Annotated[str | None, typer.Option(help="Variable holding the upstream's API key "
                                                              "(default: pass the client's own key on).")] = None,
    max_body_mb: Annotated[float, typer.Option(help="Largest request body, in MB.")] = 8.0,
    rate: Annotated[int, typer.Option(help="Requests per minute per client address (0 = no limit).")] = 0,
    workers: Annotated[int, typer.Option(min=1, max=64, help="Service processes over the one store (they share "
                                                             "the port, the jobs and the chats).")] = 1,
    job_threads: Annotated[int, typer.Option(min=1, max=64, help="Threads running jobs in each process (chats "
                                                                 "in parallel).")] = 4,
    allow_host: Annotated[list[str] | None, typer.Option(help="Also answer for this Host name (repeatable; "
                                                               "loopback names and --host always; * = any).")] = None,
    allow_origin: Annotated[list[str] | None, typer.Option(help="Also accept requests from this web origin and let "
                                                                 "it read the answers and frame the panel: "
                                                                 "SillyTavern's, for its Memory Curator extension, "
                                                                 "e.g. http://127.0.0.1:8000 (repeatable).")] = None,
    proxy_max_rollback: Annotated[int, typer.Option(help="Cap the floors a proxy request may roll back without the "
                                                         "X-Curator-Allow-Rollback header (-1 = no cap: what a "
                                                         "request reverts is kept and can be undone).")] = -1,
    upstream_timeout: Annotated[float, typer.Option(min=1, max=86400, help="Seconds the proxy waits for the "
                                                                            "upstream model.")] = 600.0,
    quiet: Annotated[bool, typer.Option("--quiet", help="No request log: only warnings and errors on stderr.")] = False,
) -> None:
    """Run the HTTP service (API under /api/v1, docs at /docs) and the OpenAI-compatible proxy (/v1)."""
    from curator.service.bind import LOOPBACK_NAMES, check_bind, check_port_free
    from curator.service.request_log import RequestLog, configure
    from curator.store.location import redact

    check_bind(host, token)
    check_port_free(host, port)  # first: a busy port is one line, before the banner and before anything loads
    try:
        import uvicorn
    except ImportError as exc:
        raise MissingExtra("server", "the HTTP service") from exc
    memory = open_memory()  # creates and migrates the store once, before any worker starts

    def config() -> "ServiceConfig":
        from curator.service.server import ServiceConfig  # MissingExtra without the `server` extra
        from curator.service.server.request_guard import SitePolicy
        from curator.service.server.security import Limits

        return ServiceConfig(token=token, limits=Limits(max_body_bytes=int(max_body_mb * 1024 * 1024),
                                                        rate_per_minute=rate),
                             workers=job_threads, upstream=upstream, upstream_key_env=upstream_key_env,
                             site=SitePolicy(host, tuple(allow_host or ()), tuple(allow_origin or ())),
                             proxy_max_rollback=None if proxy_max_rollback < 0 else proxy_max_rollback,
                             upstream_timeout=upstream_timeout, request_log=not quiet)

    configure(quiet)  # one line per request on stderr (and notices such as a chat the proxy created)
    store = redact(memory.store.url) if memory.store.url else "SQLite in the data directory"
    banner = (f"memory-curator service on http://{host}:{port} (data: {memory.data_dir}; store: {store}; "
              f"token {'required' if token else 'off, loopback only'}; proxy upstream: {upstream or 'none'}")

    def warn_if_no_extraction() -> None:  # visible at start, not only in each failed job
        from curator.service.proxy_upstream import extraction_status

        extraction = extraction_status(memory, upstream, upstream_key_env)
        if extraction["warning"]:
            console.err.print(f"[bold {'yellow' if extraction['ok'] else 'red'}]warning:[/] "
                              f"{console.escape(extraction['warning'])}", highlight=False)
    if workers > 1:
        from curator.service.server.workers import OPTIONS_ENV, options_json

        os.environ[OPTIONS_ENV] = options_json(str(memory.data_dir), memory.store.url, config())
        console.err.print(f"{banner}; {workers} processes)")
        warn_if_no_extraction()
        memory.close()
        uvicorn.run("curator.service.server.workers:app_factory", factory=True, workers=workers, host=host,
                    port=port, log_level="warning")
        return
    # Listen at once: health answers while the app loads in a thread (curator/service/early.py), and every other
    # request waits for it. A failure to load stops the server and is reported like any error.
    from curator.service.early import EarlyApp, load_in_background

    early = EarlyApp((*LOOPBACK_NAMES, host, *(allow_host or ())))
    server = uvicorn.Server(uvicorn.Config(early if quiet else RequestLog(early), host=host, port=port,
                                           log_level="warning"))
    early.on_error = lambda _error: setattr(server, "should_exit", True)

    def load() -> "FastAPI":
        from curator.service.server import create_app

        warn_if_no_extraction()  # after the banner, while the app loads: the port is already answering
        return create_app(memory, replace(config(), request_log=False))  # logged around the early app already

    console.err.print(banner + ")")
    load_in_background(early, load)
    try:
        server.run()
    finally:
        memory.close()
    if early.error is not None:
        raise early.error


@app.command()
@reported
def mcp(
    allow_writes: Annotated[bool, typer.Option("--allow-writes", help="Also expose node create/edit/delete.")] = False,
    http: Annotated[bool, typer.Option("--http", help="Serve streamable HTTP on loopback instead of stdio.")] = False,
    port: Annotated[int, typer.Option(help="Port for --http.")] = 8788,
) -> None:
    """Run the MCP server: read-only graph tools and recall (write tools only with --allow-writes)."""
    from curator.service.mcp_server import build_mcp

    with open_memory() as memory:
        server = build_mcp(memory, allow_writes=allow_writes)
        if http:
            server.run("streamable-http", host="127.0.0.1", port=port)
        else:
            server.run("stdio")


@app.command()
@reported
def sync(
    file: Annotated[Path, typer.Argument(help="The chat as it is now: SillyTavern .jsonl or plain JSONL.")],
    chat: ChatOpt,
    start: Annotated[int, typer.Option(help="The file holds the chat's floors from this one on (a tail).")] = 0,
    extract: Annotated[bool, typer.Option("--extract/--no-extract", help="Extract what is due afterwards.")] = True,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask before reverting many commits.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Follow an edited chat: roll memory back from the first changed floor, then re-extract from there. What it
    reverts is kept (`curator history`, `curator undo`); on a terminal it asks before reverting more than a few
    commits (`--yes` skips the question). A file with no chat message is refused."""
    from curator.cli.guards import confirm
    from curator.extract.chatfile import chat_messages

    messages = chat_messages(file)  # a file cut to its header by a crash would empty the chat: refused
    with open_memory() as memory:
        floor, count = memory.history.would_revert(chat, messages, start)
        if count > memory.settings.history.ask_above:
            confirm(f"The file changes chat {chat!r} from floor {floor}: revert {count} commits (every one anchored "
                    f"there or later)? They are kept: `curator undo --chat {chat}` brings them back.", yes or json_)
        if extract:
            memory.index  # noqa: B018 - index as you go: each re-extracted step's commit embeds its nodes
        report = memory.sync(chat, messages, start=start)
        results = memory.extract_due(chat) if extract and report.due else []
        data = {**report.to_dict(), "extracted": [r.to_dict() for r in results],
                "still_due": [f for f in report.due if f not in {r.floor for r in results if r.ok}]}
    if json_:
        console.print_json(data)
    else:
        if report.rebuilt:
            console.err.print(f"[bold yellow]memory was rebuilt:[/] {console.escape(report.rebuild_reason or '')}")
        elif report.dirty_floor is not None:
            console.out.print(f"{chat}: floor {report.dirty_floor} {report.reason}: {len(report.reverted)} commits "
                              f"rolled back ({report.shelved} shelved), {len(report.restored)} restored from the "
                              "swipe shelf")
            if report.batch is not None:
                console.out.print(f"kept as batch #{report.batch}: `curator undo --chat {chat} {report.batch}` "
                                  "brings it back (memory and floors)", highlight=False)
        else:
            console.out.print(f"{chat}: no change below the new floors")
        calls = sum(r.usage.calls for r in results)
        console.out.print(f"extracted {sum(r.ok for r in results)} steps ({calls} LLM calls); "
                          f"{len(data['still_due'])} still due")
    failed = next((r for r in results if not r.ok), None)
    if failed:
        raise CuratorError(f"extraction of floor {failed.floor} failed: {failed.reason}",
                           "Nothing was committed for that floor; run `curator sync` again to retry.")


@app.command()
@reported
def rebuild(
    chat: ChatOpt,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Clear the chat's memory and extract every floor again (costs one extraction per due step)."""
    if not yes and not json_ and os.isatty(0):
        typer.confirm(f"Clear all memory of chat {chat!r} and extract it again?", abort=True)
    with open_memory(existing=True) as memory:
        memory.chat(chat)
        result = memory.rebuild(chat)
    if json_:
        console.print_json(result)
        return
    console.out.print(f"{chat}: {result['commits_removed']} commits cleared, {result['steps_done']} steps extracted "
                      f"({result['usage']['calls']} LLM calls, "
                      f"{result['usage']['input_tokens']}+{result['usage']['output_tokens']} tokens)")
    if result["failed"]:
        raise CuratorError(f"extraction of floor {result['failed']['floor']} failed: {result['failed']['reason']}",
                           "Run `curator sync` on the chat file, or `curator rebuild` again, to continue.")
