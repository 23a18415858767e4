"""Every role a deployment with ACLs runs is granted what it needs: a broker, and consumers of each protocol the
member identity may speak (incremental, and KIP-848's consumer protocol as static members serving metrics; the eager
protocol is test_acl.py's), against the suite's real ZooKeeper, in real processes (docs/security.md)."""

from __future__ import annotations

import json
import socket
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.cli import run_cli
from tests.ledger import Ledger
from tests.scrape import scrape
from zkcoord.admin.acl_setup import secure_tree
from zkcoord.layout import paths
from zkcoord.layout.acl import Credential
from zkcoord.testbed.procs import ChildProcess, wait_until
from zkcoord.zk import ZkClient, ZkConfig

pytestmark = pytest.mark.integration

G = "g"
ENV = {"ZK_MEMBER": "member:m-secret", "ZK_COORD": "coord:c-secret"}

VARIANTS = {
    "incremental": ["--rebalance", "incremental"],  # with ACLs, no one-step hand-over: two steps
    "consumer-static-metrics": ["--protocol", "consumer", "--instance-id", "{name}", "--metrics-port", "{port}"],
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _refusals(journal: Path) -> list[dict[str, object]]:
    out = []
    for path in journal.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event.get("event") == "zk.refused":
                out.append(event)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_each_consumer_protocol_runs_under_acls(zk_hosts: str, tmp_path: Path, variant: str) -> None:
    secure_tree(ZkConfig.from_string(zk_hosts), Credential("coord", "c-secret"), Credential("member", "m-secret"))
    journal, data = tmp_path / "journal", tmp_path / "data"
    common = ["--zk", zk_hosts, "--session-timeout", "2", "--journal", str(journal)]
    coord = [*common, "--zk-auth", "env:ZK_COORD"]
    member = [*common, "--zk-auth", "env:ZK_MEMBER", "--data-dir", str(data), "--auto-commit-interval", "0.2"]
    with ExitStack() as stack:
        reader = stack.enter_context(ZkClient(ZkConfig.from_string(zk_hosts)))
        stack.enter_context(ChildProcess(["broker", "--id", "1", *coord], tmp_path / "broker.log", env=ENV))
        wait_until(lambda: reader.exists(paths.COORDINATOR) is not None, 30, "a coordinator")
        made = run_cli("topic", "create", "t", "--partitions", "4", *coord[:2], "--zk-auth", "env:ZK_COORD", env=ENV)
        assert made.returncode == 0, made.stderr
        consumers, ports = [], [_free_port(), _free_port()]
        for name, port in zip(("c1", "c2"), ports, strict=True):
            extra = [a.format(name=name, port=port) for a in VARIANTS[variant]]
            args = ["consume", "--group", G, "--topic", "t", *member, *extra]
            consumers.append(stack.enter_context(ChildProcess(args, tmp_path / f"{name}.log", env=ENV)))

        # Both in the group before anything is produced: at load 17 the second process was still starting when the
        # first had consumed all 400, and its metrics endpoint was scraped before it existed.
        def both_joined() -> bool:
            assert all(c.alive for c in consumers), [p.read_text()[-2000:] for p in tmp_path.glob("c*.log")]
            return all("joined group" in (tmp_path / f"{n}.log").read_text() for n in ("c1", "c2"))

        wait_until(both_joined, 60, "both consumers in the group", interval=0.25)
        produced = run_cli(
            "produce", "t", "--count", "400", "--rate", "4000", "--size", "20", *coord, "--data-dir", str(data), env=ENV
        )
        assert produced.returncode == 0, produced.stderr

        def consumed_all() -> bool:
            assert all(c.alive for c in consumers), [p.read_text()[-2000:] for p in tmp_path.glob("c*.log")]
            ledger = Ledger.read(journal, G)
            return ledger.total_produced({"t"}) == 400 and not ledger.missing({"t"})

        wait_until(consumed_all, 30, "everything consumed", interval=0.25)
        assert _refusals(journal) == []
        if "--metrics-port" in VARIANTS[variant]:  # both serve metrics, and count every record between them
            scraped = [scrape(port) for port in ports]
            assert sum(m.get("zkcoord_consumer_records_consumed_total") for m in scraped) == 400
    assert Ledger.read(journal, G).overlaps() == []
