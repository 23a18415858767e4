"""Scale benchmarks of the coordinator: many consumer sessions (``swarm``) and a coordinator failover at scale.

* :mod:`benchmarks.scale.swarm`: one process running thousands of control-plane consumer sessions (one TCP
  connection and one real session per consumer); its command line, ready and stats files.  Its parts by role:
  :mod:`~benchmarks.scale.member` (one consumer: session, registration, channel and commands) and
  :mod:`~benchmarks.scale.wire` (a small asyncio ZooKeeper client on kazoo's wire serialization).
* :mod:`benchmarks.scale.failover`: ZooKeeper, two brokers and a few swarm processes; forms the groups, SIGKILLs the
  coordinator and measures the time from its session's expiry until the new coordinator has re-examined every group.
  Its parts by role: :mod:`~benchmarks.scale.params` (parameters, result record, constants),
  :mod:`~benchmarks.scale.children` (swarm and py-spy child processes), :mod:`~benchmarks.scale.observe` (journals
  followed as they grow, polls with deadlines, group states), :mod:`~benchmarks.scale.report` (table and JSON).
* :mod:`benchmarks.scale.probe`: unit costs measured from outside the coordinator on the same loaded cluster.
* :mod:`benchmarks.scale.profile`: reads a py-spy profile of the new coordinator (collapsed stacks) and says where its
  worker thread's time went.
"""
