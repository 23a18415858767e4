"""``zkcoord produce --journal-records``: the journal's ``produce.records`` are the records in the logs, key for key,
and their numbers are what the region app sums (``zkcoord.region.app.value_of``): S8's evidence is the data."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli import run_cli
from zkcoord.data.partlog import PartitionReader
from zkcoord.data.producer import ProduceConfig
from zkcoord.data.topics import TopicAdmin
from zkcoord.errors import ConfigurationError
from zkcoord.layout import paths
from zkcoord.region.app import value_of
from zkcoord.runtime.journal import read_journal
from zkcoord.zk import ZkClient, ZkConfig


@pytest.fixture
def zk(zk_hosts: str) -> Iterator[ZkClient]:
    with ZkClient(ZkConfig.from_string(zk_hosts)) as client:
        client.ensure_paths(paths.COMMON_PATHS)
        client.create(paths.broker(0), b"{}", ephemeral=True)
        yield client


@pytest.mark.integration
def test_journalled_records_are_the_logs_records(zk: ZkClient, zk_hosts: str, tmp_path: Path) -> None:
    TopicAdmin(zk).create("t", 3)
    data, journal = tmp_path / "data", tmp_path / "journal"
    out = run_cli("produce", "t", "--count", "700", "--keys", "5", "--size", "40", "--batch", "50", "--journal-records",
                  "--zk", zk_hosts, "--data-dir", str(data), "--journal", str(journal))  # fmt: skip
    assert out.returncode == 0, out.stderr
    journalled: dict[int, dict[int, tuple[str | None, int]]] = {}
    for event in read_journal(journal):
        if event.event == "produce.records":
            f = event.fields
            for i, (key, number) in enumerate(zip(f["keys"], f["values"], strict=True)):
                journalled.setdefault(f["partition"], {})[f["first"] + i] = (key, number)
    assert sum(len(v) for v in journalled.values()) == 700
    for p in range(3):
        with PartitionReader(data, "t", p) as reader:
            logged = {r.offset: (r.key.decode() if r.key else None, value_of(r.value)) for r in reader.read(0, 10_000)}
        assert logged == journalled.get(p, {}), p
    assert sorted(n for v in journalled.values() for _k, n in v.values()) == list(range(700))


def test_journal_records_needs_values_that_hold_their_number() -> None:
    with pytest.raises(ConfigurationError, match="at least 32 bytes"):
        ProduceConfig(topic="t", size=20, journal_records=True)
    ProduceConfig(topic="t", size=20)
