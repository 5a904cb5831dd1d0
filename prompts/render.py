"""Render prompt templates. Templates use `$name` / `${name}` placeholders (string.Template), so JSON and
braces in a template need no escaping; a placeholder left without a value is an error, never blank text."""

from __future__ import annotations

from importlib import resources
from string import Template

TEMPLATE_DIR = "templates"


class PromptError(KeyError):
    """A template is missing or a placeholder has no value."""


def template_names() -> list[str]:
    folder = resources.files(__package__).joinpath(TEMPLATE_DIR)
    return sorted(p.name.rsplit(".", 1)[0] for p in folder.iterdir() if p.name.endswith(".md"))


def template_text(name: str) -> str:
    path = resources.files(__package__).joinpath(TEMPLATE_DIR, f"{name}.md")
    if not path.is_file():
        raise PromptError(f"no prompt template {name!r}; known: {', '.join(template_names())}")
    return path.read_text(encoding="utf-8")


def render(name: str, **values: object) -> str:
    """Fill template `name` with `values`; every placeholder must be given."""
    try:
        return Template(template_text(name)).substitute({k: str(v) for k, v in values.items()})
    except KeyError as exc:
        raise PromptError(f"template {name!r} needs a value for {exc.args[0]!r}") from None
