"""Python code run in a fresh interpreter (this one's, with its environment): for what a process imports or sets
up on its own, which the test process, having imported everything, cannot show."""

from __future__ import annotations

import subprocess
import sys


def run_fresh(code: str, timeout_s: float = 120) -> str:
    """Runs `code` with `python -c` and returns its stdout; fails the test with its stderr when it fails."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == 0, done.stderr
    return done.stdout
