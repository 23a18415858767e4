"""The tests' own oracle (``tests/ledger.py``) follows the verdict's rules: S3 and S4 on processed records when the
group journals them, and a ``consumer.poll_timeout`` ending a member's work uncommitted, as a crash does."""

from __future__ import annotations

from pathlib import Path

from tests.ledger import Ledger, uncommitted_tails
from tests.spark.journals import GROUP, clean_run, finish, poll_timeout_run, processed_run


def test_missing_is_judged_on_processed_records_when_the_group_journals_them(tmp_path: Path) -> None:
    processed_run(tmp_path / "gap", gap=True)
    processed_run(tmp_path / "complete")
    finish(clean_run(tmp_path / "consumed"))
    assert Ledger.read(tmp_path / "gap" / "journal", GROUP).missing() == {("t", 0): 25}
    assert Ledger.read(tmp_path / "complete" / "journal", GROUP).missing() == {}
    consumed = Ledger.read(tmp_path / "consumed" / "journal", GROUP)
    assert consumed.processed == {} and consumed.missing() == {} and consumed.total_produced() == 200


def test_a_poll_timeout_leaves_an_uncommitted_tail(tmp_path: Path) -> None:
    poll_timeout_run(tmp_path / "timeout")
    poll_timeout_run(tmp_path / "control", timeout=False)
    twice = {("t", 0): set(range(50, 80))}
    ledger = Ledger.read(tmp_path / "timeout" / "journal", GROUP)
    assert ledger.duplicates() == twice
    assert uncommitted_tails(tmp_path / "timeout" / "journal", GROUP) == twice
    assert uncommitted_tails(tmp_path / "control" / "journal", GROUP) == {}
