"""The classic protocol's coordinator side (seed 001, issue 17): the strategy vote, the leader, the join record, and
the leader's sync record waited for and validated before the eager stop/start path distributes it
(``docs/classic-protocol.md``).

May import the coordinator's own modules below the rebalancer (attempt, plan, sending), the layout and the protocol.
"""
