"""A user's own classic-protocol assignor (``docs/classic-protocol.md``): keep every partition where it is while its
owner still subscribes to its topic, and deal the others as Kafka 0.8's range assignor would.

    PYTHONPATH=docs/examples zkcoord consume --group g --topic orders --protocol classic \\
        --assignors sticky_range:StickyRange,range

Every member that lists it must be able to import it; the leader runs it.  It is not balanced after joins (a joiner
gets only what is free): a real one would also move partitions to even the counts out.
"""

from __future__ import annotations

from collections.abc import Mapping


class StickyRange:
    def assign(
        self,
        subscriptions: Mapping[str, Mapping[str, int]],
        partitions: Mapping[str, int],
        current: Mapping[str, Mapping[int, str]],
    ) -> dict[str, dict[int, str]]:
        out: dict[str, dict[int, str]] = {}
        for topic in sorted(partitions):
            # the threads that may own the topic's partitions: "<member>-<n>", n below the member's thread count
            threads = sorted(
                f"{member}-{n}" for member, topics in subscriptions.items() for n in range(topics.get(topic, 0))
            )
            if not threads:
                continue
            kept = {p: t for p, t in current.get(topic, {}).items() if t in threads and p < partitions[topic]}
            free = [p for p in range(partitions[topic]) if p not in kept]
            share, extra = divmod(len(free), len(threads))
            given = dict(kept)
            start = 0
            for i, thread in enumerate(threads):
                count = share + (1 if i < extra else 0)
                for p in free[start : start + count]:
                    given[p] = thread
                start += count
            out[topic] = dict(sorted(given.items()))
        return out
