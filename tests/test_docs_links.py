"""The README, docs/ and bench/README.md link to pages and sections that exist, and the repository files they name
in backticks exist: moving a section out of the README (issue 33) must not leave a dangling link behind."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md"]
LINK = re.compile(r"\]\(([^)\s]+)\)")
NAMED = re.compile(r"`((?:curator|tests|bench|docs|examples|schemas|prompts|tools|integrations|studies)/"
                   r"[\w/.\-]+\.(?:py|md|json|jsonl|yaml|npz))`")
pytestmark = pytest.mark.no_store  # no store involved: SQLite pass only


def _prose(page: Path) -> str:
    return re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    titles = re.findall(r"^#+ (.+)$", _prose(page), re.M)
    return {re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-") for title in titles}


@pytest.mark.parametrize("page", [p for p in PAGES if p.is_file()], ids=lambda p: str(p.relative_to(ROOT)))
def test_links_and_named_files_resolve(page):
    text = _prose(page)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no such section")
    broken += [f"`{name}`: no such file" for name in NAMED.findall(text) if not (ROOT / name).exists()]
    assert broken == []
