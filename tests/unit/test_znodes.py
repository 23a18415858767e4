"""Codecs of every znode: round trips (hypothesis), Kafka's own examples, and malformed data refused (S7)."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zkcoord.coordinator.acks import acknowledges
from zkcoord.errors import CodecError
from zkcoord.layout.commands import (
    Acknowledged,
    Command,
    CommandOption,
    command_sequence,
    decode_acknowledged,
    encode_acknowledged,
)
from zkcoord.layout.group_state import GroupPhase, GroupState, decode_owner, encode_owner
from zkcoord.layout.kip848 import CurrentAssignment, GroupEpochs, MemberTarget
from zkcoord.layout.registrations import (
    MAX_POLL_INTERVAL_MS,
    BrokerRegistration,
    CoordinatorInfo,
    MemberRegistration,
    Pattern,
    TopicAssignment,
)
from zkcoord.layout.znodes import decode_int, encode_int

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", min_size=1, max_size=40)
topics = names.filter(lambda s: s not in (".", ".."))
ms = st.integers(min_value=0, max_value=2**53)
threads = st.builds(lambda c, n: f"{c}-{n}", names, st.integers(0, 1000))


@given(host=names, port=st.integers(1, 65535), ts=ms, jmx=st.integers(-1, 65535))
def test_broker_registration_round_trip(host: str, port: int, ts: int, jmx: int) -> None:
    reg = BrokerRegistration(host=host, port=port, timestamp_ms=ts, jmx_port=jmx)
    assert BrokerRegistration.decode(reg.encode()) == reg


def test_broker_registration_is_kafka_format() -> None:
    obj = json.loads(BrokerRegistration(host="h", port=9092, timestamp_ms=1396019252998).encode())
    assert obj == {"version": 1, "host": "h", "port": 9092, "jmx_port": -1, "timestamp": "1396019252998"}
    # Kafka's wiki example has no timestamp; ours always writes one, but accepts Kafka 0.8.2's own form:
    kafka = b'{"version":1,"host":"192.168.1.148","port":9092,"jmx_port":9999,"timestamp":"1"}'
    assert BrokerRegistration.decode(kafka).port == 9092


@given(st.lists(st.lists(st.integers(0, 1000), min_size=1, max_size=3).map(tuple), min_size=1, max_size=50))
def test_topic_assignment_round_trip(replicas: list[tuple[int, ...]]) -> None:
    assignment = TopicAssignment(tuple(replicas))
    assert TopicAssignment.decode(assignment.encode()) == assignment


def test_topic_assignment_reads_kafka_example() -> None:
    assert TopicAssignment.decode(b'{"version":1,"partitions":{"0":[0,1,3]}}').replicas == ((0, 1, 3),)


@given(broker=st.integers(0, 2**31 - 1), epoch=st.integers(0, 2**40), ts=ms)
def test_coordinator_info_round_trip(broker: int, epoch: int, ts: int) -> None:
    info = CoordinatorInfo(broker_id=broker, epoch=epoch, timestamp_ms=ts)
    assert CoordinatorInfo.decode(info.encode()) == info


@given(sub=st.dictionaries(topics, st.integers(1, 64), min_size=1, max_size=5), ts=ms)
def test_static_member_round_trip(sub: dict[str, int], ts: int) -> None:
    reg = MemberRegistration(pattern=Pattern.STATIC, subscription=sub, timestamp_ms=ts)
    assert MemberRegistration.decode(reg.encode()) == reg


@given(sub=st.dictionaries(topics, st.integers(1, 64), min_size=1, max_size=5), ts=ms,
       interval=st.integers(1, MAX_POLL_INTERVAL_MS), incremental=st.booleans())  # fmt: skip
def test_a_member_registration_round_trips_its_poll_interval(
    sub: dict[str, int], ts: int, interval: int, incremental: bool
) -> None:
    reg = MemberRegistration(Pattern.STATIC, sub, ts, incremental=incremental, max_poll_interval_ms=interval)
    assert json.loads(reg.encode())["max_poll_interval_ms"] == interval
    assert MemberRegistration.decode(reg.encode()) == reg


def test_a_registration_without_a_poll_interval_is_unknown_and_stays_kafkas_bytes() -> None:
    kafka = b'{"pattern":"static","subscription":{"t":1},"timestamp":"1396019252998","version":1}'
    reg = MemberRegistration.decode(kafka)
    assert reg.max_poll_interval_ms is None
    assert reg.encode() == kafka  # nothing written for an unknown interval


@pytest.mark.parametrize(
    "value", ["0", "-1", "1.5", '"300000"', "true", "null", "[1]", str(MAX_POLL_INTERVAL_MS + 1), "1e400"]
)
def test_a_malformed_poll_interval_is_refused(value: str) -> None:
    data = f'{{"pattern":"static","subscription":{{"t":1}},"timestamp":"1","version":1,"max_poll_interval_ms":{value}}}'
    with pytest.raises(CodecError, match="max_poll_interval_ms") as info:
        MemberRegistration.decode(data.encode(), "/consumers/groups/g/ids/c")
    assert "/consumers/groups/g/ids/c" in str(info.value)


def test_member_registration_reads_kafka_examples() -> None:
    static = MemberRegistration.decode(
        b'{"version":1,"subscription":{"topic":1},"pattern":"static","timestamp":"1396019252998"}'
    )
    assert static.pattern is Pattern.STATIC and static.subscription == {"topic": 1}
    white = MemberRegistration.decode(
        b'{"version":1,"pattern":"white_list","subscription":{"abc.*":2},"timestamp":"1"}'
    )
    assert white.pattern is Pattern.WHITE_LIST and white.subscription == {"abc.*": 2}


@given(
    option=st.sampled_from(CommandOption),
    epoch=st.integers(0, 2**40),
    generation=st.integers(0, 2**40),
    group=topics,
    ownership=st.dictionaries(topics, st.dictionaries(st.integers(0, 9999), threads, max_size=5), max_size=4),
    issued=ms,
)
def test_command_round_trip(
    option: CommandOption, epoch: int, generation: int, group: str, ownership: dict[str, dict[int, str]], issued: int
) -> None:
    start = option is CommandOption.START_FETCHER
    owned = ownership if start else {}
    cmd = Command(option=option, epoch=epoch, generation=generation, group=group, ownership=owned, issued_ms=issued)
    assert Command.decode(cmd.encode()) == cmd
    # The incremental forms: a start says its ownership is the whole assignment; a stop names what it revokes.
    revoke = None if start else {t: tuple(sorted(parts)) for t, parts in ownership.items()}
    partial = Command(
        option, epoch, generation, group, owned, issued, revoke=revoke, incremental=start, incarnation=generation
    )
    assert Command.decode(partial.encode()) == partial
    # The hand-over forms: a stop says whom each revoked partition goes to; a start which partitions it awaits.
    handover = None if start else {t: dict.fromkeys(parts, "other-0") for t, parts in ownership.items() if parts}
    awaiting = {t: tuple(sorted(parts)) for t, parts in ownership.items() if parts} if start else None
    one_step = Command(
        option,
        epoch,
        generation,
        group,
        owned,
        issued,
        revoke=revoke,
        incremental=start,
        incarnation=generation,
        handover=handover or None,
        awaiting=awaiting or None,
    )
    assert Command.decode(one_step.encode()) == one_step


@given(st.integers(0, 2**63 - 1))
def test_int_round_trip(value: int) -> None:
    assert decode_int("offset", encode_int(value)) == value


@given(threads)
def test_owner_round_trip(thread: str) -> None:
    assert decode_owner(encode_owner(thread)) == thread


MALFORMED = [
    (
        Command.decode,
        b'{"version":1,"option":"stop-fetcher","epoch":1,"generation":1,"group":"g","revoke":[1]}',
        "revoke",
    ),
    (
        Command.decode,
        b'{"version":1,"option":"stop-fetcher","epoch":1,"generation":1,"group":"g","revoke":{"t":[-1]}}',
        "partition numbers",
    ),
    (
        Command.decode,
        b'{"version":1,"option":"stop-fetcher","epoch":1,"generation":1,"group":"g","incremental":true}',
        "start-fetcher only",
    ),
    (
        Command.decode,
        b'{"version":1,"option":"start-fetcher","epoch":1,"generation":1,"group":"g","ownership":{},"revoke":{}}',
        "no revoke",
    ),
    (
        Command.decode,
        b'{"version":1,"option":"stop-fetcher","epoch":1,"generation":1,"group":"g","revoke":{"t":[1]},'
        b'"handover":{"t":{"2":"c-0"}}}',
        "partitions of the revoke list",
    ),
    (
        Command.decode,
        b'{"version":1,"option":"stop-fetcher","epoch":1,"generation":1,"group":"g","awaiting":{"t":[1]}}',
        "start-fetcher only",
    ),
    (
        Command.decode,
        b'{"version":1,"option":"start-fetcher","epoch":1,"generation":1,"group":"g","incremental":true,'
        b'"ownership":{"t":{"1":"c-0"}},"awaiting":{"t":[2]}}',
        "incremental start's ownership",
    ),
    (
        Command.decode,
        b'{"version":1,"option":"start-fetcher","epoch":1,"generation":1,"group":"g",'
        b'"ownership":{"t":{"1":"c-0"}},"awaiting":{"t":[1]}}',
        "incremental start's ownership",
    ),
    (
        MemberRegistration.decode,
        b'{"version":1,"pattern":"static","subscription":{"a":1},"timestamp":"1","incremental":1}',
        "boolean",
    ),
    (BrokerRegistration.decode, b"", "empty data"),
    (BrokerRegistration.decode, b"{not json", "not JSON"),
    (BrokerRegistration.decode, b"[1,2]", "expected a JSON object"),
    (BrokerRegistration.decode, b'{"version":2,"host":"h","port":1,"timestamp":"1"}', "unsupported version"),
    (BrokerRegistration.decode, b'{"version":1,"port":1,"timestamp":"1"}', "missing field 'host'"),
    (BrokerRegistration.decode, b'{"version":1,"host":"h","port":70000,"timestamp":"1"}', "out of range"),
    (BrokerRegistration.decode, b'{"version":1,"host":"h","port":true,"timestamp":"1"}', "boolean"),
    (BrokerRegistration.decode, b'{"version":1,"host":"h","port":1,"timestamp":1}', "must be str"),
    (BrokerRegistration.decode, b'{"version":1,"host":"h","port":1,"timestamp":"-5"}', "decimal string"),
    (TopicAssignment.decode, b'{"version":1,"partitions":{}}', "no partitions"),
    (TopicAssignment.decode, b'{"version":1,"partitions":{"0":[0],"2":[0]}}', "without gaps"),
    (TopicAssignment.decode, b'{"version":1,"partitions":{"x":[0]}}', "not a partition number"),
    (TopicAssignment.decode, b'{"version":1,"partitions":{"0":"0"}}', "list of broker ids"),
    (MemberRegistration.decode, b'{"version":1,"pattern":"regex","subscription":{"a":1},"timestamp":"1"}', "unknown"),
    (
        MemberRegistration.decode,
        b'{"version":1,"pattern":"white_list","subscription":{"(":1},"timestamp":"1"}',
        "regex",
    ),
    (
        MemberRegistration.decode,
        b'{"version":1,"pattern":"black_list","subscription":{"(?i)abc":1},"timestamp":"1"}',
        r"\(outside the topic-pattern dialect\): at position 0, inline flags",
    ),
    (
        MemberRegistration.decode,
        b'{"version":1,"pattern":"white_list","subscription":{"a,b":1},"timestamp":"1"}',
        "TopicFilter",
    ),
    (
        MemberRegistration.decode,
        b'{"version":1,"pattern":"static","subscription":{"a/b":1},"timestamp":"1"}',
        "illegal",
    ),
    (MemberRegistration.decode, b'{"version":1,"pattern":"static","subscription":{"a":0},"timestamp":"1"}', "1..1024"),
    (MemberRegistration.decode, b'{"version":1,"pattern":"static","subscription":{},"timestamp":"1"}', "empty"),
    (
        MemberRegistration.decode,
        b'{"version":1,"pattern":"black_list","subscription":{"a":1,"b":1},"timestamp":"1"}',
        "exactly one regex",
    ),
    (Command.decode, b'{"version":1,"option":"pause","epoch":1,"generation":1,"group":"g"}', "unknown option"),
    (Command.decode, b'{"version":1,"option":"stop-fetcher","epoch":-1,"generation":1,"group":"g"}', "0..2\\^63-1"),
    (
        Command.decode,
        b'{"version":1,"option":"stop-fetcher","epoch":9223372036854775808,"generation":1,"group":"g"}',
        "0..2\\^63-1",
    ),
    (
        Command.decode,
        b'{"version":1,"option":"stop-fetcher","epoch":1,"generation":1000000000000000000000000000000,"group":"g"}',
        "0..2\\^63-1",
    ),
    (Command.decode, b'{"version":1,"option":"start-fetcher","epoch":1,"generation":1,"group":"g"}', "ownership"),
    (
        Command.decode,
        b'{"version":1,"option":"stop-fetcher","epoch":1,"generation":1,"group":"g","ownership":{}}',
        "carries no ownership",
    ),
    (
        Command.decode,
        b'{"version":1,"option":"start-fetcher","epoch":1,"generation":1,"group":"g","ownership":{"t":{"-1":"c-0"}}}',
        "bad partition",
    ),
]


@pytest.mark.parametrize(("decode", "data", "reason"), MALFORMED)
def test_malformed_data_is_refused_with_a_reason(decode: object, data: bytes, reason: str) -> None:
    with pytest.raises(CodecError, match=reason) as info:
        decode(data, "/some/path")  # type: ignore[operator]
    assert "/some/path" in str(info.value)


@pytest.mark.parametrize(
    "data", [b"", b"-1", b"1.5", b"abc", b"\xff", b"99999999999999999999", b"9223372036854775808", b"1e3"]
)
def test_malformed_integers_are_refused(data: bytes) -> None:
    with pytest.raises(CodecError):
        decode_int("offset", data)


@pytest.mark.parametrize("data", [b"", b"nothread", b"a b-1", b"\xff-1"])
def test_malformed_owner_is_refused(data: bytes) -> None:
    with pytest.raises(CodecError):
        decode_owner(data)


@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_crash_a_decoder(data: bytes) -> None:
    for decode in (
        BrokerRegistration.decode,
        TopicAssignment.decode,
        CoordinatorInfo.decode,
        MemberRegistration.decode,
        Command.decode,
    ):
        with contextlib.suppress(CodecError):
            decode(data)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        # Python refuses to convert a number this long (ValueError, not a JSON error)
        (b'{"version":1,"epoch":1' + b"0" * 5000 + b"}", "too long"),
        # the JSON decoder recurses once per level (RecursionError); a znode holds up to 1 MB of them
        (b"[" * 200_000 + b"]" * 200_000, "nested too deep"),
        (b'{"version":true}', "unsupported version True"),  # True == 1 in Python
        (b'{"version":1.0}', "unsupported version 1.0"),
    ],
)
def test_json_a_parser_chokes_on_is_refused_by_every_decoder(data: bytes, reason: str) -> None:
    for decode in (
        BrokerRegistration.decode,
        TopicAssignment.decode,
        CoordinatorInfo.decode,
        MemberRegistration.decode,
        Command.decode,
        GroupState.decode,
        CurrentAssignment.decode,
        GroupEpochs.decode,
        MemberTarget.decode,
    ):
        with pytest.raises(CodecError, match=reason):
            decode(data)


@given(
    generation=st.integers(0, 2**40),
    phase=st.sampled_from(GroupPhase),
    epoch=st.integers(0, 2**40),
    members=st.dictionaries(names, st.integers(0, 2**62), max_size=5),
    target=st.dictionaries(topics, st.dictionaries(st.integers(0, 9999), threads, max_size=5), max_size=4),
    sent=st.integers(0, 1000),
    error=st.text(max_size=50),
)
def test_group_state_round_trip(
    generation: int,
    phase: GroupPhase,
    epoch: int,
    members: dict[str, int],
    target: dict[str, dict[int, str]],
    sent: int,
    error: str,
) -> None:
    state = GroupState(generation, phase, epoch, members, target, "range", 5, sent, 1, error)
    assert GroupState.decode(state.encode()) == state


def test_group_state_refuses_unknown_phase() -> None:
    bad = GroupState(1, GroupPhase.STABLE, 1, {}, {}).encode().replace(b'"stable"', b'"dancing"')
    with pytest.raises(CodecError, match="unknown phase"):
        GroupState.decode(bad)


# --- a channel's data: the last command acknowledged in it ------------------------------------------------------


@given(epoch=st.integers(0, 2**31), generation=st.integers(0, 2**31), seq=st.integers(0, 2**31 - 1))
def test_a_channel_record_round_trips(epoch: int, generation: int, seq: int) -> None:
    name = f"cmd-{epoch}-{generation}-stop-{seq:010d}"
    assert decode_acknowledged(encode_acknowledged(name)) == Acknowledged(name, seq)


def test_an_empty_channel_records_nothing_and_a_name_without_a_sequence_is_not_recorded() -> None:
    assert decode_acknowledged(b"") is None
    assert decode_acknowledged(None) is None
    assert encode_acknowledged("junk") is None
    assert command_sequence("cmd-7-12-start-0000000042") == 42
    assert command_sequence("cmd-7-12-start-42") == -1


@pytest.mark.parametrize(
    "data",
    [
        b"42",
        b"\xff\xfe",
        b"cmd-7-12-stop-",
        "cmd-7-12-stop-٠١٢٣٤٥٦٧٨٩".encode(),
        b"cmd 7 0000000001\n",
        b"x" * 300 + b"0000000001",
    ],
)
def test_a_channel_record_written_by_hand_is_refused(data: bytes) -> None:
    with pytest.raises(CodecError):
        decode_acknowledged(data)


def test_a_record_acknowledges_its_command_and_every_earlier_one_only() -> None:
    """The coordinator's rule (zkcoord.coordinator.acks): a record of the command or of a later one acknowledges it;
    with the command's name unknown (a resumed write), a record of a command of the step does."""
    step = "cmd-7-12-stop-"
    record = Acknowledged("cmd-7-12-stop-0000000005", 5)
    assert acknowledges(record, "cmd-7-12-stop-0000000005", step)
    assert acknowledges(record, "cmd-7-12-stop-0000000004", step)
    assert not acknowledges(record, "cmd-7-12-stop-0000000006", step)
    assert not acknowledges(None, "cmd-7-12-stop-0000000005", step)
    assert acknowledges(record, None, step)
    assert not acknowledges(Acknowledged("cmd-7-11-start-0000000004", 4), None, step)
    assert not acknowledges(record, "cmd-7-12-stop-junk", step)
