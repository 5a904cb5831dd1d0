"""`curator settings` and `curator prompts`: the panel's settings and prompt editor on the command line.

    curator settings show [--chat ID] [--json]
    curator settings set recall.budget_tokens 900 [--chat ID]     # a value is read as YAML: 900, true, null, [1, 2]
    curator settings unset recall.budget_tokens [--chat ID]       # back to config.yaml's (or the default)
    curator prompts list | show NAME [--shipped] | diff NAME | set NAME FILE | reset NAME
"""

from pathlib import Path
from typing import Annotated, Any

import typer

from curator.cli import console
from curator.cli.base import JsonOpt, app, open_memory, reported
from curator.errors import CuratorError

settings_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                           help="Show and change settings: a chat's own, or the data directory's (config.yaml).")
prompts_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                          help="The prompt templates: your versions (the data directory's prompts/ folder), the "
                               "diff against the shipped text, reset.")
app.add_typer(settings_app, name="settings")
app.add_typer(prompts_app, name="prompts")
ChatOrGlobal = Annotated[str | None, typer.Option("--chat", "-c", help="A chat's own settings (default: config.yaml).")]


def _patch(path: str, value: object) -> dict[str, Any]:
    keys = path.split(".")
    if not all(keys):
        raise CuratorError(f"not a setting path: {path!r}", "Write it as section.name, e.g. recall.budget_tokens.")
    patch: dict[str, Any] = {}
    node = patch
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    return patch


def _change(chat: str | None, patch: dict[str, Any], json_: bool) -> None:
    with open_memory() as memory:
        result = memory.update_chat_settings(chat, patch) if chat else memory.update_settings(patch)
    if json_:
        console.print_json(result)
    else:
        console.out.print(f"saved: {result['overrides'] if chat else result['config']}", markup=False)


@settings_app.command("show")
@reported
def settings_show(chat: ChatOrGlobal = None, json_: JsonOpt = False) -> None:
    """The settings in effect (a chat's: its own over config.yaml's) and what is set explicitly."""
    with open_memory(existing=bool(chat)) as memory:
        result = memory.chat_settings(chat) if chat else memory.global_settings()
    if json_:
        console.print_json(result)
        return
    import yaml

    own = result["overrides"] if chat else result["config"]
    console.out.print(f"[bold]set {console.escape('for chat ' + chat if chat else 'in ' + result['file'])}[/]")
    console.out.print(yaml.safe_dump(own, sort_keys=False, allow_unicode=True).rstrip() if own else "(nothing)",
                      markup=False)
    console.out.print("[bold]in effect[/]")
    effective = result["effective"]
    shown = {k: effective[k] for k in ("tasks", "extraction", "recall", "maintenance") if k in effective}
    if not chat:
        shown = {"tasks": result["tasks"], "profiles": effective["profiles"], **shown}
    console.out.print(yaml.safe_dump(shown, sort_keys=False, allow_unicode=True).rstrip(), markup=False)


@settings_app.command("set")
@reported
def settings_set(path: Annotated[str, typer.Argument(help="e.g. recall.budget_tokens, extraction.channel")],
                 value: Annotated[str, typer.Argument(help="read as YAML: 900, true, rag, [0.7, 0.2, 0.1]")],
                 chat: ChatOrGlobal = None, json_: JsonOpt = False) -> None:
    """Set one setting (validated with the rest before it is saved)."""
    import yaml

    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError as exc:
        raise CuratorError(f"not a value: {value!r} ({exc})") from None
    if parsed is None:
        raise CuratorError("null removes a setting", f"Use `curator settings unset {path}`.")
    _change(chat, _patch(path, parsed), json_)


@settings_app.command("unset")
@reported
def settings_unset(path: Annotated[str, typer.Argument(help="e.g. recall.budget_tokens")],
                   chat: ChatOrGlobal = None, json_: JsonOpt = False) -> None:
    """Remove a setting: a chat's goes back to config.yaml's, config.yaml's to the default."""
    _change(chat, _patch(path, None), json_)


@prompts_app.command("list")
@reported
def prompts_list(json_: JsonOpt = False) -> None:
    """Every template, what it is for, and whether you have your own version."""
    with open_memory() as memory:
        prompts = memory.prompts
        rows = [prompts.info(name).to_dict() for name in prompts.names()]
    if json_:
        console.print_json({"folder": str(prompts.folder), "prompts": rows})
        return
    console.out.print(f"your versions live in {prompts.folder}")
    for row in rows:
        mark = " [bold](yours)[/]" if row["overridden"] else ""
        stale = " [yellow](the shipped text changed since)[/]" if row["shipped_changed"] else ""
        console.out.print(f"{row['name']}{mark}{stale}: {row['used_for']}")


@prompts_app.command("show")
@reported
def prompts_show(name: str,
                 shipped: Annotated[bool, typer.Option("--shipped", help="The shipped text.")] = False) -> None:
    """The text in effect (yours when you have one)."""
    with open_memory() as memory:
        text = memory.prompts.shipped(name) if shipped else memory.prompts.text(name)
    console.out.print(text, markup=False, highlight=False, end="")


@prompts_app.command("diff")
@reported
def prompts_diff(name: str) -> None:
    """A unified diff from the shipped text to yours."""
    with open_memory() as memory:
        diff = memory.prompts.diff(name)
    console.out.print(diff or f"{name}: the same as the shipped text", markup=False, highlight=False, end="")


@prompts_app.command("set")
@reported
def prompts_set(name: str, file: Annotated[Path, typer.Argument(help="The template's new text ('-' for stdin).")],
                json_: JsonOpt = False) -> None:
    """Save your version of a template (checked first: only the placeholders the shipped one gets)."""
    import sys

    text = sys.stdin.read() if str(file) == "-" else file.read_text(encoding="utf-8")
    with open_memory() as memory:
        info = memory.prompts.save(name, text).to_dict()
    console.print_json(info) if json_ else console.out.print(
        f"saved {name}" if info["overridden"] else f"{name}: the same as the shipped text, no override kept")


@prompts_app.command("reset")
@reported
def prompts_reset(name: str) -> None:
    """Drop your version: the shipped template is in effect again."""
    with open_memory() as memory:
        memory.prompts.reset(name)
    console.out.print(f"{name}: the shipped text again")
