"""User assignors for the classic protocol's tests, loaded by consumer processes by name
(``--assignors tests.classic_assignors:Flaky``): what a user's own ``module:Class`` looks like, and ones that fail.

``Flaky`` assigns as ``range`` does, unless its process's environment says otherwise (``CLASSIC_TEST_ASSIGNOR``):
``raise`` raises, ``invalid`` leaves one partition unassigned, ``garbage`` returns a string, ``hang`` never returns
(an hour's sleep), ``exit`` raises SystemExit (not an Exception), ``huge`` returns ~2 MB (past ZooKeeper's 1 MB limit
of a request).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping

from zkcoord.protocol.assignors import range_assign


class Flaky:
    name = "flaky"

    def assign(
        self,
        subscriptions: Mapping[str, Mapping[str, int]],
        partitions: Mapping[str, int],
        current: Mapping[str, Mapping[int, str]],
    ) -> object:
        mode = os.environ.get("CLASSIC_TEST_ASSIGNOR", "")
        if mode == "raise":
            raise RuntimeError("this assignor is broken on purpose")
        if mode == "hang":
            threading.Event().wait()  # never returns: the leader's bound must end the wait, not this
        if mode == "exit":
            sys.exit(3)
        if mode == "huge":
            return {"t": dict.fromkeys(range(10_000), "x" * 200)}
        if mode == "garbage":
            return "not an assignment"
        result = range_assign(subscriptions, partitions)
        if mode == "invalid":
            topic = sorted(result)[0]
            del result[topic][max(result[topic])]
        return result
