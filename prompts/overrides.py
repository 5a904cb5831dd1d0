"""A data directory's own prompts: `<data>/prompts/<name>.md` (or `.yaml` for the injection labels) replaces the
shipped template of the same name. The folder is the user's: an upgrade of memory-curator never touches it, and
the shipped text stays readable beside it, so an override can be compared with what ships (`diff`), and told apart
when the shipped template changed after the user wrote theirs (`base`: the shipped text as it was when saved,
kept in `<data>/prompts/.base/`).

An override is checked before it is saved: it must render with the values the shipped template gets (no unknown
`$placeholder`, no stray `$`), and labels must keep every key; a file edited by hand that breaks these is reported
when it is used, naming the file."""

from __future__ import annotations

import difflib
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any

from curator.prompts.render import PromptError, shipped_path, template_names

FOLDER = "prompts"
BASE = ".base"
LABELS = "inject_labels"  # the injection's headings: a YAML mapping of short templates
USES = {  # what each template is for, as the panel and `curator prompts list` say it
    "compact": "not used by the engine (the curator's compaction instructions live in its tools)",
    "curator_system": "the memory_curator agent: its system prompt",
    "curator_user": "the memory_curator agent: the run's task (floor, types, the reply)",
    "extract_system": "the extractor: its system prompt (kept byte-stable for provider caching)",
    "extract_user": "the extractor: one step's types, known entities and turns",
    "inject_block": "the injection: one block (persistent or recalled) and its sections",
    "inject_labels": "the injection: the headings of blocks, sections and points of view",
    "inject_section": "the injection: one section (a bucket) and its lines",
    "llm_recall": "llm recall: the first round's catalogue of candidates",
    "llm_recall_more": "llm recall: a drill round's new candidates",
    "llm_rerank": "the LLM rerank stage of hybrid recall",
    "maintain_compress": "compression: fold a batch of nodes into one summary",
    "maintain_consolidate": "consolidation: keep / merge / skip each new node against its neighbours",
    "maintain_reflect": "reflection: a long-term pattern from recent memories",
    "maintain_rollup": "summaries: fold small synopses into a larger one",
    "maintain_summary": "summaries: the small synopsis of the last few extractions",
    "maintain_system": "maintenance: the system prompt of every maintenance call",
    "rewrite": "rag recall: the query rewrite",
    "plan": "the plot planner: the next beats from open threads, goals and recent events",
    "scouts": "the scouts' findings before a reply, as the director (or the curator in director mode) reads them",
}


@dataclass(frozen=True)
class PromptInfo:
    name: str
    kind: str  # "template" (Markdown with $placeholders) | "labels" (YAML mapping of templates)
    placeholders: tuple[str, ...]
    overridden: bool
    stale: bool  # the shipped text changed since the override was saved
    used_for: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "used_for": self.used_for,
                "placeholders": list(self.placeholders), "overridden": self.overridden, "shipped_changed": self.stale}


def placeholders(text: str) -> tuple[str, ...]:
    """The `$name` / `${name}` placeholders a template uses, in order of first use."""
    names = []
    for match in Template.pattern.finditer(text):
        name = match.group("named") or match.group("braced")
        if name and name not in names:
            names.append(name)
    return tuple(names)


class Prompts:
    """The templates as one data directory has them. `folder` None: the shipped ones only."""

    def __init__(self, folder: Path | None):
        self.folder = folder
        self._cache: dict[str, tuple[int, Template | dict[str, Any]]] = {}  # name -> (override's mtime, parsed)
        self._lock = threading.Lock()
        self._files: dict[tuple[Path, str], Path] = {}  # (folder, name) -> the override's path, worked out once

    # ---- reading ---------------------------------------------------------------------------------------------
    def names(self) -> list[str]:
        return template_names()

    def shipped(self, name: str) -> str:
        return shipped_path(name).read_text(encoding="utf-8")

    def _file(self, name: str) -> Path | None:
        if self.folder is None:
            return None
        path = self._files.get((self.folder, name))
        if path is None:
            path = self._files[(self.folder, name)] = self.folder / shipped_path(name).name
        return path

    def override(self, name: str) -> str | None:
        path = self._file(name)
        try:
            return path.read_text(encoding="utf-8") if path is not None else None
        except FileNotFoundError:
            return None

    def text(self, name: str) -> str:
        """The text in effect: the override when there is one, else the shipped template."""
        found = self.override(name)
        return found if found is not None else self.shipped(name)

    def info(self, name: str) -> PromptInfo:
        shipped = self.shipped(name)
        override = self.override(name)
        base = self._read(self.folder / BASE / shipped_path(name).name) if self.folder else None
        kind = "labels" if name == LABELS else "template"
        return PromptInfo(name, kind, _label_placeholders(shipped) if kind == "labels" else placeholders(shipped),
                          override is not None, override is not None and base is not None and base != shipped,
                          USES.get(name, ""))

    def diff(self, name: str) -> str:
        """A unified diff from the shipped text to the one in effect ('' when they are the same)."""
        lines = difflib.unified_diff(self.shipped(name).splitlines(keepends=True),
                                     self.text(name).splitlines(keepends=True), f"shipped/{name}", f"yours/{name}")
        return "".join(lines)

    # ---- rendering -------------------------------------------------------------------------------------------
    def template(self, name: str) -> Template:
        parsed = self._parsed(name)
        if not isinstance(parsed, Template):
            raise PromptError(f"{name!r} is a set of labels, not a template")
        return parsed

    def render(self, name: str, **values: object) -> str:
        """Fill the template in effect with `values`; every placeholder must be given."""
        template = self.template(name)
        try:
            return template.substitute({k: str(v) for k, v in values.items()})
        except KeyError as exc:
            raise PromptError(f"template {name!r}{self._where(name)} needs a value for {exc.args[0]!r}") from None
        except ValueError as exc:
            raise PromptError(f"template {name!r}{self._where(name)}: {exc}") from None

    def labels(self) -> dict[str, Any]:
        """The injection's headings (a nested mapping of short templates)."""
        parsed = self._parsed(LABELS)
        assert isinstance(parsed, dict)
        return parsed

    def label(self, *path: str, **values: object) -> str:
        node: object = self.labels()
        for key in path:
            node = node[key]  # type: ignore[index]
        return Template(str(node)).safe_substitute({k: str(v) for k, v in values.items()})

    def _parsed(self, name: str) -> Template | dict[str, Any]:
        path = self._file(name)
        mtime = -1
        if path is not None:
            try:
                mtime = path.stat().st_mtime_ns
            except OSError:
                mtime = -1
        cached = self._cache.get(name)
        if cached is not None and cached[0] == mtime:
            return cached[1]
        text = self.text(name) if mtime != -1 else self.shipped(name)
        parsed: Template | dict[str, Any] = (_parse_labels(text, self.shipped(name), name) if name == LABELS
                                             else Template(text))
        with self._lock:
            self._cache[name] = (mtime, parsed)
        return parsed

    def pinned(self) -> Prompts:
        """These prompts read once: each template and label the view is asked for is checked against its
        override file the first time only, so a whole injection renders with one version of each (and without
        a `stat` per heading)."""
        return _Pinned(self)

    def _where(self, name: str) -> str:
        path = self._file(name)
        return f" ({path})" if path is not None and path.exists() else ""

    # ---- writing ---------------------------------------------------------------------------------------------
    def check(self, name: str, text: str) -> None:
        """Raise PromptError when `text` cannot stand in for template `name`."""
        shipped = self.shipped(name)
        if name == LABELS:
            _parse_labels(text, shipped, name)
            return
        known = set(placeholders(shipped))
        unknown = [p for p in placeholders(text) if p not in known]
        if unknown:
            raise PromptError(f"{name}: unknown placeholder(s) {', '.join('$' + p for p in unknown)}; "
                              f"this template gets {', '.join('$' + p for p in sorted(known)) or 'none'} "
                              "(write $$ for a literal $)")
        try:
            Template(text).substitute(dict.fromkeys(known, ""))
        except ValueError as exc:
            raise PromptError(f"{name}: {exc} (write $$ for a literal $)") from None

    def save(self, name: str, text: str) -> PromptInfo:
        """Write an override (checked first). Saving the shipped text itself removes the override."""
        if self.folder is None:
            raise PromptError("these prompts have no folder of their own to save into")
        self.check(name, text)
        shipped = self.shipped(name)
        if text == shipped:
            return self.reset(name)
        path = self._file(name)
        assert path is not None
        (self.folder / BASE).mkdir(parents=True, exist_ok=True)
        _write(self.folder / BASE / path.name, shipped)
        _write(path, text)
        return self.info(name)

    def reset(self, name: str) -> PromptInfo:
        """Remove the override: the shipped template is in effect again."""
        path = self._file(name)
        if path is not None:
            path.unlink(missing_ok=True)
            (path.parent / BASE / path.name).unlink(missing_ok=True)
        self._cache.pop(name, None)
        return self.info(name)

    @staticmethod
    def _read(path: Path) -> str | None:
        try:
            return path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None


def _write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)  # a crash leaves the old file or the new one, never half of one


def _label_placeholders(text: str) -> tuple[str, ...]:
    return placeholders(text)


def _keys(node: object, prefix: str = "") -> set[str]:
    if isinstance(node, dict):
        return {k for key, value in node.items() for k in _keys(value, f"{prefix}{key}.")}
    return {prefix.rstrip(".")}



class _Pinned(Prompts):
    """`Prompts.pinned`: the same folder and cache, each name parsed (and its file checked) once."""

    def __init__(self, prompts: Prompts):
        self.folder, self._cache, self._lock = prompts.folder, prompts._cache, prompts._lock
        self._files = prompts._files
        self._seen: dict[str, Template | dict[str, Any]] = {}
        self._labels: dict[tuple[str, ...], str] = {}

    def _parsed(self, name: str) -> Template | dict[str, Any]:
        parsed = self._seen.get(name)
        if parsed is None:
            parsed = self._seen[name] = super()._parsed(name)
        return parsed

    def label(self, *path: str, **values: object) -> str:
        if values:
            return super().label(*path, **values)
        found = self._labels.get(path)
        if found is None:
            found = self._labels[path] = super().label(*path)
        return found

    def pinned(self) -> Prompts:
        return self


def _shipped_labels(shipped: str) -> dict[str, Any]:
    """The shipped labels parsed, kept in the start cache as JSON: a recall's first injection then loads no YAML
    parser (~10 ms of CPU)."""
    from curator import startcache
    from curator.textfile import load_yaml

    def parse(data: bytes) -> dict[str, Any]:
        parsed = json.loads(data)
        if not isinstance(parsed, dict):
            raise ValueError("not a mapping")
        return parsed

    return startcache.cached("labels", startcache.key(shipped),
                             lambda: json.dumps(load_yaml(shipped), ensure_ascii=False).encode(), parse)


def _parse_labels(text: str, shipped: str, name: str) -> dict[str, Any]:
    reference = _shipped_labels(shipped)
    if text == shipped:  # the shipped labels themselves: checked against nothing but themselves
        return reference
    import yaml  # here, not at import: a command that reads no labels of its own does not load it

    from curator.textfile import load_yaml

    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        raise PromptError(f"{name}: not valid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise PromptError(f"{name}: expected a mapping like the shipped one")
    missing, extra = _keys(reference) - _keys(data), _keys(data) - _keys(reference)
    if missing or extra:
        raise PromptError(f"{name}: " + "; ".join(
            part for part in (f"missing {', '.join(sorted(missing))}" if missing else "",
                              f"unknown {', '.join(sorted(extra))}" if extra else "") if part))
    known = set(placeholders(shipped))
    unknown = [p for p in placeholders(text) if p not in known]
    if unknown:
        raise PromptError(f"{name}: unknown placeholder(s) {', '.join('$' + p for p in unknown)}; "
                          f"labels may use {', '.join('$' + p for p in sorted(known))}")
    return data


_SETS: dict[Path | None, Prompts] = {}
_SETS_LOCK = threading.Lock()


def prompts_for(data_dir: Path | None) -> Prompts:
    """The prompts of a data directory (its `prompts/` folder over the shipped ones); one object per directory."""
    folder = (Path(data_dir) / FOLDER) if data_dir is not None else None
    with _SETS_LOCK:
        found = _SETS.get(folder)
        if found is None:
            found = _SETS[folder] = Prompts(folder)
        return found


SHIPPED = prompts_for(None)
