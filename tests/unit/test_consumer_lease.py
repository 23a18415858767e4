"""The consumer's lease (S6): renewed from when a round trip was sent, never moved back, killed by invalidation."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zkcoord.consumer import Consumer, ConsumerConfig, Subscription
from zkcoord.consumer.lease import Lease, lease_duration


class FakeClock:
    """A monotonic clock that moves only when told to."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_a_new_lease_is_not_valid() -> None:
    lease = Lease(2.0, clock=FakeClock())
    assert not lease.valid()
    assert lease.deadline == -math.inf
    assert lease.remaining() == 0.0


def test_a_renewal_holds_from_when_the_round_trip_was_sent() -> None:
    clock = FakeClock()
    lease = Lease(2.0, clock=clock)
    sent = lease.now()
    clock.advance(0.5)  # the reply arrives half a second later
    assert lease.renew(sent)
    assert lease.deadline == sent + 2.0
    assert lease.sent_at == sent
    assert lease.remaining() == pytest.approx(1.5)
    clock.advance(1.499)
    assert lease.valid()
    clock.advance(0.001)  # now == deadline: over
    assert not lease.valid()
    assert lease.remaining() == 0.0


def test_a_stale_renewal_never_moves_the_deadline_back() -> None:
    clock = FakeClock()
    lease = Lease(2.0, clock=clock)
    early, late = clock(), clock() + 1.0
    clock.advance(1.0)
    assert lease.renew(late)  # replies out of order: the later request's reply comes first
    assert not lease.renew(early)
    assert not lease.renew(late)  # the same round trip again
    assert lease.deadline == late + 2.0


def test_invalidation_ends_the_lease_until_a_round_trip_sent_after_it_is_acknowledged() -> None:
    clock = FakeClock()
    lease = Lease(2.0, clock=clock)
    before = clock()
    clock.advance(0.1)
    assert lease.renew(clock())
    clock.advance(0.1)
    lease.invalidate()  # SUSPENDED
    invalidated_at = clock()
    assert not lease.valid()
    assert lease.deadline == invalidated_at  # a real instant, not -inf: callers report it
    clock.advance(0.1)
    assert not lease.renew(before)  # sent before the invalidation: proves nothing about the session now
    assert not lease.renew(invalidated_at)
    assert not lease.valid()
    sent = clock()
    assert lease.renew(sent)
    assert lease.valid()
    assert lease.deadline == sent + 2.0


def test_invalidating_an_expired_lease_keeps_the_time_it_ran_out() -> None:
    clock = FakeClock()
    lease = Lease(1.0, clock=clock)
    lease.renew(clock())
    clock.advance(5.0)
    lease.invalidate()
    assert lease.deadline == clock() - 4.0
    lease.invalidate()  # idempotent
    assert lease.deadline == clock() - 4.0


def test_a_sent_at_from_the_future_is_refused() -> None:
    clock = FakeClock()
    lease = Lease(1.0, clock=clock)
    with pytest.raises(ValueError, match=r"Lease\.now\(\)"):
        lease.renew(clock() + 1.0)


def test_lease_duration_is_a_fraction_of_the_session_timeout() -> None:
    assert lease_duration(6.0) == 3.0
    assert lease_duration(10.0, fraction=0.25) == 2.5
    for timeout, fraction in ((0.0, 0.5), (-1.0, 0.5), (6.0, 0.0), (6.0, 1.0), (6.0, 1.5)):
        with pytest.raises(ValueError):
            lease_duration(timeout, fraction)
    with pytest.raises(ValueError):
        Lease(0.0)


# --- the lease against a model -------------------------------------------------------------------------------------

#: ("advance", dt) | ("renew", age) with age = now - sent_at | ("invalidate", 0)
Step = tuple[str, float]
steps = st.lists(
    st.one_of(
        st.tuples(st.just("advance"), st.floats(0.0, 3.0)),
        st.tuples(st.just("renew"), st.floats(0.0, 4.0)),
        st.tuples(st.just("invalidate"), st.just(0.0)),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(steps=steps, duration=st.floats(0.1, 3.0))
def test_the_lease_is_valid_exactly_when_an_acknowledged_round_trip_sent_after_the_last_invalidation_is_recent(
    steps: list[Step], duration: float
) -> None:
    clock = FakeClock()
    lease = Lease(duration, clock=clock)
    acknowledged: list[float] = []  # sent_at of every round trip acknowledged
    invalidated_at = -math.inf
    for kind, value in steps:
        if kind == "advance":
            clock.advance(value)
        elif kind == "renew":
            lease.renew(clock() - value)
            acknowledged.append(clock() - value)
        else:
            lease.invalidate()
            invalidated_at = clock()
        counted = [sent for sent in acknowledged if sent > invalidated_at]
        expected = bool(counted) and clock() < max(counted) + duration
        assert lease.valid() == expected
        assert lease.deadline <= max(acknowledged, default=-math.inf) + duration  # never beyond what was heard


def test_a_shorter_granted_session_shortens_the_lease_at_once() -> None:
    clock = FakeClock()
    lease = Lease(5.0, clock=clock)
    sent = lease.now()
    assert lease.renew(sent)
    lease.resize(0.5)  # the server granted a 1 s session instead of the 10 s asked for
    assert lease.deadline == sent + 0.5
    clock.advance(0.6)
    assert not lease.valid()
    assert lease.renew(lease.now())
    assert lease.deadline == clock.now + 0.5
    lease.resize(2.0)  # a longer one applies from the next renewal, never to the current deadline
    assert lease.deadline == clock.now + 0.5
    with pytest.raises(ValueError, match="positive"):
        lease.resize(0)


class FakeWall:
    """Wall-clock nanoseconds that move with a :class:`FakeClock` (a fixed offset, as on a machine without NTP
    steps)."""

    def __init__(self, clock: FakeClock, offset_ns: int) -> None:
        self.clock, self.offset_ns = clock, offset_ns

    def __call__(self) -> int:
        return self.offset_ns + round(self.clock.now * 1e9)


@given(
    offset_ns=st.integers(1_600_000_000_000_000_000, 1_900_000_000_000_000_000),
    before_deadline_us=st.integers(1, 2_000_000),
    written_after_us=st.integers(0, 50_000),
)
def test_records_handed_out_before_the_lease_deadline_are_never_journalled_after_it(
    offset_ns: int, before_deadline_us: int, written_after_us: int
) -> None:
    """``records.consumed`` carries ``at_ms``, the moment the records were handed out (rounded down), not the later
    moment the event is written; it is never after a lease-ended ``fetch.stopped``'s ``at_ms`` (the deadline,
    rounded up), converted later still: the analysis compares the two (S2)."""
    clock = FakeClock(5000.0)
    wall = FakeWall(clock, offset_ns)
    config = ConsumerConfig(group="g", subscription=Subscription.static({"t": 1}), zk="127.0.0.1:1", data_dir=Path())
    consumer = Consumer(config, clock=clock, wall_ns=wall)
    consumer.lease.renew(clock())
    handed_at = consumer.lease.deadline - before_deadline_us / 1e6
    clock.now = handed_at
    exact_ns = wall()
    clock.advance(before_deadline_us / 1e6 + written_after_us / 1e6)  # the event is written at or after the deadline
    handed_ms = consumer._wall_ms_at(handed_at, up=False)
    assert handed_ms == exact_ns // 1_000_000  # the hand-out's millisecond, not the write's
    assert handed_ms <= consumer._lease_deadline_ms()
