"""The package layout is the architecture: no import cycles, and each layer imports only the layers below it.

Imports are read from the source (every `import`, including those inside functions and under TYPE_CHECKING), so a
cycle hidden behind a lazy import is found too."""

from __future__ import annotations

import ast
from pathlib import Path

import curator

PACKAGE = Path(curator.__file__).resolve().parent
# In a checkout tools/, schemas/ and prompts/ sit beside the package; in a wheel, inside it.
ROOTS = {"curator": PACKAGE}
for name in ("tools", "schemas", "prompts"):
    inside = PACKAGE / name
    ROOTS[f"curator.{name}"] = inside if inside.is_dir() else PACKAGE.parent / name


def _modules() -> dict[str, Path]:
    found = {}
    for dotted, root in ROOTS.items():
        for path in root.rglob("*.py"):
            rel = path.relative_to(root).with_suffix("").parts
            if dotted == "curator" and rel[0] in ("tools", "schemas", "prompts"):
                continue
            parts = [dotted, *rel]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(module: str, path: Path) -> set[str]:
    """Project modules that `module` imports (a `from package import name` counts `package.name` when a module)."""
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.add(target)
            out |= {f"{target}.{alias.name}" for alias in node.names}
    return {name for name in out if name in MODULES and name != module}


GRAPH = {module: _imports(module, path) for module, path in MODULES.items()}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (MODULES[module].name == "__init__.py")) else "root"


def test_no_import_cycles():
    # A module's own parent packages are left out: `from curator.service.server import routes_chats` in a
    # module of that package names its sibling, not a dependency on the package's face.
    graph = {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in GRAPH.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for dep in sorted(graph[module]):
            if state.get(dep) == 1:
                cycle = stack[stack.index(dep):] + [dep]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep)
        stack.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)


FORBIDDEN = {  # a layer and the layers it must never import
    "store": {
        "llm",
        "vectors",
        "extract",
        "recall",
        "maintenance",
        "sync",
        "api",
        "service",
        "cli",
        "tools",
        "testing",
    },
    "llm": {"vectors", "extract", "recall", "maintenance", "sync", "api", "service", "cli", "tools", "testing"},
    "vectors": {"extract", "recall", "maintenance", "sync", "api", "service", "cli", "tools", "testing"},
    "tools": {"extract", "api", "service", "cli", "maintenance", "sync", "testing"},
    "recall": {"extract", "maintenance", "sync", "api", "service", "cli", "tools", "testing"},
    "extract": {"recall", "maintenance", "api", "service", "cli", "testing"},
    "maintenance": {"api", "service", "cli", "recall", "testing"},
    "sync": {"api", "service", "cli", "recall", "testing"},
    # the library: what a program imports; front ends (service/, cli/) sit on it, never under it
    "api": {"service", "cli", "testing"},
    "service": {"cli", "testing"},
    "cli": {"testing"},
    # test doubles (scripted models, a fake OpenAI endpoint): used by tests and benchmarks, by no product code
    "testing": {"api", "service", "cli"},
    "schemas": {
        "store",
        "llm",
        "vectors",
        "extract",
        "recall",
        "maintenance",
        "sync",
        "api",
        "service",
        "cli",
        "tools",
        "testing",
    },
    "prompts": {
        "store",
        "llm",
        "vectors",
        "extract",
        "recall",
        "maintenance",
        "sync",
        "api",
        "service",
        "cli",
        "tools",
        "testing",
    },
}


def test_layers_import_only_what_lies_below():
    broken = []
    for module, deps in GRAPH.items():
        layer = _layer(module)
        for dep in deps:
            if _layer(dep) in FORBIDDEN.get(layer, set()):
                broken.append(f"{module} imports {dep}")
    assert not broken, "\n".join(sorted(broken))


def test_the_layers_are_packages():
    layers = {_layer(m) for m in MODULES}
    assert {"store", "llm", "extract", "vectors", "recall", "maintenance", "sync", "api", "service", "cli", "tools",
            "schemas", "prompts", "testing"} <= layers
    flat = sorted(m for m in MODULES if _layer(m) == "root")
    # the root keeps the package face and what every layer shares
    assert set(flat) <= {"curator", "curator.__main__", "curator.errors", "curator.settings", "curator.paths",
                         "curator.dates", "curator.maintenance_settings", "curator.textfile", "curator.aio",
                         "curator.startcache", "curator.cjk"}, flat


def test_sql_stays_in_the_store():
    """Every statement is sent from `curator/store/`: the other layers call its functions (issue 32: 78 calls sat
    in 23 modules outside it)."""
    outside = []
    for module, path in MODULES.items():
        if module == "curator.store" or module.startswith("curator.store."):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in ("execute", "executemany", "executescript"):
                outside.append(f"{module}:{node.lineno}")
    assert outside == [], outside


def test_the_files_named_in_the_code_exist():
    """A docstring or comment that names a file of this package names one that exists (issue 32 found three that
    had moved away)."""
    import re

    named = re.compile(r"(?<![\w/])curator/((?:[\w\-]+/)*[\w\-]+\.py)")
    missing = []
    for module, path in MODULES.items():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            for found in named.finditer(line):
                rel = found.group(1)
                if not (PACKAGE / rel).exists() and not (PACKAGE.parent / rel).exists():
                    missing.append(f"{module}:{number}: curator/{rel}")
    assert missing == [], missing
