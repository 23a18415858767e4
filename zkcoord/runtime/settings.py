"""Process-wide defaults: where zkcoord keeps its files and which ZooKeeper it talks to when not told.

Everything here can be overridden per command (``--zk``, ``--data-dir``, ``--journal``) or by environment variable,
so that tests and the demo never touch a user's real home.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The embedded ZooKeeper's default client port, and so the default of every ``--zk`` option.
DEFAULT_ZK_PORT = 2181
DEFAULT_ZK = f"127.0.0.1:{DEFAULT_ZK_PORT}"


def zkcoord_home() -> Path:
    """The directory zkcoord keeps its state in: ``$ZKCOORD_HOME``, else ``~/.zkcoord``.  Not created here."""
    env = os.environ.get("ZKCOORD_HOME")
    return Path(env) if env else Path.home() / ".zkcoord"


def default_zk() -> str:
    """The default ``--zk`` connect string: ``$ZKCOORD_ZK``, else the embedded server's default address."""
    return os.environ.get("ZKCOORD_ZK", DEFAULT_ZK)


def default_data_dir() -> Path:
    """Where partition logs live unless ``--data-dir`` says otherwise."""
    env = os.environ.get("ZKCOORD_DATA_DIR")
    return Path(env) if env else zkcoord_home() / "data"


def default_journal_dir() -> Path:
    """Where journals go unless ``--journal`` says otherwise."""
    env = os.environ.get("ZKCOORD_JOURNAL")
    return Path(env) if env else zkcoord_home() / "journal"
