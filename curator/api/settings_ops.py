"""The settings and prompts operations of `MemoryCore` (a mixin: the state is the core's): a chat's own settings
(`chat_settings.py`), the data directory's config.yaml (`settings_file.py`), and its prompt templates."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import logging
import time

from curator.prompts import Prompts, prompts_for

if TYPE_CHECKING:
    from pathlib import Path

    from curator.recall.engine import Recaller
    from curator.settings import Settings
    from curator.store.store import Store
    from curator.sync.history import HistorySync
    from curator.vectors.index import VectorIndex

log = logging.getLogger("curator.memory")


class SettingsOps:
    if TYPE_CHECKING:  # the core's state
        store: Store
        settings: Settings
        _settings: Settings | None
        _settings_given: bool
        _config_stamp: tuple[int, int] | None
        _config_checked: float
        _index: VectorIndex | None
        _recaller: Recaller | None
        _history: HistorySync | None

        @property
        def data_dir(self) -> Path: ...

        def _use(self, settings: Settings) -> None: ...

    def chat_settings(self, chat_id: str) -> dict[str, Any]:
        """A chat's settings: its own overrides, and the settings it runs with (the overrides over config.yaml)."""
        from curator.api.chat_settings import effective

        chat = self.store.chat(chat_id)
        return {"chat": chat_id, "overrides": chat.settings, "effective": effective(self.settings, chat.settings)}

    def update_chat_settings(self, chat_id: str, patch: dict[str, Any], replace: bool = False) -> dict[str, Any]:
        """Change a chat's own settings by a merge patch (`null` removes an override; `replace`: the patch is the
        whole set); validated against the result before it is stored. Returns `chat_settings`."""
        from curator.api.chat_settings import apply

        settings = self.settings
        self.store.change_settings(chat_id, lambda current: apply(settings, current, patch, replace=replace))
        return self.chat_settings(chat_id)

    def global_settings(self) -> dict[str, Any]:
        """The data directory's settings: config.yaml's own data and the settings in effect (keys never shown)."""
        from curator.api.settings_file import view

        return view(self.data_dir, self.settings)

    def update_settings(self, patch: dict[str, Any]) -> dict[str, Any]:
        """Change config.yaml by a merge patch (validated first; the old file kept as config.yaml.bak); the new
        settings take effect at once. Returns `global_settings`."""
        from curator.api.settings_file import update

        update(self.data_dir, patch)
        if not self._settings_given:
            self._reload_settings()
        return self.global_settings()

    @property
    def prompts(self) -> Prompts:
        """The prompt templates of this data directory: its `prompts/` folder over the shipped ones."""
        return prompts_for(self.data_dir)

    # config.yaml read again when it changes (the core's `settings` property looks, once a second at most)
    def _stamp(self) -> tuple[int, int] | None:
        from curator.settings import CONFIG_FILENAME

        try:
            stat = (self.data_dir / CONFIG_FILENAME).stat()
        except OSError:
            return None
        return (stat.st_mtime_ns, stat.st_size)

    def _reload_settings(self) -> Settings:
        """config.yaml read again; returns the settings in effect (the old ones when the file is not valid)."""
        from curator.settings import load_settings
        from curator.api.settings_file import AT_START

        stamp = self._stamp()
        try:
            fresh = load_settings(self.data_dir)
        except Exception:
            if self._settings is None:
                raise
            log.warning("config.yaml changed but is not valid; the settings in effect stay", exc_info=True)
            self._config_stamp = stamp
            return self._settings
        if self._settings is not None and self._index is not None:  # read at start: kept until a restart
            kept = {name: getattr(self._settings, name) for name in AT_START}
            if any(getattr(fresh, name) != value for name, value in kept.items()):
                log.warning("config.yaml changed %s; that takes effect at the next start",
                            ", ".join(n for n in AT_START if getattr(fresh, n) != kept[n]))
            fresh = fresh.model_copy(update=kept)
        self._config_stamp = stamp
        self._config_checked = time.monotonic()
        self._use(fresh)
        return fresh

    def _spread_settings(self) -> None:
        """The settings to the parts that keep a reference to them."""
        settings = self._settings
        for part in (self._recaller, self._history):
            if part is not None and settings is not None:
                part.settings = settings
