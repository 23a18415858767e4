"""The fault-injection testbed: child processes with deadlines (:mod:`~zkcoord.testbed.procs`) and the scenarios
that run a cluster, inject faults and hand the journals to the analysis (:mod:`~zkcoord.testbed.scenario`).
"""
