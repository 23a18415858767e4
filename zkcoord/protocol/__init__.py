"""The group protocol's pure rules, shared by the coordinator and both consumers: the assignors, the partitioner's
hash, the offset-reset policy, and KIP-848's reconciliation (:mod:`~zkcoord.protocol.kip848`).  Pure: no I/O.
May import :mod:`zkcoord.layout` (the records a rule moves) and :mod:`zkcoord.errors`.
"""
