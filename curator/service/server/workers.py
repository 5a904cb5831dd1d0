"""`curator serve --workers N`: N service processes over one store, behind one listening socket (uvicorn starts
the workers and restarts one that dies). uvicorn builds each worker's app by importing `app_factory`, so the
options `serve` parsed travel to the workers in the environment (`OPTIONS_ENV`, JSON; the token too, as it would
in $CURATOR_TOKEN).

What makes several processes safe lives elsewhere: the store (commits per chat under a lock every process
honours), the chat writer locks (`store/chat_locks.py`) and the shared jobs queue (`store/job_queue.py`).
Process-local limits stay per process: `--rate` applies in each worker, and each worker runs `job_threads` jobs.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict

from fastapi import FastAPI

from curator.api.memory import Memory
from curator.service.server.app import ServiceConfig, create_app
from curator.service.server.request_guard import SitePolicy
from curator.service.server.security import Limits

OPTIONS_ENV = "CURATOR_SERVE_OPTIONS"


def options_json(data_dir: str, store: str | None, config: ServiceConfig) -> str:
    """What a worker needs to build the same service as a single `serve` process would."""
    site = config.site
    return json.dumps({
        "data": str(data_dir), "store": store, "token": config.token, "limits": asdict(config.limits),
        "workers": config.workers, "upstream": config.upstream, "upstream_key_env": config.upstream_key_env,
        "site": {"bind_host": site.bind_host, "allowed_hosts": list(site.allowed_hosts),
                 "allowed_origins": list(site.allowed_origins)},
        "proxy_max_rollback": config.proxy_max_rollback, "upstream_timeout": config.upstream_timeout,
        "job_lease": config.job_lease, "request_log": config.request_log})


def app_factory() -> FastAPI:
    """The app of one worker process (uvicorn calls this with `factory=True`)."""
    raw = os.environ.get(OPTIONS_ENV)
    if not raw:
        raise RuntimeError(f"{OPTIONS_ENV} is not set: start workers with `curator serve --workers N`")
    options = json.loads(raw)
    site = options["site"]
    config = ServiceConfig(token=options["token"], limits=Limits(**options["limits"]), workers=options["workers"],
                           upstream=options["upstream"], upstream_key_env=options["upstream_key_env"],
                           site=SitePolicy(site["bind_host"], tuple(site["allowed_hosts"]),
                                           tuple(site["allowed_origins"])),
                           proxy_max_rollback=options["proxy_max_rollback"],
                           upstream_timeout=options["upstream_timeout"], job_lease=options["job_lease"],
                           request_log=options.get("request_log", False))
    from curator.service.request_log import configure

    configure(quiet=not config.request_log)
    return create_app(Memory(options["data"], store=options["store"]), config)
