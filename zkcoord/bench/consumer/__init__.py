"""The consumer: records/s against the raw partition-log read ceiling, and rebalance latency, in one run.

    zkcoord bench consumer [--size small|medium|large] [--records N] [--trials T] [--consumers 10,50]
                           [--repeats R] [--out FILE] [--dir DIR] [--zk-no-fsync]

One real ZooKeeper (:class:`~zkcoord.zkserver.ZkServer`, port 0, temporary data, ``forceSync`` as ZooKeeper's
default unless ``--zk-no-fsync``) and one broker hosting a :class:`~zkcoord.coordinator.Coordinator`, both started by
this script; the consumers run in this process, each on its own ZooKeeper session (timeout 4 s).

**ZooKeeper floor.**  The round trip of a ``create`` + ``delete`` of one znode (and of one ``exists``), measured on
the same server first (after 400 unmeasured ones: a warm server), as the unit the rebalance latencies are made of.

**Throughput.**  ``--records`` records (8-byte keys, 100-byte values, appended 100 per ``append_batch``) spread over
8 partitions, then read back in full by each row, all in the page cache:

* ceiling: ``PartitionReader.read_batches`` (1 MiB per call, CRC-checked) and iterating every record, one thread;
* two decompositions of the fetcher's work: ``read(offset, max_poll)`` (what a fetcher calls), then that plus a
  ``ConsumerRecord`` per record (what a fetcher hands to ``poll()``);
* ``FetchManager`` + ``poll()`` without ZooKeeper (the consumer's data plane alone), with 1 and 4 fetcher threads;
* ``Consumer`` (a fresh group each run, ``Subscription.static({topic: threads})``, auto-commit on), with 1 and 4
  threads and ``max_poll_records`` 500 and 2000, polling until every record has been returned once.

Every row iterates every record in the reading thread (``for record in ...``), so the application-side work is the
same in all of them.  A consumer row's time runs from the first ``poll()`` that returned records to the one that
returned the last; its join time (``start()`` to the first records) is reported apart.  Rows run interleaved
(all once, then all again...) ``--repeats`` times and the fastest run counts.  "ratio" is records/s over the
ceiling's.

**Rebalance latency.**  A topic of 200 partitions, 500 records in each.  For each N of ``--consumers``: N
consumers join one group; once it is stable (the coordinator's state STABLE with the N members, every consumer's
``assignment()`` equal to its share of the persisted target), ``--trials`` times: one more consumer joins, then
leaves.  A join is timed from its member znode's creation (the ``consumer.registered`` event, emitted when the
``create`` returns) until the last of the N+1 consumers has applied the final generation's start-fetcher (its
fetchers run on the new share; ``command.applied`` is emitted right after ``on_partitions_assigned``); a leave from
the member znode's deletion (``consumer.deregistered``) until the last of the N has.  Every transition is checked
the same way (state STABLE, members, assignments).  The breakdown comes from the coordinator's and consumers'
journal events, timestamped on one monotonic clock: trigger -> ``rebalance.requested`` (the watch), requested ->
``rebalance.started`` (queue, group read, plan), started -> ``rebalance.barrier`` (the stop phase: stop-fetchers
written, every consumer stopped, committed, acknowledged; with the first and the last consumer's stop applied),
barrier -> the last start applied (the start phase: ownership and start-fetchers written, every consumer claimed its
partitions and started fetching; with the first consumer's start applied).  The coordinator's own ``command.sent``
events are not used: they are stamped when its thread gets the GIL back after the write, which with 50 consumers
waking up at once can be after they applied the command.  The consumers do not ``poll()``: each fetcher fills its
prefetch buffer (500 records) with one read and then idles, so that N consumers in one process do not compete for
the GIL with fetch loops; the latencies are those of the control plane, but N consumers and the coordinator still
share one interpreter (and, here, two CPUs), which a deployment of separate processes would not.

The tables go to stdout, everything to a JSON file (default ``bench-results/consumer.json``).
"""
