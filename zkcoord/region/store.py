"""The local checkpoint store: one member's checkpoints, one JSON file per checkpoint sequence id.

Chosen over ZooKeeper for the application's state because the state grows with the application (a znode holds at most
1 MB, and every member would read the others' states for nothing) and only its own member ever reads it back, as the
seed's operators keep their checkpoints in the Streams checkpoint store.  The offsets are in the file too (the
member's own map) and, separately, in ZooKeeper (its contribution to the merge, which every member reads).
``<store_dir>/<region>/<member>/<seq>.json``, written to a temporary file, fsynced and renamed (a crash leaves the
old file or the new one, never half of one).  Thread: any; one writer per member.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from zkcoord.errors import ZkCoordError


class CheckpointMissingError(ZkCoordError):
    """A reset asks for a checkpoint this member's store does not hold (or cannot read)."""


class LocalStore:
    def __init__(self, root: Path, region: str, member: str) -> None:
        self.dir = root / region / member

    def path(self, seq: int) -> Path:
        return self.dir / f"{seq}.json"

    def save(self, seq: int, document: dict[str, Any]) -> None:
        """Write checkpoint ``seq`` durably (replacing one of the same seq).  :raises OSError:"""
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / f".{seq}.json.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(document, f, sort_keys=True, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(self.path(seq))
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)  # the rename itself survives a crash
        finally:
            os.close(fd)

    def load(self, seq: int) -> dict[str, Any]:
        """:raises CheckpointMissingError: not saved, or unreadable."""
        try:
            doc = json.loads(self.path(seq).read_text(encoding="utf-8"))
        except FileNotFoundError as e:
            raise CheckpointMissingError(f"checkpoint {seq} is not in the local store {self.dir}") from e
        except (OSError, ValueError) as e:
            raise CheckpointMissingError(f"checkpoint {seq} in {self.dir} cannot be read: {e}") from e
        if not isinstance(doc, dict):
            raise CheckpointMissingError(f"checkpoint {seq} in {self.dir} is not a JSON object")
        return doc

    def seqs(self) -> list[int]:
        if not self.dir.is_dir():
            return []
        return sorted(int(p.stem) for p in self.dir.glob("*.json") if p.stem.isdigit())

    def retire(self, seq: int) -> None:
        """Remove checkpoint ``seq`` (absent: nothing to do)."""
        self.path(seq).unlink(missing_ok=True)

    def retire_through(self, seq: int) -> None:
        """Remove every checkpoint up to ``seq``: a driver retires only checkpoints below its last complete one, so the
        ones below ``seq`` are older complete ones or ones that never completed (never reset to)."""
        for old in self.seqs():
            if old <= seq:
                self.retire(old)
