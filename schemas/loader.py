"""Load schemas from the bundled presets or a user's YAML/JSON file, reporting every error by file, type and field."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from curator.schemas.model import Schema

PRESET_DIR = "presets"
MAX_SCHEMA_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class SchemaIssue:
    """One problem in a schema: where it is and what is wrong."""

    source: str
    type: str | None
    field: str | None
    message: str

    def __str__(self) -> str:
        where = [self.source]
        if self.type:
            where.append(f"type {self.type!r}")
        if self.field:
            where.append(f"field {self.field!r}")
        return f"{', '.join(where)}: {self.message}"


class SchemaError(ValueError):
    """A schema could not be loaded; `issues` lists every problem found."""

    def __init__(self, issues: list[SchemaIssue]) -> None:
        self.issues = issues
        super().__init__("\n".join(str(i) for i in issues))


def preset_names() -> list[str]:
    """Names of the schema presets shipped with the package."""
    folder = resources.files(__package__).joinpath(PRESET_DIR)
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_preset(name: str) -> Schema:
    """Load a bundled preset by name (`default`, `bme`)."""
    if name not in preset_names():
        raise SchemaError(
            [SchemaIssue(f"preset {name!r}", None, None, f"no such preset; known: {', '.join(preset_names())}")]
        )
    text = resources.files(__package__).joinpath(PRESET_DIR, f"{name}.yaml").read_text(encoding="utf-8")
    return parse_schema(text, source=f"preset {name}")


def load_schema(ref: str | Path) -> Schema:
    """Load a schema from a preset name or a path to a YAML/JSON file."""
    path = Path(ref)
    if isinstance(ref, str) and not path.suffix and ref in preset_names():
        return load_preset(ref)
    if not path.exists():
        raise SchemaError([SchemaIssue(str(ref), None, None, "no such file and no preset of that name")])
    raw = path.read_bytes()
    if len(raw) > MAX_SCHEMA_BYTES:
        raise SchemaError([SchemaIssue(str(path), None, None, f"file is larger than {MAX_SCHEMA_BYTES} bytes")])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SchemaError([SchemaIssue(str(path), None, None, f"not UTF-8 (byte {exc.start})")]) from None
    return parse_schema(text, source=str(path))


def parse_schema(text: str, source: str = "<schema>") -> Schema:
    """Parse YAML (a superset of JSON) text into a validated Schema."""
    import yaml  # here, not at import: a stored schema is JSON, read without it

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise SchemaError([SchemaIssue(source, None, None, f"not valid YAML{where}: {exc}")]) from None
    return schema_from_data(data, source)


def schema_from_data(data: Any, source: str = "<schema>") -> Schema:
    """Validate already-parsed data into a Schema, collecting every error."""
    if not isinstance(data, dict):
        raise SchemaError([SchemaIssue(source, None, None, "the top level must be a mapping")])
    try:
        return Schema.model_validate(data)
    except ValidationError as exc:
        raise SchemaError([_issue(source, data, err) for err in exc.errors()]) from None


def _issue(source: str, data: dict[str, Any], err: Any) -> SchemaIssue:
    loc = list(err["loc"])
    type_name = field_name = None
    if len(loc) >= 2 and loc[0] == "types":
        type_name = str(loc[1])
        rest = loc[2:]
        if len(rest) >= 2 and rest[0] == "fields" and isinstance(rest[1], int):
            field_name = _field_name(data, type_name, rest[1]) or f"#{rest[1] + 1}"
            rest = rest[2:]
        if rest:
            field_name = ".".join(str(p) for p in ([field_name] if field_name else []) + rest)
    elif loc:
        field_name = ".".join(str(p) for p in loc)
    message = err["msg"].removeprefix("Value error, ")
    return SchemaIssue(source, type_name, field_name, message)


def _field_name(data: dict[str, Any], type_name: str, index: int) -> str | None:
    try:
        entry = data["types"][type_name]["fields"][index]
        return entry.get("name") if isinstance(entry, dict) else None
    except (KeyError, IndexError, TypeError):
        return None


def dump_schema(schema: Schema, fmt: str = "yaml") -> str:
    """Serialize a schema as YAML or JSON (types keyed by name)."""
    data = schema.to_data()
    if fmt == "json":
        return json.dumps(data, ensure_ascii=False, indent=2)
    import yaml  # only for YAML output

    return yaml.safe_dump(data, allow_unicode=True, sort_keys=False, width=110)
