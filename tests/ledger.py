"""Reading a run's journal back as a ledger: what was produced, consumed, processed, owned when (for test assertions).

These checks are the tests' own oracle, kept deliberately simple (sets of offsets, sorted intervals); the product's
verdict (``zkcoord analyze``) computes the same properties at scale.  As the verdict does, S3 (:meth:`Ledger.missing`)
and S4 (:meth:`Ledger.duplicates`, :func:`uncommitted_tails`) judge a group on what its application processed
(``records.processed``) when its journal holds any, else on what ``poll()`` handed out (``records.consumed``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from zkcoord.runtime.journal import read_journal

TP = tuple[str, int]


@dataclass
class Ledger:
    produced: dict[TP, set[int]] = field(default_factory=dict)
    consumed: dict[TP, Counter[int]] = field(default_factory=dict)
    #: what the application finished (``records.processed``), per partition
    processed: dict[TP, Counter[int]] = field(default_factory=dict)
    #: (start_ms, end_ms or None, consumer, thread) per partition
    intervals: dict[TP, list[tuple[int, int | None, str, str]]] = field(default_factory=dict)
    #: per consumer: deliveries as (ts_ms, topic, partition, first, last)
    deliveries: dict[str, list[tuple[int, str, int, int, int]]] = field(default_factory=dict)
    committed: dict[tuple[str, TP], int] = field(default_factory=dict)

    @classmethod
    def read(cls, journal: Path, group: str) -> Ledger:
        ledger = cls()
        open_since: dict[tuple[TP, str], tuple[int, str]] = {}
        last_seen: dict[str, int] = {}
        for e in sorted(read_journal(journal), key=lambda ev: (ev.ts_ms, ev.pid, ev.seq)):
            f = e.fields
            if e.event == "produce.batch":
                ledger.produced.setdefault((f["topic"], f["partition"]), set()).update(range(f["first"], f["last"] + 1))
                continue
            if f.get("group") != group:
                continue
            if "consumer" in f:
                last_seen[f["consumer"]] = e.ts_ms
            tp = (f.get("topic", ""), f.get("partition", -1))
            if e.event == "records.consumed":
                ledger.consumed.setdefault(tp, Counter()).update(range(f["first"], f["last"] + 1))
                ledger.deliveries.setdefault(f["consumer"], []).append((e.ts_ms, tp[0], tp[1], f["first"], f["last"]))
            elif e.event == "records.processed":
                ledger.processed.setdefault(tp, Counter()).update(range(f["first"], f["last"] + 1))
            elif e.event == "fetch.started":
                open_since[(tp, f["consumer"])] = (e.ts_ms, f["thread"])
            elif e.event == "fetch.stopped":
                start = open_since.pop((tp, f["consumer"]), None)
                if start is not None:
                    end = int(f.get("at_ms", e.ts_ms))
                    ledger.intervals.setdefault(tp, []).append((start[0], end, f["consumer"], start[1]))
            elif e.event == "offsets.committed":
                ledger.committed[(f["consumer"], tp)] = f["offset"]
        for (tp, consumer), (start_ms, thread) in open_since.items():
            # Never stopped: the process died (SIGKILL).  It handed out nothing after its last journalled event.
            ledger.intervals.setdefault(tp, []).append((start_ms, last_seen.get(consumer), consumer, thread))
        return ledger

    @property
    def judged(self) -> dict[TP, Counter[int]]:
        """What S3 and S4 judge: the processed records if the group journals any, else the consumed ones."""
        return self.processed if self.processed else self.consumed

    def total_produced(self, topics: set[str] | None = None) -> int:
        return sum(len(v) for tp, v in self.produced.items() if topics is None or tp[0] in topics)

    def missing(self, topics: set[str] | None = None) -> dict[TP, int]:
        out = {}
        for tp, offsets in self.produced.items():
            if topics is not None and tp[0] not in topics:
                continue
            lost = len(offsets - set(self.judged.get(tp, Counter())))
            if lost:
                out[tp] = lost
        return out

    def duplicates(self) -> dict[TP, set[int]]:
        return {
            tp: {o for o, n in c.items() if n > 1} for tp, c in self.judged.items() if any(n > 1 for n in c.values())
        }

    def overlaps(self) -> list[tuple[TP, tuple[int, int | None, str, str], tuple[int, int | None, str, str]]]:
        """Pairs of ownership intervals of one partition, held by different consumers, that overlap in time."""
        found = []
        for tp, unordered in self.intervals.items():
            spans = sorted(unordered, key=lambda s: s[0])
            for i, a in enumerate(spans):
                for b in spans[i + 1 :]:
                    a_end = a[1] if a[1] is not None else 2**62
                    if b[0] < a_end and a[2] != b[2]:
                        found.append((tp, a, b))
        return found


def deposed_writes(journal: Path) -> list[str]:
    """S1: ``command.sent`` by a coordinator whose epoch is below one elected before it (as the pipeline's
    ``deposed_writes``, over the whole run)."""
    elected = -1
    found = []
    for e in sorted(read_journal(journal), key=lambda ev: (ev.ts_ms, ev.pid, ev.seq)):
        if e.event == "coordinator.elected":
            elected = max(elected, int(e.fields["epoch"]))
        elif e.event == "command.sent" and int(e.fields["epoch"]) < elected:
            found.append(f"{e.fields.get('consumer')}: epoch {e.fields['epoch']} sent after epoch {elected} elected")
    return found


def stale_applied(journal: Path) -> list[str]:
    """S5: ``command.applied`` from an older epoch or generation than one the same consumer had applied before (as
    the pipeline's ``stale_applied``)."""
    seen: dict[tuple[str, str], tuple[int, int]] = {}
    found = []
    for e in sorted(read_journal(journal), key=lambda ev: (ev.ts_ms, ev.pid, ev.seq)):
        if e.event != "command.applied":
            continue
        key = (e.fields["group"], e.fields["consumer"])
        epoch, generation = int(e.fields["epoch"]), int(e.fields["generation"])
        top_epoch, top_generation = seen.get(key, (-1, -1))
        if epoch < top_epoch or generation < top_generation:
            found.append(f"{key[1]}: applied epoch {epoch} gen {generation} after {top_epoch}/{top_generation}")
        seen[key] = (max(epoch, top_epoch), max(generation, top_generation))
    return found


#: Events after which a consumer's records consumed since its last commit may be consumed again (S4's exception:
#: it ended without committing them, as a crash would).  ``consumer.poll_timeout``: it left the group because its
#: application did not poll in time, committing nothing.
UNCLEAN_ENDS = ("shutdown.incomplete", "legacy.session.expired", "consumer.fenced", "consumer.poll_timeout")


def uncommitted_tails(journal: Path, group: str) -> dict[TP, set[int]]:
    """Per partition, the offsets some consumer of ``group`` had consumed (processed, if the group journals
    ``records.processed``) but not committed when its stop was incomplete, its session was lost or it left for
    not polling (:data:`UNCLEAN_ENDS`): the only ones S4 lets be consumed (processed) twice."""
    events = [e for e in read_journal(journal) if e.fields.get("group") == group]
    ranges = "records.processed" if any(e.event == "records.processed" for e in events) else "records.consumed"
    delivered: dict[tuple[str, TP], list[tuple[int, int]]] = {}
    committed: dict[tuple[str, TP], int] = {}
    tails: dict[TP, set[int]] = {}
    # A consumer whose session was lost goes on delivering until it notices (its lease), and its application on
    # processing what it was handed before; what it delivers or processes then is uncommitted too, until it commits
    # that partition again.
    unclean: dict[str, set[TP]] = {}  # consumer -> the partitions it committed again since
    for e in sorted(events, key=lambda ev: (ev.ts_ms, ev.pid, ev.seq)):
        f = e.fields
        if e.event == ranges:
            key = (f["consumer"], (f["topic"], f["partition"]))
            delivered.setdefault(key, []).append((f["first"], f["last"]))
            if f["consumer"] in unclean and key[1] not in unclean[f["consumer"]]:
                tails.setdefault(key[1], set()).update(range(f["first"], f["last"] + 1))
        elif e.event == "offsets.committed":
            committed[(f["consumer"], (f["topic"], f["partition"]))] = f["offset"]
            if f["consumer"] in unclean:
                unclean[f["consumer"]].add((f["topic"], f["partition"]))
        elif e.event in UNCLEAN_ENDS:
            unclean[f["consumer"]] = set()
            for (consumer, tp), runs in delivered.items():
                if consumer == f["consumer"]:
                    since = committed.get((consumer, tp), -1)
                    tails.setdefault(tp, set()).update(o for a, b in runs for o in range(max(a, since), b + 1))
    return tails
