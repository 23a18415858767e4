"""Each violation of a run as one row: which property, where (group, topic, partition), when, which processes and
commands, which epochs and generations -- what the report's violation table and its zoomed timelines show.

The rows are built from the verdict alone (the ``examples`` of each property's details, which
``tests/spark/test_reader_agreement.py`` holds equal to what the single-process reference reader finds), never from
the tables, so that the report says what the verdict counted.  A verdict lists up to ten examples of each kind per
run (:data:`zkcoord.analysis.assemble.EXAMPLES`); :func:`unlisted` says how many violations of each property that
leaves out (the Parquet tables hold them all).  Plain Python: any thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zkcoord.analysis.verdict import RunVerdict


@dataclass(frozen=True, slots=True)
class Violation:
    """One violation.  ``start_ts``/``end_ts``: wall-clock ms of the journal (``None`` for S3-risk, which is about
    offsets, not a moment; S3's and S4's span the deliveries involved); ``offsets``: ``first..last`` when the
    violation is about records."""

    run: str
    prop: str
    kind: str
    group: str | None
    topic: str | None
    partition: int | None
    start_ts: int | None
    end_ts: int | None
    processes: tuple[str, ...]
    commands: tuple[str, ...]
    epochs: tuple[int, ...]
    generations: tuple[int, ...]
    offsets: str | None
    detail: str

    @property
    def where(self) -> str:
        if self.topic is None:
            return self.group or "-"
        return f"{self.group} {self.topic}-{self.partition}"


def _ints(*values: Any) -> tuple[int, ...]:
    """The distinct non-null values, in order of first appearance."""
    out: list[int] = []
    for v in values:
        if v is not None and int(v) not in out:
            out.append(int(v))
    return tuple(out)


def _under(d: dict[str, Any]) -> str:
    """Which ownership interval a delivery was made under, in words."""
    if d.get("start_ts") is None:
        return " under no ownership interval"
    granted = f", granted by {d['command']}" if d.get("command") else ", no start-fetcher journalled before it"
    return f" under its interval of generation {d.get('generation')}{granted}"


def _involved(run: str, prop: str, kind: str, e: dict[str, Any], *, deliveries: tuple[dict[str, Any] | None, ...],
              commit: dict[str, Any] | None, detail: str) -> Violation:  # fmt: skip
    """An S3 or S4 row: its interval spans the deliveries involved (the commit's moment if there are none), its
    processes are their consumers and the committer, its commands those that granted their intervals."""
    found = [d for d in deliveries if d is not None]
    moments = [d["ts"] for d in found] or ([commit["ts"]] if commit is not None else [])
    processes = [d["consumer"] for d in found] + ([commit["consumer"]] if commit is not None else [])
    return Violation(
        run, prop, kind, e["group"], e["topic"], e["partition"], min(moments, default=None),
        max(moments, default=None), tuple(dict.fromkeys(p for p in processes if p is not None)),
        tuple(dict.fromkeys(d["command"] for d in found if d.get("command"))),
        _ints(*[d.get("epoch") for d in found]), _ints(*[d.get("generation") for d in found]),
        f"{e['first']}..{e['last']}", detail,
    )  # fmt: skip


def violations(run: RunVerdict) -> list[Violation]:
    """Every violation the verdict of ``run`` lists, S1 to S5 and S8 in order."""
    out: list[Violation] = []
    name = run.run
    for e in run.property("S1").details.get("examples", []):
        out.append(Violation(
            name, "S1", "deposed coordinator wrote", e["group"], None, None, e["ts"], e["ts"],
            (f"{e['role']} (pid {e['pid']})", e["consumer"]), (e["option"],), _ints(e["epoch"], e["elected_epoch"]),
            _ints(e["generation"]), None,
            f"{e['role']} sent {e['option']} to {e['consumer']} with epoch {e['epoch']} after epoch "
            f"{e['elected_epoch']} was elected",
        ))  # fmt: skip
    s2 = run.property("S2").details
    for e in s2.get("examples", []):
        start, end = max(e["start_a"], e["start_b"]), min(e["end_a"], e["end_b"])
        grants = tuple(e.get(f"command_{x}") or f"no start-fetcher before {e[f'consumer_{x}']} fetched" for x in "ab")
        out.append(Violation(
            name, "S2", "two owners at once", e["group"], e["topic"], e["partition"], start, end,
            (e["consumer_a"], e["consumer_b"]), grants, _ints(e.get("epoch_a"), e.get("epoch_b")),
            _ints(e.get("generation_a"), e.get("generation_b")), None,
            f"both fetched it for {e['overlap_ms']} ms",
        ))  # fmt: skip
    for e in s2.get("outside_examples", []):
        out.append(Violation(
            name, "S2", "delivered outside ownership", e["group"], e["topic"], e["partition"], e["ts"], e["ts"],
            (e["consumer"],), (), (), (), f"{e['first']}..{e['last']}",
            "handed to the application while its consumer owned no interval of the partition",
        ))  # fmt: skip
    for e in run.property("S3").details.get("examples", []):
        before, after, commit = e.get("before"), e.get("after"), e.get("commit")
        said = [f"{e['count']} offsets produced and never {e['judged_on']}"]
        if before is not None:
            said.append(f"{before['consumer']} {e['judged_on']} ..{before['last']}{_under(before)}")
        if after is not None:
            said.append(f"{after['consumer']} {e['judged_on']} {after['first']}..{_under(after)}")
        if commit is not None:
            said.append(f"{commit['consumer']} committed {commit['offset']}, past them")
        out.append(
            _involved(name, "S3", "records lost", e, deliveries=(before, after), commit=commit, detail="; ".join(said))
        )
    for e in run.property("S3-risk").details.get("examples", []):
        out.append(Violation(
            name, "S3-risk", "committed unprocessed", e["group"], e["topic"], e["partition"], None, None,
            (e["consumer"],), (), (), (), f"{e['first']}..{e['last']}",
            f"{e['count']} offsets committed before the application had processed them",
        ))  # fmt: skip
    for e in run.property("S4").details.get("examples", []):
        a, b = e.get("delivery_a"), e.get("delivery_b")
        said = [f"{e['count']} offsets {e['judged_on']} twice"]
        said += [f"{x} by {d['consumer']} ({d['first']}..{d['last']}){_under(d)}"
                 for x, d in (("first", a), ("again", b)) if d is not None]  # fmt: skip
        out.append(
            _involved(
                name, "S4", "duplicated by a clean rebalance", e, deliveries=(a, b), commit=None, detail="; ".join(said)
            )
        )
    for e in run.property("S5").details.get("examples", []):
        out.append(Violation(
            name, "S5", "stale command applied", e["group"], None, None, e["applied_ts"], e["applied_ts"],
            (e["consumer"],), (f"{e['name']} ({e['option']})",), _ints(e["epoch"], e.get("seen_epoch")),
            _ints(e["generation"], e.get("seen_generation")), None, str(e["why"]),
        ))  # fmt: skip
    for e in run.property("S8").details.get("examples", []):
        out.append(_state_row(name, e))
    return out


def _state_row(run: str, e: dict[str, Any]) -> Violation:
    """An S8 row: a key whose state at a checkpoint differs from the records produced below it, or a region that
    never completed a checkpoint."""
    region = f"region {e['region']}"
    expected, found = f"{e['expected_count']}/{e['expected_sum']}", f"{e['found_count']}/{e['found_sum']}"
    if e["checkpoint"] is None:
        return Violation(
            run, "S8", "no complete checkpoint", e["group"], None, None, None, None, (), (region,), (), (), None,
            f"the driver completed no checkpoint of the region; its topics hold {expected} (count/sum)",
        )  # fmt: skip
    scope = "every record produced" if e["last"] else "the records below its merged offsets"
    extra = e["found_count"] - e["expected_count"]
    what = f"{extra} counted twice or more" if extra > 0 else f"{-extra} never counted" if extra < 0 else "wrong sum"
    return Violation(
        run, "S8", "state differs from the records", e["group"], None, None, None, None, (),
        (region, f"checkpoint {e['checkpoint']}"), (), (), None,
        f"key {e['key']}: expected count/sum {expected} ({scope}), found {found}: {what}",
    )  # fmt: skip


def unlisted(run: RunVerdict, rows: list[Violation]) -> dict[str, int]:
    """Per property, how many of its violations have no row (more than the verdict lists, or of a kind without
    rows: an epoch regression of S1)."""
    listed: dict[str, int] = {}
    for v in rows:
        listed[v.prop] = listed.get(v.prop, 0) + 1
    out = {}
    for p in run.properties:
        # S3, S3-risk and S4 count offsets, each row a range of them: a property is fully listed if every range is
        if p.key in ("S3", "S3-risk", "S4"):
            total = int(p.details.get("missing_ranges", p.details.get("ranges", p.details.get("clean_ranges", 0))))
        else:
            total = p.count
        if total > listed.get(p.key, 0):
            out[p.key] = total - listed.get(p.key, 0)
    return out
