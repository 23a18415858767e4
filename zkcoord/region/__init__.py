"""Consistent regions over a consumer group (issue 24, seed 003; ``docs/regions.md``).

The members of one group take part in one region: they drain, checkpoint their offsets beside the application's
state, and reset together to a merged checkpoint or to the initial state.  Layers inside (imports go one way):
``states`` (the client state machine), ``config``, ``store`` (the local checkpoint store) and ``shared`` (the
ZooKeeper shared data) at the bottom; ``positions`` (start positions); ``member`` (:class:`ConsistentRegion`, over
:class:`zkcoord.consumer.Consumer`); ``app`` (the demo's member application) and ``driver`` (the demo's control plane)
on top.  May import ``consumer``, ``data``, ``zk``, ``layout``, ``protocol``, ``runtime``, ``errors``.
"""
