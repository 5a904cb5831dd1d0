"""`curator compact | consolidate | summarize | forget | reflect | evolve`: the maintenance commands. Each prints
what changed and what it cost (LLM calls, tokens), or the same as JSON with `--json`."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer

from curator.cli import console
from curator.cli.base import ChatOpt, JsonOpt, app, open_memory, reported
from curator.errors import CuratorError

if TYPE_CHECKING:
    from curator.maintenance import MaintenanceReport

StepsOpt = Annotated[int, typer.Option("--steps", min=1, help="How many of the newest extraction steps to look at.")]
NodeOpt = Annotated[list[str] | None, typer.Option("--node", help="A node id (repeatable) instead of --steps.")]


@contextmanager
def _progress(label: str, quiet: bool) -> Iterator[Callable[[int, int], None]]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=console.err, disable=quiet, transient=True) as progress:
        task = progress.add_task(label, total=None)
        yield lambda done, total: progress.update(task, completed=done, total=total)


def _show(report: "MaintenanceReport", json_: bool) -> None:
    if json_:
        console.print_json(report.to_dict())
    else:
        console.out.print(report.line(), highlight=False, markup=False)  # titles and errors as they are
        for change in report.changes:
            console.out.print("  " + _change_line(change), highlight=False, markup=False)
        if report.skipped and report.details.get("hint"):
            console.out.print(f"  hint: {report.details['hint']}", highlight=False, markup=False)
    if report.error:
        raise CuratorError(f"{report.op} failed: {report.error}",
                           "The failed step committed nothing; fix the cause (model, network) and run it again.")


def _change_line(change: dict[str, Any]) -> str:
    action = change["action"]
    rest = {k: v for k, v in change.items() if k not in ("action", "node") and v not in ("", None, [])}
    text = ", ".join(f"{k}={v}" for k, v in rest.items())
    return f"{action} {change.get('node', '')}{': ' + text if text else ''}"


def _run(call: Callable[..., Any], json_: bool, label: str = "working") -> None:
    """`call(memory, progress)` runs the operation; the progress bar shows only for operations that report."""
    with open_memory(existing=True) as memory, _progress(label, json_) as progress:
        report = call(memory, progress)
    _show(report, json_)


@app.command()
@reported
def compact(
    chat: ChatOpt,
    type_: Annotated[list[str] | None, typer.Option("--type", help="Only this type (repeatable).")] = None,
    json_: JsonOpt = False,
) -> None:
    """Hierarchical compression: fold old nodes of every hierarchical type into summaries, level by level."""
    _run(lambda m, progress: m.compact(chat, types=type_ or None, progress=progress), json_, "compressing")


@app.command()
@reported
def consolidate(chat: ChatOpt, steps: StepsOpt = 1, node: NodeOpt = None, json_: JsonOpt = False) -> None:
    """Dedupe / merge the newest extraction's nodes against their vector neighbours (gated)."""
    _run(lambda m, _: m.consolidate(chat, steps=steps, node_ids=node or None), json_)


@app.command()
@reported
def evolve(chat: ChatOpt, steps: StepsOpt = 1, node: NodeOpt = None, json_: JsonOpt = False) -> None:
    """Force evolution of recent nodes against their neighbours (consolidation without the gate)."""
    _run(lambda m, _: m.evolve(chat, steps=steps, node_ids=node or None), json_)


@app.command()
@reported
def summarize(chat: ChatOpt, json_: JsonOpt = False) -> None:
    """Write a small summary of the extractions since the last one, then roll summaries up."""
    _run(lambda m, _: m.summarize(chat), json_)


@app.command()
@reported
def forget(
    chat: ChatOpt,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only list what would be archived.")] = False,
    json_: JsonOpt = False,
) -> None:
    """One sleep cycle: archive (never delete) the nodes whose retention value fell below the threshold."""
    _run(lambda m, _: m.forget(chat, dry_run=dry_run), json_)


@app.command()
@reported
def reflect(chat: ChatOpt, json_: JsonOpt = False) -> None:
    """Let the model write a reflection (a long-term pattern) linked to the memories it rests on."""
    _run(lambda m, _: m.reflect(chat), json_)
