"""Consistent regions with real processes (``zkcoord region member|driver``, a broker, a producer): a member killed
with SIGKILL and restarted under its name, and the last complete checkpoint's state is every record counted once
(S8); a member of another region is refused with one line."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.cli import run_cli
from tests.integration.test_consumer_e2e import Run
from zkcoord.data.partlog import log_offsets, open_reader
from zkcoord.data.topics import TopicAdmin
from zkcoord.region.app import key_of, value_of
from zkcoord.runtime.journal import JournalEvent, read_journal
from zkcoord.testbed.procs import ChildProcess, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def run(zk_hosts: str, tmp_path: Path) -> Iterator[Run]:
    with ExitStack() as stack:
        yield Run(zk_hosts, tmp_path, stack)


def member(run: Run, name: str, region: str = "r1") -> ChildProcess:
    args = [
        "region", "member", "--group", "g", "--topic", "t", "--region", region, "--member-name", name,
        "--store-dir", str(run.root / "store"), "--data-dir", str(run.data), "--max-poll-records", "50",
        "--reset-timeout", "6", *run.common(),
    ]  # fmt: skip
    proc = ChildProcess(args, run.root / f"member-{name}-{run.n}.log")
    run.n += 1
    run.stack.enter_context(proc)
    return proc


def aggregate_below(data: Path, offsets: dict[str, int]) -> dict[str, list[int]]:
    """The exact aggregate of every record below the given next offsets (``{"t/p": offset}``)."""
    out: dict[str, list[int]] = {}
    for key, end in offsets.items():
        topic, _, part = key.rpartition("/")
        reader = open_reader(data, topic, int(part))
        try:
            offset = reader.start_offset
            while offset < end:
                records = reader.read(offset)
                for r in records:
                    if r.offset < end:
                        entry = out.setdefault(key_of(r.key), [0, 0])
                        entry[0] += 1
                        entry[1] += value_of(r.value)
                offset = records[-1].offset + 1
        finally:
            reader.close()
    return out


def checkpoint_state(events: list[JournalEvent], seq: int) -> tuple[dict[str, int], dict[str, list[int]]]:
    """The merged offsets and the summed state of checkpoint ``seq``."""
    offsets: dict[str, int] = {}
    state: dict[str, list[int]] = {}
    for e in events:
        if e.event == "region.checkpoint" and e.fields["checkpoint"] == seq:
            offsets.update(e.fields["offsets"])
            for k, (c, s) in e.fields["state"].items():
                entry = state.setdefault(k, [0, 0])
                entry[0] += c
                entry[1] += s
    return offsets, state


def test_a_killed_member_restarts_and_the_last_complete_checkpoint_counts_every_record_once(run: Run) -> None:
    run.broker()
    TopicAdmin(run.zk).create("t", 4)
    members = {name: member(run, name) for name in ("m1", "m2")}
    driver = ChildProcess(
        ["region", "driver", "--group", "g", "--region", "r1", "--members", "m1,m2", "--interval", "0.5",
         "--order-timeout", "8", *run.common()],
        run.root / "driver.log",
    )  # fmt: skip
    run.stack.enter_context(driver)
    producer = ChildProcess(
        ["produce", "t", "--count", "3000", "--rate", "1000", "--keys", "7", "--size", "30", "--data-dir",
         str(run.data), *run.common()],
        run.root / "producer.log",
    )  # fmt: skip
    run.stack.enter_context(producer)

    def completed() -> list[int]:
        return [e.fields["checkpoint"] for e in read_journal(run.journal) if e.event == "region.completed"]

    wait_until(lambda: len(completed()) >= 1, 30, "a first complete checkpoint")
    members["m1"].signal(signal.SIGKILL)  # the fault: no drain, no commit, no goodbye
    members["m1"].wait(10)
    members["m1"] = member(run, "m1")  # back under its name: its state comes from its local store at the reset
    assert producer.wait(60) == 0
    ends = {f"t/{p}": log_offsets(run.data, "t", p)[1] for p in range(4)}

    def covers_everything() -> bool:
        events = list(read_journal(run.journal))
        done = [e.fields["checkpoint"] for e in events if e.event == "region.completed"]
        return bool(done) and checkpoint_state(events, done[-1])[0] == ends

    wait_until(covers_everything, 60, "a complete checkpoint covering every produced record", interval=0.25)
    events = list(read_journal(run.journal))
    restarted = [e for e in events if e.event == "region.reset_pending" and "running region" in e.fields["reason"]]
    assert restarted, "the restarted member did not wait for a reset"
    # S8 on every complete checkpoint: the members' states add up to the records below its merged offsets.
    for seq in completed():
        offsets, state = checkpoint_state(events, seq)
        assert state == aggregate_below(run.data, offsets), f"checkpoint {seq}"
    assert sum(c for c, _s in checkpoint_state(events, completed()[-1])[1].values()) == 3000


def test_a_member_of_another_region_is_refused_with_one_line(run: Run) -> None:
    run.broker()
    TopicAdmin(run.zk).create("t", 1)
    member(run, "m1")
    wait_until(lambda: run.zk.exists("/consumers/groups/g/region/members/m1") is not None, 30, "m1 in region r1")
    refused = run_cli(
        "region", "member", "--group", "g", "--topic", "t", "--region", "r2", "--member-name", "m2",
        "--store-dir", str(run.root / "store"), "--data-dir", str(run.data), *run.common(),
    )  # fmt: skip
    assert refused.returncode == 1, refused.stderr
    errors = [line for line in refused.stderr.splitlines() if line.strip()]
    assert errors == [
        "Error: group 'g' belongs to consistent region 'r1'; this member is in region 'r2': all members of a group "
        "must be in the same region"
    ]
    assert any(e.event == "region.refused" for e in read_journal(run.journal))
