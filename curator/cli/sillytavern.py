"""`curator sillytavern install|export`: put the Memory Curator extension where SillyTavern finds it."""

import shutil
import subprocess
from pathlib import Path
from typing import Annotated

import typer

from curator.cli import console
from curator.cli.base import JsonOpt, app, reported
from curator.errors import CuratorError

st_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                     help="The SillyTavern extension: install it into SillyTavern, or export it as a git repository.")
app.add_typer(st_app, name="sillytavern")
NAME = "memory-curator"  # the extension's folder name in SillyTavern


def _source() -> Path:
    from curator.paths import sillytavern_extension

    try:
        return sillytavern_extension()
    except FileNotFoundError as exc:
        raise CuratorError(str(exc),
                           "Reinstall memory-curator, or copy integrations/sillytavern/ from a checkout.") from None


def _copy(target: Path, force: bool) -> None:
    if target.exists():
        if not force:
            raise CuratorError(f"{target} already exists", "Pass --force to replace it (an update).")
        shutil.rmtree(target)
    shutil.copytree(_source(), target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


@st_app.command("install")
@reported
def install(
    sillytavern: Annotated[Path, typer.Argument(help="SillyTavern's folder (the one holding server.js).")],
    user: Annotated[str, typer.Option(help="SillyTavern's user whose extensions folder gets it.")] = "default-user",
    force: Annotated[bool, typer.Option(help="Replace an installed copy (an update).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Copy the extension into SillyTavern's third-party extensions (`data/<user>/extensions/memory-curator`);
    reload SillyTavern's page afterwards."""
    root = sillytavern.expanduser()
    if not (root / "server.js").is_file():
        raise CuratorError(f"{root} is not SillyTavern's folder (no server.js)", "Give the folder you start it in.")
    users = root / "data"
    if not (users / user).is_dir():
        raise CuratorError(f"SillyTavern has no user folder {users / user}",
                           "Start SillyTavern once (it makes it), or name the user with --user.")
    target = users / user / "extensions" / NAME
    target.parent.mkdir(exist_ok=True)
    _copy(target, force)
    if as_json:
        console.print_json({"installed": str(target)})
    else:
        console.out.print(f"installed the Memory Curator extension in {target}; reload SillyTavern's page")


@st_app.command("export")
@reported
def export(
    folder: Annotated[Path, typer.Argument(help="Where to write it (a new folder, best named memory-curator).")],
    force: Annotated[bool, typer.Option(help="Replace the folder if it exists.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Write the extension as a git repository: paste its path into SillyTavern's Extensions > Install extension."""
    target = folder.expanduser().resolve()
    _copy(target, force)
    if shutil.which("git") is None:
        raise CuratorError("git is not installed; the folder was written but is no repository",
                           "Install git (SillyTavern's Install extension needs it too), or copy the folder into "
                           "SillyTavern's data/default-user/extensions/ yourself.")
    git = ["git", "-c", "user.name=memory-curator", "-c", "user.email=memory-curator@localhost",
           "-c", "init.defaultBranch=main"]
    for step in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "Memory Curator extension"]):
        subprocess.run([*git, *step], cwd=target, check=True, capture_output=True)
    if as_json:
        console.print_json({"repository": str(target)})
    else:
        console.out.print(f"wrote {target} (a git repository): in SillyTavern, Extensions > Install extension, "
                          f"paste {target}")
