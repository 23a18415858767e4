"""Run the real ``zkcoord`` command line in a child process, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_cli(*args: str, timeout: float = 60, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m zkcoord ARGS`` with output captured; ZKCOORD_HOME defaults to a throwaway directory."""
    full_env = {**os.environ, **(env or {})}
    full_env.setdefault("ZKCOORD_HOME", str(Path(os.environ.get("PYTEST_TMPDIR", "/tmp")) / "zkcoord-test-home"))
    return subprocess.run(
        [sys.executable, "-m", "zkcoord", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        check=False,
    )
