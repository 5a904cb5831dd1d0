"""Render prompt templates. Templates use `$name` / `${name}` placeholders (string.Template), so JSON and
braces in a template need no escaping; a placeholder left without a value is an error, never blank text."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from string import Template

TEMPLATE_DIR = "templates"


class PromptError(KeyError):
    """A template is missing or a placeholder has no value."""


def template_names() -> list[str]:
    folder = resources.files(__package__).joinpath(TEMPLATE_DIR)
    return sorted(p.name.rsplit(".", 1)[0] for p in folder.iterdir() if p.name.endswith(".md"))


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
    path = resources.files(__package__).joinpath(TEMPLATE_DIR, f"{name}.md")
    if not path.is_file():
        raise PromptError(f"no prompt template {name!r}; known: {', '.join(template_names())}")
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
