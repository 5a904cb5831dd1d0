"""Terminal rendering for the CLI (rich): graphs, commits and schemas as tables, errors as one line + hint.

rich loads at the first use of `out` or `err`, not at import: `--json` output and the plain listings print without
it (`quick.py`: a fresh `curator chats` loads neither typer nor rich)."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text
    from curator.recall.injection import Injection
    from curator.schemas import Schema
    from curator.store.graph import Node
    from curator.store.queries import GraphView
    from curator.store.store import CommitRecord, RollbackResult

_consoles: dict[str, Console] = {}


def _console(name: str) -> Console:
    if name not in _consoles:
        from rich.console import Console

        # emoji off: ":smile:" in a chat's text prints as written (and rich's emoji table, 5 ms, stays unloaded)
        _consoles[name] = Console(soft_wrap=False, emoji=False) if name == "out" else Console(stderr=True, emoji=False)
    return _consoles[name]


def __getattr__(name: str) -> Console:
    """`console.out` (stdout) and `console.err` (stderr), each made at its first use."""
    if name in ("out", "err"):
        return _console(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _table(**options: Any) -> Table:
    from rich.table import Table

    return Table(**options)


def _plain(*cells: str) -> list[Text]:
    """Table cells as plain text: what a chat holds (titles, fields, queries) can contain brackets that rich would
    read as markup ("[/]" raised MarkupError, "[ooc: ...]" vanished)."""
    from rich.text import Text

    return [Text(cell) for cell in cells]


def escape(text: str) -> str:
    """`text` to print through rich as it is (for text from a chat, a model or the user inside markup)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def print_json(data: object) -> None:
    # Plain stdout, not rich: --json output must be byte-exact for pipes.
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2, default=str) + "\n")


def print_error(message: str, hint: str = "") -> None:
    if not sys.stderr.isatty() and not os.environ.get("FORCE_COLOR"):
        # what rich prints to a pipe or a file, without loading it (a cheap error stays cheap: issue 33)
        sys.stderr.write(f"Error: {message}\n" + (f"Hint: {hint}\n" if hint else ""))
        return
    # soft_wrap: one line however long (a command in it stays whole to copy), the terminal wraps it for the eye
    err = _console("err")
    err.print(f"[bold red]Error:[/] {escape(message)}", highlight=False, markup=True, soft_wrap=True)
    if hint:
        err.print(f"[dim]Hint:[/] {escape(hint)}", highlight=False, soft_wrap=True)


def _floors(node: Node) -> str:
    return str(node.floor_from) if node.floor_from == node.floor_to else f"{node.floor_from}-{node.floor_to}"


def _summary(node: Node, width: int = 90) -> str:
    text = " · ".join(f"{k}: {v}" for k, v in node.fields.items() if v and v != node.title)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def print_graph(chat_id: str, graph: GraphView, schema: tuple[str, list[str]], include_archived: bool = False) -> None:
    """The chat's nodes, a table per type in the schema's order (`schema`: its name and type names), and its edges."""
    stats = graph.stats()
    schema_name, type_names = schema
    out = _console("out")
    out.print(f"[bold]{escape(chat_id)}[/]  schema [cyan]{escape(schema_name)}[/]  ·  {stats['nodes_active']} active "
              f"nodes, {stats['nodes_archived']} archived, {stats['edges']} edges, {stats['commits']} commits, "
              f"{stats['messages']} messages", highlight=False)  # rich's highlighter compiles 5-10 ms of regexes
    for type_name in type_names:
        nodes = graph.nodes(type=type_name, archived=None if include_archived else False)
        if not nodes:
            continue
        table = _table(title=f"{type_name} ({len(nodes)})", title_justify="left", show_lines=False, expand=False)
        for column in ("id", "title", "lvl", "floors", "fields"):
            table.add_column(column, overflow="fold" if column == "fields" else "ellipsis",
                             no_wrap=column != "fields")
        for node in nodes:
            style = "dim" if node.archived else None
            table.add_row(*_plain(node.id, node.title, str(node.level), _floors(node), _summary(node)), style=style)
        out.print(table)
    edges = graph.edges()
    if edges:
        titles = {n.id: n.title for n in graph.nodes(archived=None)}
        table = _table(title=f"edges ({len(edges)})", title_justify="left")
        for column in ("source", "relation", "target", "strength", "floors"):
            table.add_column(column)
        for edge in edges:
            start = "" if edge.valid_from is None else edge.valid_from
            span = f"{start}-{'' if edge.valid_to is None else edge.valid_to}"
            table.add_row(*_plain(titles.get(edge.source, edge.source), edge.relation,
                                  titles.get(edge.target, edge.target), f"{edge.strength:.2f}",
                                  "" if span == "-" else span))
        out.print(table)


def print_commit(record: CommitRecord, verb: str = "committed") -> None:
    out = _console("out")
    out.print(f"{verb} commit [bold]#{record.id}[/] ({record.origin}, anchored at floor {record.anchor_floor}, "
              f"{len(record.ops)} ops)")


def print_rollback(result: RollbackResult) -> None:
    out = _console("out")
    if not result.reverted:
        out.print(f"nothing to roll back: no commit of {result.chat_id!r} is anchored at floor {result.floor} or later")
        return
    out.print(f"rolled back {len(result.reverted)} commit(s) anchored at floor >= {result.floor}: "
              + ", ".join(f"#{c.id} ({c.origin} @{c.anchor_floor})" for c in result.reverted))
    if result.reapplied:
        out.print(f"replayed {len(result.reapplied)} earlier-anchored commit(s): "
                  + ", ".join(f"#{i}" for i in result.reapplied))
    if result.dropped:
        out.print(f"[yellow]dropped {len(result.dropped)} commit(s) that built on what was rolled back:[/] "
                  + ", ".join(f"#{c.id}" for c in result.dropped))
    if result.batch is not None:
        out.print(f"kept as batch #{result.batch}: `curator undo --chat {result.chat_id} {result.batch}` brings it "
                  "back", highlight=False)


def print_trash(chat_id: str, batches: list[dict[str, Any]]) -> None:
    """A chat's reverted batches, newest first."""
    out = _console("out")
    if not batches:
        out.print(f"{escape(chat_id)}: nothing reverted (rollbacks, syncs, proxy edits and rebuilds keep what they "
                  "revert here)")
        return
    table = _table(title=f"{escape(chat_id)}: reverted batches, newest first", title_justify="left")
    for column in ("batch", "at", "why", "from floor", "commits", "floors", "what"):
        table.add_column(column, overflow="fold")
    for b in batches:
        why = b["reason"] + (f" ({b['detail']})" if b["detail"] else "")
        what = ", ".join(b["titles"]) + (" ..." if b["reverted"] and len(b["titles"]) >= 5 else "")
        table.add_row(f"#{b['id']}", b["at"][:19].replace("T", " "), escape(why), str(b["floor"]),
                      f"{b['reverted']}" + (f" (+{b['commits'] - b['reverted']} replayed)" if b["commits"] >
                                            b["reverted"] else ""),
                      "" if b["floors"] is None else str(b["floors"]), escape(what))
    out.print(table)
    out.print(f"`curator undo --chat {chat_id} N` restores batch N exactly (graph and floors); "
              f"`curator history --chat {chat_id} --batch N` shows it", highlight=False)


def print_batch(data: dict[str, Any]) -> None:
    """One batch: its commits and the floors it keeps."""
    out = _console("out")
    out.print(f"[bold]batch #{data['id']}[/] {escape(data['reason'])} at {data['at']} from floor {data['floor']}"
              + (f": {escape(data['detail'])}" if data["detail"] else ""))
    for c in data["commits"]:
        out.print(f"  commit #{c['id']} ({c['origin']} @{c['anchor_floor']}, {len(c['ops'])} ops) "
                  f"{escape(c['note'])}", highlight=False)
    for m in data["messages"] or []:
        text = " ".join(m["text"].split())
        out.print(f"  floor {m['floor']} {m['role']}{' ' + escape(m['name']) if m['name'] else ''}: "
                  f"{escape(text[:100])}{'…' if len(text) > 100 else ''}", highlight=False)


def print_injection(injection: Injection, title: str | None = None) -> None:
    """The injection as three tables: the persistent block, the recalled block, and what was left out and why."""
    out = _console("out")
    data = injection.to_dict()
    tokens = data["tokens"]
    out.print(f"[bold]{escape(title or injection.query)}[/]", highlight=False)
    out.print(f"  {len(injection.persistent)} persistent + {len(injection.recalled)} recalled nodes, "
              f"{tokens['total']}/{tokens['budget']} tokens ({tokens['tokenizer']}), mode {injection.mode}"
              + (", reused" if injection.reused else ""))
    sections = (
        (
            "persistent",
            f"persistent block ({tokens['persistent']} tokens)",
            ("node", "floors", "tokens"),
            [(f"{c.node.title} ({c.node.type})", _floors(c.node), str(c.tokens)) for c in injection.persistent],
        ),
        (
            "recalled",
            f"recalled block ({tokens['recalled']} tokens)",
            ("node", "floors", "score", "why"),
            [
                (f"{c.node.title} ({c.node.type})", _floors(c.node), f"{c.score:.2f}", c.reason)
                for c in injection.recalled
            ],
        ),
        (
            "left out",
            f"left out ({data['left_out_count']})",
            ("node", "from", "why"),
            [(f"{row['title']} ({row['type']})", row["block"], row["why"]) for row in data["left_out"]],
        ),
    )
    for _name, heading, columns, rows in sections:
        out.print(f"\n[bold]{heading}[/]")
        if not rows:
            out.print("  (none)")
            continue
        table = _table(show_header=True, box=None, pad_edge=False)
        for column in columns:
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(*_plain(*row))
        out.print(table)
    if data["left_out_count"] > len(data["left_out"]):
        out.print(f"  ... and {data['left_out_count'] - len(data['left_out'])} more (--json lists the first ones)")


def print_schema(schema: Schema) -> None:
    out = _console("out")
    out.print(f"[bold]{escape(schema.name)}[/] v{schema.version}: {escape(schema.description)}")
    table = _table(show_lines=True)
    for column in ("type", "identity", "every", "inject", "compression", "fields"):
        table.add_column(column, overflow="fold")
    for spec in schema.types.values():
        inject = spec.always_inject
        comp = spec.compression
        table.add_row(
            spec.name, spec.identity, str(spec.extract_every),
            (f"yes (max {inject.max_per_type or 'the default cap'}, within {inject.max_floor_distance or '∞'} floors)"
             if inject.enabled else "no"),
            (f"fan-in {comp.fan_in}, threshold {comp.threshold}, keep {comp.keep_recent_leaves}, depth {comp.max_depth}"
             if comp.mode == "hierarchical" else "none"),
            ", ".join(f.name + ("*" if f.required else "") for f in spec.fields),
        )
    out.print(table)
    out.print("relations: " + ", ".join(r.name + (" (sym)" if r.symmetric else "") for r in schema.relations))
