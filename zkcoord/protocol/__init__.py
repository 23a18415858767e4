"""The group protocol's pure rules, shared by the coordinator and both consumers: the assignors, the partitioner's
hash, and the offset-reset policy.  Pure: no I/O.
"""
