"""Run a command line and SIGKILL it the moment it opens a file named like NAME for writing — after the
open has emptied it, before anything is written — as a kill (or a power loss) in the middle of a rewrite
would. Usage: python tests/kill_inside_write.py NAME script.py [args...]

An audit hook sees every open() of the process, so the command runs unchanged, through its own entry point.
"""

import os
import runpy
import signal
import sys


def main() -> None:
    name, script, *arguments = sys.argv[1:]

    def kill_on_write(event: str, args: tuple) -> None:
        if event != "open" or not isinstance(args[0], (str, bytes, os.PathLike)):
            return
        path, mode = os.fsdecode(args[0]), args[1]
        if name in os.path.basename(path) and isinstance(mode, str) and "w" in mode:
            os.truncate(path, 0) if os.path.exists(path) else None  # what the open is about to do
            os.kill(os.getpid(), signal.SIGKILL)

    sys.argv = [script, *arguments]
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python script.py` would have it
    sys.addaudithook(kill_on_write)
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
