"""`curator store migrate`: copy the store to another engine (SQLite data directory <-> PostgreSQL); `curator store
check [--repair]`: its integrity."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from curator.cli import console
from curator.cli.base import JsonOpt, app, reported
from curator.cli.session import state
from curator.errors import CuratorError

if TYPE_CHECKING:
    from curator.store.store import Store

store_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                        help="The store itself: check or repair it, copy it to PostgreSQL or back to a SQLite data "
                             "directory.")
app.add_typer(store_app, name="store")


def _open(spec: str | None, role: str, must_exist: bool) -> "Store":
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


@store_app.command("check")
@reported
def store_check(
    repair: Annotated[bool, typer.Option("--repair", help="Keep a copy of the file, rebuild its indexes and replay "
                                                          "every chat's commit log into the graph tables.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Check the SQLite store's integrity (what every write checks first); `--repair` mends what is derived (indexes,
    the graph tables) and says when only a backup or an export can help."""
    from curator.store import integrity

    store = _open(None, "store", must_exist=True)
    try:
        if store.engine != "sqlite":
            raise CuratorError("the store is on PostgreSQL: its server keeps its integrity",
                               "`curator store check` is for a SQLite data directory.")
        result = integrity.repair(store) if repair else {"before": integrity.problems(store.conn)}
    finally:
        store.close()
    if json_:
        console.print_json({"ok": not result.get("after", result["before"]), **result})
    elif not result["before"]:
        console.out.print("the store passed its integrity check" + (" (a copy was kept anyway: "
                                                                     f"{result['backup']})" if repair else ""))
    elif not repair:
        for line in result["before"]:
            console.out.print(f"  {line}", highlight=False)
        raise CuratorError("the store failed its integrity check: it takes no writes",
                           "Run `curator store check --repair` (it keeps a copy of the file first), or restore from a "
                           "backup or an export.")
    elif result["after"]:
        raise CuratorError(f"the repair did not mend the store ({result['after'][0]}); the damaged file is kept as "
                           f"{result['backup']}", "Restore from a backup, or import an export into a new data "
                           "directory (`curator --data NEW_DIR import EXPORT.json --chat ID`).")
    else:
        console.out.print(f"repaired: indexes rebuilt and {result['chats']} chat(s) replayed from their commit logs; "
                          f"the damaged file is kept as {result['backup']}")
