"""A throwaway PostgreSQL cluster for the tests (and .ci/run): initdb in a temporary folder, started on a Unix socket
there and on a free 127.0.0.1 port, as an unprivileged user (PostgreSQL refuses to run as root: when we are root,
the Debian `postgres` user runs it). Tuned for tests only: no fsync, no synchronous commit.

    python tests/pg_cluster.py start DIR   # prints the URL
    python tests/pg_cluster.py stop DIR
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
from pathlib import Path

PASSWORD = "curator-test"  # host connections need it (scram), so a wrong password is refused for real
TEST_SETTINGS = ["fsync=off", "synchronous_commit=off", "full_page_writes=off", "max_connections=300",
                 "shared_buffers=64MB", "listen_addresses=127.0.0.1"]


def binaries() -> Path | None:
    """The newest installed PostgreSQL's bin directory (Debian's layout), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _as_owner() -> list[str]:
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "postgres"], check=True)
    return ["runuser", "-u", "postgres", "--"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(folder: Path) -> str:
    """Create and start a cluster in `folder`; returns its URL (password included: a test cluster's)."""
    bin_dir = binaries()
    if bin_dir is None:
        raise RuntimeError("no PostgreSQL binaries (apt-get install postgresql)")
    folder.mkdir(parents=True, exist_ok=True)
    owner = _as_owner()
    if owner:
        shutil.chown(folder, "postgres")
        folder.chmod(0o700)
    (folder / "pw").write_text(PASSWORD)
    if owner:
        shutil.chown(folder / "pw", "postgres")
    subprocess.run([*owner, str(bin_dir / "initdb"), "-D", str(folder / "data"), "-U", "postgres",
                    "--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={folder / 'pw'}",
                    "--locale=C.UTF-8", "--encoding=UTF8", "--no-sync"], check=True, capture_output=True)
    port = _free_port()
    options = " ".join([f"-p {port}", f"-k {folder}", *(f"-c {s}" for s in TEST_SETTINGS)])
    subprocess.run([*owner, str(bin_dir / "pg_ctl"), "-D", str(folder / "data"), "-l", str(folder / "log"),
                    "-o", options, "-w", "start"], check=True, capture_output=True)
    (folder / "port").write_text(str(port))
    return f"postgresql://postgres:{PASSWORD}@127.0.0.1:{port}/postgres"


def stop(folder: Path) -> None:
    bin_dir = binaries()
    if bin_dir and (folder / "data").is_dir():
        subprocess.run([*_as_owner(), str(bin_dir / "pg_ctl"), "-D", str(folder / "data"), "-m", "immediate",
                        "-w", "stop"], capture_output=True)
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    command, where = sys.argv[1], Path(sys.argv[2])
    if command == "start":
        print(start(where))
    else:
        stop(where)
