"""Render prompt templates. Templates use `$name` / `${name}` placeholders (string.Template), so JSON and
braces in a template need no escaping; a placeholder left without a value is an error, never blank text."""

from __future__ import annotations

import functools
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from string import Template

from curator.errors import CuratorError, NotFound

TEMPLATE_DIR = "templates"


class PromptError(CuratorError):
    """A template is missing, a placeholder has no value, or a user's template cannot stand in for the shipped one."""


class UnknownPrompt(PromptError, NotFound):
    """No template of that name ships."""


def template_names() -> list[str]:
    """Every shipped template: Markdown templates, and the injection's labels (YAML)."""
    folder = resources.files(__package__).joinpath(TEMPLATE_DIR)
    return sorted(p.name.rsplit(".", 1)[0] for p in folder.iterdir() if p.name.endswith((".md", ".yaml")))


@functools.lru_cache(maxsize=256)
def shipped_path(name: str) -> Traversable:
    """The shipped file of template `name` (UnknownPrompt when there is none). Kept per name: the package's files do
    not move while it runs, and a recall asks for the injection's labels a dozen times (finding a package's file
    through importlib.resources took ~0.5 ms of a recall's CPU at 10k nodes; bench/README.md, "Issue 31, second
    round")."""
    folder = resources.files(__package__).joinpath(TEMPLATE_DIR)
    if len(name) > 64 or not name.replace("_", "").isalnum() or not name.isascii():  # a name, never a path
        raise UnknownPrompt(f"no prompt template {name!r}", f"Known: {', '.join(template_names())}.")
    for suffix in (".md", ".yaml"):
        path = folder.joinpath(f"{name}{suffix}")
        if path.is_file():
            return path
    raise UnknownPrompt(f"no prompt template {name!r}", f"Known: {', '.join(template_names())}.")


# name -> (file, its mtime, Template): recall renders a few templates per turn, and finding a package's file
# costs more than the rendering; an edited file is read again (its mtime changed)
_TEMPLATES: dict[str, tuple[Path, int, Template]] = {}


def template_text(name: str) -> str:
    return _template(name).template


def _template(name: str) -> Template:
    cached = _TEMPLATES.get(name)
    if cached is not None:
        try:
            if cached[0].stat().st_mtime_ns == cached[1]:
                return cached[2]
        except OSError:
            pass
    path = shipped_path(name)
    template = Template(path.read_text(encoding="utf-8"))
    if isinstance(path, Path):  # a real file (not inside a zip): its mtime says when it changes
        _TEMPLATES[name] = (path, path.stat().st_mtime_ns, template)
    return template


def render(name: str, **values: object) -> str:
    """Fill template `name` with `values`; every placeholder must be given."""
    try:
        return _template(name).substitute({k: str(v) for k, v in values.items()})
    except KeyError as exc:
        raise PromptError(f"template {name!r} needs a value for {exc.args[0]!r}") from None
