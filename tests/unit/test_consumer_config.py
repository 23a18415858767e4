"""The consumer's poll interval: validated by its config, published in its registration, offered on the command
line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.cli import run_cli
from zkcoord.consumer import ConsumerConfig, Subscription
from zkcoord.errors import ConfigurationError
from zkcoord.layout.registrations import MemberRegistration


def _config(**kw: object) -> ConsumerConfig:
    return ConsumerConfig("g", Subscription.static({"t": 1}), "127.0.0.1:2181", Path(), **kw)  # type: ignore[arg-type]


def test_the_poll_interval_is_kafkas_by_default_and_published_in_milliseconds() -> None:
    assert _config().max_poll_interval_s == 300.0
    reg = Subscription.static({"t": 1}).registration(1, incremental=True, max_poll_interval_ms=2_500)
    assert json.loads(reg.encode())["max_poll_interval_ms"] == 2_500
    assert MemberRegistration.decode(reg.encode()) == reg
    assert "max_poll_interval_ms" not in json.loads(Subscription.static({"t": 1}).registration(1).encode())


@pytest.mark.parametrize("seconds", [0.0, 0.999, -1.0, 86_400.5, math.nan, math.inf])
def test_a_poll_interval_out_of_range_is_refused_in_one_line(seconds: float) -> None:
    with pytest.raises(ConfigurationError, match=r"max poll interval must be within 1\.\.86400 s") as info:
        _config(max_poll_interval_s=seconds)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("seconds", [1.0, 45.5, 86_400.0])
def test_a_poll_interval_in_range_is_accepted(seconds: float) -> None:
    assert _config(max_poll_interval_s=seconds).max_poll_interval_s == seconds


def test_the_consume_command_documents_the_flag() -> None:
    helped = run_cli("consume", "--help")
    assert helped.returncode == 0
    text = " ".join(helped.stdout.split())
    assert "--max-poll-interval SECONDS" in text and "max.poll.interval.ms" in text
