"""The memory panel: plain HTML, CSS and JavaScript (ES modules) served by `curator serve` at /panel.

No build step and nothing fetched from elsewhere: the files under `static/` ship inside the wheel as they are.
The page itself holds no memory; every piece of data it shows comes from the API with the service's bearer token,
which the panel asks for (or reads from `/panel/#token=...`) and keeps in the tab's session storage."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).parent / "static"
PANEL_PATH = "/panel"


def mount_panel(app: FastAPI) -> None:
    """Serve the panel's files at /panel/ (and redirect /panel there, so relative paths resolve)."""

    @app.get(PANEL_PATH, include_in_schema=False)
    def panel_root() -> RedirectResponse:
        return RedirectResponse(PANEL_PATH + "/")

    @app.get("/", include_in_schema=False)
    def site_root() -> RedirectResponse:  # a browser pointed at the service lands on the panel
        return RedirectResponse(PANEL_PATH + "/")

    app.mount(PANEL_PATH, StaticFiles(directory=STATIC_DIR, html=True), name="panel")
