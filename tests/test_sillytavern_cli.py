"""`curator sillytavern install` and `export`: the extension put where SillyTavern finds it (its user's extensions
folder), or written as the git repository SillyTavern's "Install extension" clones; wrong folders refused."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from test_cli import run

from curator.paths import sillytavern_extension

pytestmark = pytest.mark.no_store


def test_install_copies_the_extension_into_the_user_folder(tmp_path):
    tavern = tmp_path / "SillyTavern"
    (tavern / "data" / "default-user").mkdir(parents=True)
    (tavern / "server.js").write_text("// SillyTavern")
    answer = json.loads(run("sillytavern", "install", str(tavern), "--json").stdout)
    target = tavern / "data" / "default-user" / "extensions" / "memory-curator"
    assert answer == {"installed": str(target)}
    manifest = json.loads((target / "manifest.json").read_text())
    assert manifest["js"] == "index.js" and manifest["generate_interceptor"] == "memoryCuratorInterceptor"
    assert sorted(p.name for p in target.iterdir()) == sorted(p.name for p in sillytavern_extension().iterdir())
    again = run("sillytavern", "install", str(tavern), check=False)
    assert again.returncode == 1 and "--force" in again.stderr  # an update says so
    run("sillytavern", "install", str(tavern), "--force")
    for wrong, why in ((tmp_path, "no server.js"), (tavern, "no user folder")):
        args = ["sillytavern", "install", str(wrong)] + (["--user", "nobody"] if wrong == tavern else [])
        refused = run(*args, check=False)
        assert refused.returncode == 1 and why in refused.stderr and "Traceback" not in refused.stderr


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_export_writes_a_git_repository_to_install_from(tmp_path):
    repo = tmp_path / "memory-curator"
    run("sillytavern", "export", str(repo))
    log = subprocess.run(["git", "-C", str(repo), "ls-files"], capture_output=True, text=True, check=True).stdout
    assert {"manifest.json", "index.js", "client.js", "chat.js", "drawer.js", "settings.html", "style.css"} <= set(
        log.split())
