"""Both install modes give working imports of every package and find every data file.

The project is installed, without its dependencies, into throw-away virtual environments that see this
environment's packages (through a .pth file), once as a wheel (`pip install .`) and once editable (`pip install -e
.`)."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECK = r"""
import json, subprocess, sys
from pathlib import Path
import curator
from curator import tools, schemas, prompts
from curator.paths import example_file
from curator.schemas import load_preset, preset_names
from curator.prompts import render, template_names
from curator.service.panel import STATIC_DIR
exe = Path(sys.executable).with_name("curator")
demo = json.loads(subprocess.run([str(exe), "--data", sys.argv[1], "demo", "--json"], check=True,
                                 capture_output=True, text=True).stdout)
print(json.dumps({
    "files": {m.__name__: m.__file__ for m in (curator, tools, schemas, prompts)},
    "presets": preset_names(), "types": list(load_preset("bme").types),
    "templates": template_names(), "example": str(example_file("lantern_road.jsonl")),
    "demo_nodes": demo["stats"]["nodes_active"],
    "panel": sorted(str(p.relative_to(STATIC_DIR)) for p in STATIC_DIR.rglob("*") if p.is_file()),
}))
"""

pytestmark = pytest.mark.skipif(not (ROOT / "pyproject.toml").exists(), reason="needs the source tree")


@pytest.mark.slow
@pytest.mark.parametrize("editable", [False, True], ids=["wheel", "editable"])
def test_install_mode(tmp_path, editable):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    # Let the new environment see this one's packages (the dependencies), after its own. The name sorts
    # after an editable install's own .pth file, so the editable source tree comes first.
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    parent = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "zz_parent_env.pth").write_text("\n".join(sorted(parent)) + "\n")
    target = ["-e", str(ROOT)] if editable else [str(ROOT)]
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", *target], check=True, capture_output=True, text=True, cwd=tmp_path)
    proc = subprocess.run([str(python), "-c", CHECK, str(tmp_path / "data")], capture_output=True, text=True,
                          cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    for name, file in found["files"].items():
        inside_repo = Path(file).resolve().is_relative_to(ROOT)
        assert inside_repo == editable, (name, file)  # really the install we made, not another copy
    assert found["presets"] == ["bme", "default"] and "pov_memory" in found["types"]
    assert {"extract_system", "extract_user", "compact", "maintain_compress", "maintain_consolidate"} <= set(
        found["templates"]
    )
    assert Path(found["example"]).is_file()
    assert found["demo_nodes"] == 18
    # the panel's files ship as package data: the page, its style and every script it imports
    assert {"index.html", "panel.css", "js/app.js", "js/graph_layout.js", "js/graph_view.js"} <= set(found["panel"])


@pytest.mark.slow
def test_the_wheel_adds_one_import_name(tmp_path):
    """tools/, schemas/ and prompts/ ship inside `curator`; no other top-level package collides with the user's."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    (wheel,) = tmp_path.glob("memory_curator-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top == {"curator"}
    assert {"curator/tools/__init__.py", "curator/schemas/presets/default.yaml",
            "curator/prompts/templates/extract_system.md", "curator/examples/lantern_road.jsonl",
            "curator/integrations/sillytavern/manifest.json", "curator/integrations/sillytavern/index.js"} <= set(names)
