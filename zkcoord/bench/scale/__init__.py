"""Scale benchmarks of the coordinator: many consumer sessions (``swarm``) and a coordinator failover at scale.

* :mod:`zkcoord.bench.scale.swarm`: one process running thousands of control-plane consumer sessions (one TCP
  connection and one real session per consumer); its command line, ready and stats files.  Its parts by role:
  :mod:`~zkcoord.bench.scale.member` (one consumer: session, registration, channel and commands) and
  :mod:`~zkcoord.bench.scale.wire` (a small asyncio ZooKeeper client on kazoo's wire serialization).
* :mod:`zkcoord.bench.scale.failover` (``zkcoord bench scale``): ZooKeeper, two brokers and a few swarm processes;
  forms the groups, SIGKILLs the coordinator and measures the time from its session's expiry until the new
  coordinator has re-examined every group.  Its parts by role: :mod:`~zkcoord.bench.scale.params` (parameters,
  result record, constants), :mod:`~zkcoord.bench.scale.children` (swarm and py-spy child processes),
  :mod:`~zkcoord.bench.scale.observe` (journals followed as they grow, polls with deadlines, group states),
  :mod:`~zkcoord.bench.scale.report` (table and JSON).
* :mod:`zkcoord.bench.scale.probe`: unit costs measured from outside the coordinator on the same loaded cluster.
* :mod:`zkcoord.bench.scale.profile`: reads a py-spy profile of the new coordinator (collapsed stacks) and says where
  its worker thread's time went (``python -m zkcoord.bench.scale.profile FILE``).
"""
