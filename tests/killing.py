"""The crash tests' one move: run a script in a child process, let it work, SIGKILL it, read what it said
(and :func:`run_script`, a child run to its end, for limits a test cannot set on itself).

The child prints ``ready`` once it has opened what it works on, then a line before and
after each step it takes; only whole lines count (a line the kill cut short was never
said), so the test knows what was acknowledged and what was in flight.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: What a child script puts before its loop: ``say(line)`` prints one whole line at once,
#: and ``ready`` is said (see the module's docstring).
SAY_READY = """
def say(line):
    sys.stdout.write(line + "\\n")
    sys.stdout.flush()

say("ready")
"""


def child_env() -> dict:
    """The environment a child needs to import this checkout of hoarddb."""
    return {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def kill_midway(script: str, args: list, out_path: Path, pause: float, timeout: float = 30) -> list[str]:
    """Run ``python -c script *args``, wait for its ``ready``, let it work ``pause`` seconds,
    SIGKILL it, and return the whole lines it printed after ``ready``."""
    with open(out_path, "wb") as out:
        child = subprocess.Popen([sys.executable, "-c", script, *map(str, args)],
                                 stdout=out, stderr=subprocess.PIPE, cwd=REPO, env=child_env())
    try:
        deadline = time.monotonic() + timeout
        while b"ready" not in out_path.read_bytes():
            assert child.poll() is None, child.stderr.read().decode()
            assert time.monotonic() < deadline, "the child did not start"
            time.sleep(0.01)
        time.sleep(pause)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stderr.close()
    return out_path.read_text().split("\n")[:-1][1:]


def run_script(script: str, *args) -> subprocess.CompletedProcess:
    """Run ``python -c script *args`` to its end (60 s at most); its exit status and output."""
    return subprocess.run([sys.executable, "-c", script, *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env=child_env())
