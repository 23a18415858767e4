"""KIP-848's consumer protocol on the coordinator's side (``docs/protocol.md``, "KIP-848: the consumer protocol").

* :mod:`~.engine` -- the :class:`~.engine.Reconciler`: group epochs, rounds of member steps, acknowledgements;
* :mod:`~.members` -- joins, leaves, static members held and replaced, members fenced and released;
* :mod:`~.acks` -- acknowledgements, this design's heartbeat (a lost command sent again);
* :mod:`~.model` -- pure: the group's model, its target, a round's steps, which thread fetches what;
* :mod:`~.ops` -- pure: the operations that write the records, commands and owner znodes;
* :mod:`~.store` -- reading a group back from ZooKeeper, or rebuilding it when its records cannot be trusted.

The rules themselves (the member state machine, ``reconcile``, the epochs) are :mod:`zkcoord.protocol.kip848`'s.
"""
