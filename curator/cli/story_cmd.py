"""`curator facts` (the memory at a point in story time) and the contradiction inbox (`curator contradictions`,
`curator resolve`)."""

import json
from typing import Annotated, Any

import typer

from curator.cli import console
from curator.cli.base import ChatOpt, JsonOpt, app, open_memory, reported


def _when(point: dict[str, Any] | None) -> str:
    if point is None:
        return "now"
    return f"{point['story_time'] or 'floor ' + str(point['floor'])}"


@app.command()
@reported
def facts(chat: ChatOpt, name: Annotated[str, typer.Argument(help="A name (or node id), e.g. Mira.")],
          at: Annotated[str, typer.Option(help="A story time the memory uses ('day 5'), a date, or a floor.")],
          json_: JsonOpt = False) -> None:
    """What a node held at a point in story time ("what did Mira carry on day 5"), and its spans of story time."""
    with open_memory(existing=True) as memory:
        found = memory.facts_at(chat, name, at)
    if json_:
        console.print_json(found)
        return
    point = found["at"]
    console.out.print(f"[bold]{name}[/] at {point['story_time'] or point['asked']} (floor {point['floor']}):")
    if not found["nodes"]:
        console.out.print("  nothing of that name held then")
    for node in found["nodes"]:
        fields = "; ".join(f"{k}: {v}" for k, v in node["fields"].items())
        console.out.print(f"  {node['title']} ({node['type']}): {fields}", markup=False)
        for span in found["spans"][node["id"]]:
            values = "; ".join(f"{k}: {v}" for k, v in span["fields"].items())
            console.out.print(f"    from {_when(span['from'])} until {_when(span['to'])}: {values}", markup=False)


@app.command()
@reported
def contradictions(chat: ChatOpt, json_: JsonOpt = False) -> None:
    """The contradiction inbox: new facts that contradict stored ones, waiting for `curator resolve`."""
    with open_memory(existing=True) as memory:
        items = memory.contradictions(chat)
    if json_:
        console.print_json({"contradictions": items})
        return
    if not items:
        console.out.print("no open contradictions")
    for item in items:
        console.out.print(f"[bold]{item['id']}[/]: new {item['new']['title']!r} ({item['new']['id']}, floors "
                          f"{item['new']['floors']}) against {item['old']['title']!r} ({item['old']['id']})")
        for side in ("new", "old"):
            text = "; ".join(f"{k}: {v}" for k, v in item[side]["fields"].items())
            console.out.print(f"    {side}: {text}", markup=False)
    if items:
        console.out.print("decide with: curator resolve --chat CHAT ID supersede|keep_both|drop")


@app.command()
@reported
def resolve(chat: ChatOpt, contradiction: Annotated[str, typer.Argument(help="The id `curator contradictions` shows.")],
            action: Annotated[str, typer.Argument(help="supersede | keep_both | drop")],
            json_: JsonOpt = False) -> None:
    """Decide a contradiction: the new fact supersedes the old one, both are kept, or the new one is dropped."""
    with open_memory(existing=True) as memory:
        record = memory.resolve_contradiction(chat, contradiction, action.replace("-", "_"))
    if json_:
        console.print_json({"commit": record.id, "anchor_floor": record.anchor_floor, "note": record.note})
    else:
        console.print_commit(record, "resolved")


@app.command()
@reported
def plan(chat: ChatOpt,
         run: Annotated[bool, typer.Option("--run", help="Ask the planner now (one model call).")] = False,
         json_: JsonOpt = False) -> None:
    """The plot planner's newest plan: the next beats it proposes (on a cadence with `planner.enabled`)."""
    with open_memory(existing=True) as memory:
        report = memory.plan(chat) if run else None
        current = memory.current_plan(chat)
    if json_:
        console.print_json({"plan": current, **({"report": report.to_dict()} if report else {})})
        return
    if report is not None:
        console.out.print(report.line(), markup=False)
    if current is None:
        console.out.print("no plan yet (turn it on: curator settings set planner.enabled true --chat CHAT)")
        return
    console.out.print(f"[bold]plan after floor {current['floor']}[/]:")
    for beat in current["beats"]:
        console.out.print(f"  - {beat}", markup=False)


@app.command()
@reported
def scout(chat: ChatOpt, message: Annotated[str, typer.Argument(help="The user's message about to be answered.")],
          speaker: Annotated[str | None, typer.Option(help="The character about to speak.")] = None,
          json_: JsonOpt = False) -> None:
    """What memory holds before the reply to MESSAGE (read-only, no model call): the scouts' findings."""
    with open_memory(existing=True) as memory:
        report = memory.scout(chat, message, speaker)
    if json_:
        console.print_json(report.to_dict())
    else:
        console.out.print(report.text, markup=False, highlight=False)


DraftOpt = Annotated[str | None, typer.Option(help="A reply not stored yet (default: the newest reply).")]
WriterOpt = Annotated[str | None, typer.Option(help="extractor | curator (default: the chat's channel).")]


@app.command()
@reported
def simulate(chat: ChatOpt,
             draft: DraftOpt = None, writer: WriterOpt = None,
             json_: JsonOpt = False) -> None:
    """What extraction (or the curator) would commit, without committing: each change it would make."""
    from curator.cli.base import require_models

    require_models("curate" if writer == "curator" else "extract")
    with open_memory(existing=True) as memory:
        result = memory.simulate(chat, draft_reply=draft, writer=writer)
    if json_:
        console.print_json(result)
        return
    console.out.print(f"simulated floor {result['floor']} ({'a draft' if result['draft'] else 'stored'}): nothing "
                      "was committed")
    for name, entry in result["writers"].items():
        state = "ok" if entry["ok"] else f"failed: {entry['reason']}"
        console.out.print(f"[bold]{name}[/] ({state}; {entry['usage']['calls']} LLM calls)")
        for change in entry["changes"]:
            console.out.print("  " + json.dumps(change, ensure_ascii=False), markup=False, highlight=False)
