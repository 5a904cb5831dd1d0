"""The `curator` command: a plain `chats` or `show` is answered by `quick.py` without loading typer, everything
else goes to typer's app (`main.py`)."""

import os
import sys


def main() -> None:
    # One OpenBLAS thread unless the user chose: numpy's start-up costs 0.1 CPU-s less (the second thread spins while
    # it starts), and nothing the command runs is a matrix product large enough to gain from two. Set before numpy
    # loads; a library user's process is left as it is.
    if not any(os.environ.get(name) for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")):
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    from curator.cli.quick import run

    code = run(sys.argv[1:])
    if code is None:
        from curator.cli.main import main as full

        full()
        return
    sys.exit(code)
