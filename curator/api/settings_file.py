"""The data directory's `config.yaml` as the panel and `curator settings` change it: a merge patch (RFC 7396) applied
to the file's own data (so what the file does not say keeps its defaults), validated as a whole before anything is
written, the previous file kept as `config.yaml.bak`, the new one written atomically.

API keys are never written: a profile names the environment variable that holds its key, and the view of the
settings says only whether that variable is set. The embedder, the vector server and the store are read at start:
a change of those is refused here (edit the file and restart)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from curator.api.merge_patch import merge_patch
from curator.errors import CuratorError
from curator.settings import CONFIG_FILENAME, TASKS, Settings, load_settings
from curator.textfile import load_yaml

AT_START = ("embedding", "vectors_url", "store")  # read when the service starts; not changed while it runs


def read_raw(data_dir: Path) -> dict[str, Any]:
    path = data_dir / CONFIG_FILENAME
    if not path.exists():
        return {}
    import yaml  # here, not at import: most data directories have no config.yaml

    try:
        data = load_yaml(path.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise CuratorError(f"{path}: not valid YAML ({exc})", "Fix the file by hand, or restore config.yaml.bak.") \
            from None
    if not isinstance(data, dict):
        raise CuratorError(f"{path}: expected a mapping of settings")
    return data


def view(data_dir: Path, running: Settings) -> dict[str, Any]:
    """What the global settings page shows: the file's own data, the settings in effect (defaults filled in,
    profiles without keys, whether each key variable is set), every task's profile."""
    profiles = {name: {**p.model_dump(mode="json"), "key_set": bool(os.environ.get(p.api_key_env))}
                for name, p in running.profiles.items()}
    return {"file": str(data_dir / CONFIG_FILENAME), "config": read_raw(data_dir),
            "effective": {**running.model_dump(mode="json", exclude={"profiles"}), "profiles": profiles},
            "tasks": {task: running.tasks.get(task, "default") for task in TASKS},
            "at_start": list(AT_START)}


def update(data_dir: Path, patch: dict[str, Any], running: Settings | None = None) -> Settings:
    """Apply `patch` to config.yaml and return the settings it now gives. Refuses (changing nothing) a result
    that does not validate, a profile that carries a key, and a change of what is read at start."""
    if not isinstance(patch, dict):
        raise CuratorError("a settings change is a JSON object (a merge patch of config.yaml)")
    for name in AT_START:
        if name in patch:
            raise CuratorError(f"{name} is read when the service starts and cannot be changed while it runs",
                               f"Edit {CONFIG_FILENAME} in the data directory and restart.")
    for name, profile in (patch.get("profiles") or {}).items():
        if isinstance(profile, dict) and any(k in profile for k in ("api_key", "key")):
            raise CuratorError(f"profiles.{name}: API keys are never stored",
                               "Name the environment variable that holds the key (api_key_env).")
    raw = read_raw(data_dir)
    data = merge_patch(raw, patch)
    try:
        settings = Settings.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise CuratorError(f"settings.{'.'.join(map(str, err['loc']))}: {err['msg']}") from None
    for task, profile in settings.tasks.items():
        if profile not in settings.profiles and not (profile == "default" and os.environ.get("CURATOR_MODEL")):
            raise CuratorError(f"tasks.{task}: no model profile {profile!r}", "Add the profile first.")
    path = data_dir / CONFIG_FILENAME
    data_dir.mkdir(parents=True, exist_ok=True)
    if path.exists():
        (data_dir / (CONFIG_FILENAME + ".bak")).write_bytes(path.read_bytes())
    import yaml  # here, not at import (above)

    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    tmp.replace(path)
    return load_settings(data_dir)
