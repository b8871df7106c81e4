"""Run a server command so that it never outlives the Python process that started it.

`python -m labs_lib.engines.guard -- vllm serve …` starts the command in this process group (the
engine puts the guard in a session of its own) and then:
- exits with the command's status when the command exits;
- forwards SIGTERM/SIGINT/SIGHUP to the whole group and exits;
- kills the whole group when its own parent dies (SIGKILL of a notebook kernel included), which
  `vllm serve` and its EngineCore processes would not notice by themselves.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

KILL_GRACE_S = 5.0
PARENT_PID_VARIABLE = "LABS_PARENT_PID"  # set by Engine.start to its own PID


def expected_parent() -> int:
    """The PID that must stay this process's parent: the one that started the engine, not whatever
    parent there is by the time this runs (the starter may already be dead and this re-parented)."""
    return int(os.environ.get(PARENT_PID_VARIABLE, "") or os.getppid())


def _stop_group(sig: int = signal.SIGTERM) -> None:
    pgid = os.getpgrp()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group signal reaches this process too
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        print("usage: python -m labs_lib.engines.guard -- COMMAND [ARGS…]", file=sys.stderr)
        return 2
    command = argv[argv.index("--") + 1 :]
    parent = expected_parent()
    if os.getppid() != parent:
        print("guard: parent process is gone before the server started", file=sys.stderr, flush=True)
        return 1
    child = subprocess.Popen(command)  # same process group as this guard

    def on_signal(signum, frame):
        _stop_group(signal.SIGTERM)
        deadline = time.monotonic() + KILL_GRACE_S
        while child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if child.poll() is None:
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os._exit(0)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    while True:
        code = child.poll()
        if code is not None:
            return code
        if os.getppid() != parent:
            print("guard: parent process is gone; stopping the server", file=sys.stderr, flush=True)
            on_signal(signal.SIGTERM, None)
        time.sleep(0.2)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
