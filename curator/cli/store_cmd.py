"""`curator store migrate`: copy the store to another engine (SQLite data directory <-> PostgreSQL)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from curator.cli import console
from curator.cli.base import JsonOpt, app, reported, state
from curator.errors import CuratorError

if TYPE_CHECKING:
    from curator.store.store import Store

store_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                        help="The store itself: copy it to PostgreSQL or back to a SQLite data directory.")
app.add_typer(store_app, name="store")


def _open(spec: str | None, role: str, must_exist: bool) -> Store:
    """A store named on the command line: a postgresql:// URL, a data directory (SQLite), or None for the
    store of --data (with its --store / CURATOR_STORE / config.yaml)."""
    from curator.paths import data_dir
    from curator.store.db import store_exists
    from curator.store.location import POSTGRES_SCHEMES, redact, store_url
    from curator.store.store import Store

    here = data_dir(state["data"])
    if spec is None:
        where, url = here, store_url(here, state["store"])
    elif spec.startswith(POSTGRES_SCHEMES):
        where, url = here, spec
    else:
        where, url = Path(spec.removeprefix("sqlite:").removeprefix("//")).expanduser(), None
    if must_exist and not store_exists(where, url):
        raise CuratorError(f"no memory store in {redact(url) if url else where} ({role})",
                           "Nothing was created or copied. Check --from / --data.")
    return Store(where, store=url or "sqlite")


@store_app.command("migrate")
@reported
def store_migrate(
    to: Annotated[str, typer.Option("--to", help="The target: postgresql://user:password@host:port/db, or a data "
                                                 "directory for a SQLite store.")],
    from_: Annotated[str | None, typer.Option("--from", help="The source, in the same forms (default: the store of "
                                                             "--data / --store).")] = None,
    replace: Annotated[bool, typer.Option("--replace", help="Overwrite a target that already holds chats.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Copy every chat (commit log, graph, messages, swipe shelf, usage and extraction logs) and the jobs to another
    store in one transaction, then verify per-chat counts and commit-log and graph digests on both sides."""
    from curator.store.transfer import location, migrate_store

    source = _open(from_, "source", must_exist=True)
    try:
        target = _open(to, "target", must_exist=False)
        try:
            if not json_:
                console.err.print(f"copying {location(source)} -> {location(target)}")

            def progress(table: str, done: int, total: int) -> None:
                if not json_ and (done == total or done % 10_000 == 0):
                    console.err.print(f"  {table}: {done}/{total} rows")

            report = migrate_store(source, target, replace=replace, progress=progress)
        finally:
            target.close()
    finally:
        source.close()
    if json_:
        console.print_json(report.to_dict())
        return
    console.out.print(f"copied {len(report.chats)} chat(s), {sum(report.rows.values())} rows; verified: counts, "
                      "commit logs and graphs equal on both sides"
                      + (f" ({report.replaced} chat(s) of the target replaced)" if report.replaced else ""))
    console.out.print("vectors are not copied: the target re-embeds on first use (`curator vectors rebuild`)")
