"""`curator curate`: run the memory_curator agent for one floor of a chat (director mode from the shell)."""

import json
from typing import TYPE_CHECKING, Annotated

import typer

from curator.cli import console
from curator.cli.base import ChatOpt, JsonOpt, app, open_memory, reported, require_models
from curator.errors import CuratorError

if TYPE_CHECKING:
    from curator.extract.curator_agent import CurateResult


@app.command()
@reported
def curate(
    chat: ChatOpt,
    floor: Annotated[int | None, typer.Option("--floor", "-f", help="The reply's floor (default: the newest "
                                              "reply; with --draft, the floor the draft will take).")] = None,
    draft: Annotated[str | None, typer.Option(help="A drafted reply, not stored yet, to curate memory for.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the ops the run would commit; commit none.")] = False,
    max_requests: Annotated[int | None, typer.Option(help="Cap on model requests (default: the chat's "
                                                     "extraction.curator_max_requests, 16).")] = None,
    json_: JsonOpt = False,
) -> None:
    """Run the memory_curator agent: read the graph with tools, write through per-type tools, compact, and
    commit everything as one commit anchored at the floor."""
    require_models("curate")
    with open_memory(existing=True) as memory:
        result = memory.curate(chat, floor, draft, dry_run=dry_run, max_requests=max_requests)
    if json_:
        console.print_json(result.to_dict())
    else:
        _print(result)
    if not result.ok:
        raise CuratorError(f"the curator run for floor {result.floor} failed: {result.reason}",
                           "Nothing was committed; fix the cause (model profile, cap) and run it again.")


def _print(result: "CurateResult") -> None:
    usage = result.usage
    console.out.print(f"curator run for [bold]{console.escape(result.chat_id)}[/] floor {result.floor} "
                      f"(step {result.seq}; writable: {', '.join(result.active_types) or 'none'}) · "
                      f"{usage.calls} model requests, {usage.input_tokens}+{usage.output_tokens} tokens, "
                      f"{result.latency_ms / 1000:.1f}s")
    for call in result.tool_calls:
        mark = "[green]ok[/]" if call.ok else "[red]error[/]"
        args = json.dumps(call.args, ensure_ascii=False)
        detail = "" if call.ok else f" — {call.result.get('error')}"
        shown = f"{call.name}({args[:100]}{'…' if len(args) > 100 else ''}){detail}"
        console.out.print(f"  {mark} {console.escape(shown)}", highlight=False)
    if result.dry_run:
        console.out.print(f"dry run: {len(result.staged_ops)} op(s) would be committed")
        console.print_json(result.staged_ops)
    elif result.commit is not None:
        console.print_commit(result.commit)
    if result.reply:
        console.out.print(f"[dim]curator:[/] {console.escape(result.reply)}", highlight=False)
