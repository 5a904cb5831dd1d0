"""The `curator` command: a plain `chats` or `show` is answered by `quick.py` without loading typer, everything
else goes to typer's app (`main.py`)."""

import sys


def main() -> None:
    from curator.cli.quick import run

    code = run(sys.argv[1:])
    if code is None:
        from curator.cli.main import main as full

        full()
        return
    sys.exit(code)
