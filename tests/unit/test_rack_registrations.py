"""Racks in registrations: a broker's (``broker --rack``) and a consumer's (``consume --rack``), each an optional
``"rack"`` key written only when set (so a registration without one stays byte-for-byte Kafka 0.8's), validated
like the other names, refused in one line when bad."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from tests.cli import run_cli
from zkcoord.broker import BrokerConfig
from zkcoord.cli import cli
from zkcoord.consumer import ConsumerConfig, Subscription
from zkcoord.errors import CodecError, ConfigurationError
from zkcoord.layout.registrations import BrokerRegistration, MemberRegistration, Pattern
from zkcoord.zk import ZkConfig

racks = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", min_size=1, max_size=40)
BAD = ['""', '"a b"', '"."', '".."', '"r\\u00e9"', '"x/y"', "1", "null", "true", '["a"]', f'"{"r" * 250}"']


@given(rack=racks.filter(lambda r: r not in (".", "..")))
def test_a_broker_registration_round_trips_its_rack(rack: str) -> None:
    reg = BrokerRegistration("h", 9092, 1, rack=rack)
    assert json.loads(reg.encode())["rack"] == rack
    assert BrokerRegistration.decode(reg.encode()) == reg


@given(rack=racks.filter(lambda r: r not in (".", "..")))
def test_a_member_registration_round_trips_its_rack(rack: str) -> None:
    reg = MemberRegistration(Pattern.STATIC, {"t": 1}, 1, consumer_protocol=True, rack=rack)
    assert json.loads(reg.encode())["rack"] == rack
    assert MemberRegistration.decode(reg.encode()) == reg


def test_without_a_rack_nothing_is_written_and_kafkas_bytes_stay() -> None:
    broker = b'{"host":"h","jmx_port":-1,"port":9092,"timestamp":"1","version":1}'
    assert BrokerRegistration.decode(broker).rack is None
    assert BrokerRegistration.decode(broker).encode() == broker
    member = b'{"pattern":"static","subscription":{"t":1},"timestamp":"1","version":1}'
    assert MemberRegistration.decode(member).rack is None
    assert MemberRegistration.decode(member).encode() == member


@pytest.mark.parametrize("value", BAD)
def test_a_malformed_rack_is_refused(value: str) -> None:
    broker = f'{{"host":"h","port":1,"timestamp":"1","version":1,"rack":{value}}}'.encode()
    with pytest.raises(CodecError, match="rack") as info:
        BrokerRegistration.decode(broker, "/brokers/ids/1")
    assert "/brokers/ids/1" in str(info.value) and "\n" not in str(info.value)
    member = f'{{"pattern":"static","subscription":{{"t":1}},"timestamp":"1","version":1,"rack":{value}}}'.encode()
    with pytest.raises(CodecError, match="rack"):
        MemberRegistration.decode(member, "/consumers/groups/g/ids/c")


@pytest.mark.parametrize("rack", ["", "a b", "..", "r" * 250, "zone/1"])
def test_a_bad_rack_is_refused_by_the_configs_in_one_line(rack: str) -> None:
    with pytest.raises(ConfigurationError, match="invalid rack name") as info:
        BrokerConfig(1, ZkConfig.from_string("127.0.0.1:2181"), host=socket.gethostname(), rack=rack)
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigurationError, match="invalid rack name"):
        ConsumerConfig("g", Subscription.static({"t": 1}), "127.0.0.1:2181", Path(), rack=rack)


def test_the_consumer_publishes_its_rack() -> None:
    config = ConsumerConfig("g", Subscription.static({"t": 1}), "127.0.0.1:2181", Path(), rack="eu-1a")
    assert config.subscription.registration(1, rack=config.rack).rack == "eu-1a"


def test_the_commands_document_and_refuse_the_flag(tmp_path: Path) -> None:
    runner = CliRunner()
    for command in ("broker", "consume"):
        helped = runner.invoke(cli, [command, "--help"])
        assert helped.exit_code == 0 and "--rack RACK" in helped.output
    legacy = [
        "consume",
        "--group",
        "g",
        "--topic",
        "t",
        "--protocol",
        "zk-client",
        "--rack",
        "a",
        "--zk",
        "127.0.0.1:1",
    ]
    refused = runner.invoke(cli, [*legacy, "--data-dir", str(tmp_path)])
    assert refused.exit_code != 0 and refused.stderr.strip().splitlines()[-1].startswith("Error: --rack is for")
    # One real process: a bad rack is one Error: line, no traceback.
    bad = run_cli("broker", "--id", "1", "--rack", "a b", "--zk", "127.0.0.1:1")
    assert bad.returncode != 0
    assert bad.stderr.strip().splitlines() == [
        "Error: invalid rack name 'a b': illegal characters ' '; use ASCII letters, digits, '.', '_', '-'"
    ]
