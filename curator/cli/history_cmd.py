"""`curator history`, `curator undo`, `curator history purge`: the trash of the commit log on the command line.

Every rollback (`curator rollback`, a sync, a proxy edit, an ingest of a changed file, a rebuild) keeps what it
reverted as a batch; `history` lists them, `undo` puts one back exactly (graph and floors), `history purge` drops
them for good."""

from typing import TYPE_CHECKING, Annotated

import typer

from curator.cli import console
from curator.cli.base import ChatOpt, JsonOpt, app, open_memory, reported
from curator.errors import CuratorError

if TYPE_CHECKING:
    from curator.api.memory import Memory

history_app = typer.Typer(rich_markup_mode=None, invoke_without_command=True,
                          help="List what rollbacks, syncs and rebuilds reverted (`curator undo` restores it).")
app.add_typer(history_app, name="history")


@history_app.callback()
@reported
def history(
    ctx: typer.Context,
    chat: Annotated[str | None, typer.Option("--chat", "-c", help="Chat id.")] = None,
    batch: Annotated[int | None, typer.Option("--batch", help="Show this batch's commits and floors.")] = None,
    json_: JsonOpt = False,
) -> None:
    """List a chat's reverted batches, newest first: what each rollback, sync, proxy edit, ingest, rebuild or
    undo took away, why and when."""
    if ctx.invoked_subcommand is not None:
        return
    if chat is None:
        raise CuratorError("which chat? give --chat ID", "`curator chats` lists them.")
    with open_memory(existing=True) as memory:
        if batch is not None:
            found, commits, floors = memory.store.trash_batch(chat, batch)
            data = {**found.to_dict(), "commits": commits,
                    "messages": None if floors is None else [
                        {"floor": found.floor + i, "role": m.role, "name": m.name, "text": m.text}
                        for i, m in enumerate(floors)]}
            if json_:
                console.print_json(data)
            else:
                console.print_batch(data)
            return
        batches = [b.to_dict() for b in memory.trash(chat)]
    if json_:
        console.print_json({"chat": chat, "batches": batches})
    else:
        console.print_trash(chat, batches)


@history_app.command("purge")
@reported
def purge(
    chat: ChatOpt,
    batch: Annotated[list[int] | None, typer.Option("--batch", help="Drop this batch (repeatable).")] = None,
    older_than: Annotated[float | None, typer.Option("--older-than", help="Drop the batches older than this "
                                                                           "many days.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Drop every batch of the chat.")] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Drop reverted batches for good: they can no longer be undone."""
    from curator.cli.guards import confirm

    if sum((bool(batch), older_than is not None, all_)) != 1:
        raise CuratorError("say what to purge: --batch ID (repeatable), --older-than DAYS or --all")
    if older_than is not None and older_than < 0:
        raise CuratorError(f"--older-than {older_than} is not a number of days")
    with open_memory(existing=True) as memory:
        memory.chat(chat)
        what = (f"batch(es) {', '.join(f'#{b}' for b in batch)}" if batch else
                f"the batches older than {older_than} days" if older_than is not None else "every reverted batch")
        confirm(f"Drop {what} of chat {chat!r} for good (they can no longer be undone)?", yes or json_)
        removed = memory.purge_trash(chat, batch, older_than)
    if json_:
        console.print_json({"chat": chat, "purged": removed})
    else:
        console.out.print(f"{chat}: {removed} reverted batch(es) purged")


@app.command()
@reported
def undo(
    chat: ChatOpt,
    batch: Annotated[int | None, typer.Argument(help="The batch to restore (`curator history --chat ID` lists "
                                                     "them; default: the newest).")] = None,
    json_: JsonOpt = False,
) -> None:
    """Restore what a rollback, sync, proxy edit, ingest or rebuild reverted: the graph and the floors exactly as
    before it. What was committed since goes to the trash as a batch of its own, so an undo can be undone."""
    with open_memory(existing=True) as memory:
        if batch is None:
            newest = memory.trash(chat)
            if not newest:
                raise CuratorError(f"nothing to undo: chat {chat!r} has no reverted batch",
                                   "Rollbacks, syncs, proxy edits and rebuilds keep what they revert; none has yet.")
            batch = newest[0].id
        result = memory.undo(chat, batch)
        due = _due(memory, chat)
    if json_:
        console.print_json({**result.to_dict(), "due": due})
        return
    floors = "" if result.messages is None else f" and {result.messages} floor(s) from floor {result.floor}"
    console.out.print(f"{chat}: batch #{result.batch} restored: {len(result.restored)} commit(s){floors}")
    if result.displaced_batch is not None:
        console.out.print(f"what it displaced ({len(result.displaced)} commit(s)) is batch #{result.displaced_batch}: "
                          f"`curator undo --chat {chat} {result.displaced_batch}` takes this undo back")
    if due:
        console.out.print(f"{len(due)} floor(s) due for extraction (from floor {due[0]}): the service extracts "
                          f"them, or `curator sync CHAT_FILE --chat {chat}`")


def _due(memory: "Memory", chat: str) -> list[int]:
    from curator.extract.extractor import due_floors

    return [f for f, _ in due_floors(memory.store, chat, memory.settings)]
