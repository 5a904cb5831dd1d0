"""Where things live: the data directory and the bundled example files."""

from __future__ import annotations

import os
from pathlib import Path

ENV_DATA = "CURATOR_DATA"
ENV_CACHE = "CURATOR_CACHE_DIR"


def data_dir(given: str | Path | None = None) -> Path:
    """The data directory: `given`, else $CURATOR_DATA, else $XDG_DATA_HOME/memory-curator
    (~/.local/share/memory-curator)."""
    if given:
        return Path(given).expanduser()
    if os.environ.get(ENV_DATA):
        return Path(os.environ[ENV_DATA]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "memory-curator"


def cache_dir() -> Path | None:
    """Where a process keeps what it would otherwise rebuild at every start (`curator/startcache.py`):
    $CURATOR_CACHE_DIR (empty: nowhere), else $XDG_CACHE_HOME/memory-curator (~/.cache/memory-curator)."""
    given = os.environ.get(ENV_CACHE)
    if given is not None:
        return Path(given).expanduser() if given.strip() else None
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "memory-curator"


def example_file(name: str) -> Path:
    """A file of the bundled example. The wheel carries them inside the package (`curator/examples`); an
    editable install or a source checkout finds them in the repository's `examples/` folder."""
    from importlib import resources  # here, not at import: 0.01 s (tempfile, zipfile) a `curator show` needs not

    packaged = resources.files(__package__).joinpath("examples", name)
    if packaged.is_file():
        return Path(str(packaged))
    checkout = Path(__file__).resolve().parent.parent / "examples" / name
    if checkout.is_file():
        return checkout
    raise FileNotFoundError(f"example file {name!r} is not installed")


def sillytavern_extension() -> Path:
    """The SillyTavern extension's folder (`manifest.json`, `index.js`, ...). The wheel carries it inside the package
    (`curator/integrations/sillytavern`); a checkout or an editable install finds it in `integrations/sillytavern/`."""
    from importlib import resources

    packaged = Path(str(resources.files(__package__).joinpath("integrations", "sillytavern")))
    if (packaged / "manifest.json").is_file():
        return packaged
    checkout = Path(__file__).resolve().parent.parent / "integrations" / "sillytavern"
    if (checkout / "manifest.json").is_file():
        return checkout
    raise FileNotFoundError("the SillyTavern extension is not installed with this package")
