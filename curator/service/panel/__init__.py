"""The memory panel: plain HTML, CSS and JavaScript (ES modules) served by `curator serve` at /panel.

No build step and nothing fetched from elsewhere: the files under `static/` ship inside the wheel as they are.
The page itself holds no memory; every piece of data it shows comes from the API with the service's bearer token,
which the panel asks for (or reads from `/panel/#token=...`) and keeps in the tab's session storage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.responses import Response
from starlette.types import Scope

STATIC_DIR = Path(__file__).parent / "static"
PANEL_PATH = "/panel"


class _PanelFiles(StaticFiles):
    """The panel's files, framed only by the service's own pages and the allowed origins (SillyTavern's page
    embeds the panel in its drawer; any other site framing it could trick clicks on it)."""

    def __init__(self, frame_ancestors: tuple[str, ...], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.policy = "frame-ancestors " + " ".join(("'self'", *frame_ancestors))

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers["Content-Security-Policy"] = self.policy
        return response


def mount_panel(app: FastAPI, frame_ancestors: tuple[str, ...] = ()) -> None:
    """Serve the panel's files at /panel/ (and redirect /panel there, so relative paths resolve); pages of
    `frame_ancestors` (the service's `--allow-origin`s) may embed it in a frame."""

    @app.get(PANEL_PATH, include_in_schema=False)
    def panel_root() -> RedirectResponse:
        return RedirectResponse(PANEL_PATH + "/")

    @app.get("/", include_in_schema=False)
    def site_root() -> RedirectResponse:  # a browser pointed at the service lands on the panel
        return RedirectResponse(PANEL_PATH + "/")

    app.mount(PANEL_PATH, _PanelFiles(tuple(frame_ancestors), directory=STATIC_DIR, html=True), name="panel")
