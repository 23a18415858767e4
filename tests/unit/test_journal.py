from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from zkcoord.errors import ConfigurationError
from zkcoord.runtime.journal import EVENTS, SCHEMA_VERSION, Journal, ReadStats, read_journal

DOCS = Path(__file__).resolve().parents[2] / "docs" / "journal.md"


def test_events_round_trip_with_core_fields(tmp_path: Path) -> None:
    ticks = iter(range(1000, 2000))
    with Journal(tmp_path, "producer", wall_ms=lambda: next(ticks), mono_ns=lambda: 7) as journal:
        journal.emit("produce.batch", topic="t", partition=1, first=0, last=9, count=10, bytes=1000)
        journal.emit("produce.finished", topic="t", count=10, seconds=0.1, records_per_s=100.0, mb_per_s=0.01)
    assert journal.path is not None and journal.path.name.startswith("producer.")
    events = list(read_journal(tmp_path))
    assert [e.event for e in events] == ["produce.batch", "produce.finished"]
    assert [e.seq for e in events] == [1, 2]
    assert events[0].ts_ms == 1000 and events[0].mono_ns == 7 and events[0].role == "producer"
    assert events[0].fields == {"topic": "t", "partition": 1, "first": 0, "last": 9, "count": 10, "bytes": 1000}


def test_unknown_event_type_is_a_programming_error(tmp_path: Path) -> None:
    with Journal(tmp_path, "x") as journal, pytest.raises(ValueError, match="unknown journal event"):
        journal.emit("made.up")


def test_reader_skips_and_counts_bad_lines(tmp_path: Path) -> None:
    good = {"v": SCHEMA_VERSION, "ts": 1, "mono": 1, "seq": 1, "role": "r", "pid": 1, "ev": "zk.state"}
    newer = {**good, "v": SCHEMA_VERSION + 1}
    lines = [json.dumps(good), "{oops", json.dumps({"v": 1}), json.dumps(newer), json.dumps(good)[:20]]
    (tmp_path / "r.1.jsonl").write_text("\n".join(lines[:4]) + "\n" + lines[4])  # last line torn (no newline)
    stats = ReadStats()
    events = list(read_journal(tmp_path, stats))
    assert len(events) == 1
    assert (stats.lines, stats.malformed, stats.newer_schema, stats.truncated) == (5, 2, 1, 1)


def test_unwritable_directory_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigurationError, match="cannot write the journal"):
        Journal(blocker / "sub", "r")


def test_null_journal_records_nothing() -> None:
    journal = Journal(None, "lib")
    journal.emit("zk.state", state="connected")
    assert journal.path is None


def test_docs_list_every_event_type() -> None:
    documented = set(re.findall(r"^\| `([a-z][a-z0-9]*\.[a-z_.]+)` \|", DOCS.read_text(), flags=re.MULTILINE))
    assert documented == set(EVENTS), "docs/journal.md and zkcoord.runtime.journal.EVENTS disagree"
