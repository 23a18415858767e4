"""A group's dynamic configuration, ``/config/groups/<g>`` (seed 000: "in ZK mode, the dynamic group configurations
will be stored in the /config/groups znode"), and its codec.

:class:`GroupConfig` holds the keys an operator may set for one group (``zkcoord group config set``); a key not set
leaves the coordinator's own setting in force.  The keys and what the coordinator does with them are in
``docs/zookeeper-layout.md`` ("Group configs"):

==========================  ========================================================================================
``assignor``                ``uniform`` or ``range`` (KIP-848's server-side assignor names, ``group.consumer.
                            assignors``): the group's assignor, in place of the coordinator's choice
``rebalance.timeout.ms``    how long a rebalance step waits for its acknowledgements, in place of the coordinator's
                            ``--rebalance-timeout`` (the members' poll intervals are still added to a stop step)
``max.size``                the group's maximum member count (Kafka's ``group.consumer.max.size``): the members
                            that registered last beyond it are given nothing (GROUP_MAX_SIZE_REACHED)
==========================  ========================================================================================

The znode's format is Kafka's for its config znodes (``/config/topics/<t>`` since 0.8.1): ``{"version":1,
"config":{"max.size":"2"}}``, every value a string.  Decoding is strict: an unknown key, a value out of range, a
non-canonical number, another field or another version is refused (:class:`~zkcoord.errors.CodecError`); the whole
config is then unreadable, and readers use the defaults (S7).

Pure: no I/O.  May import :mod:`zkcoord.errors` and :mod:`zkcoord.layout.znodes` only (not
:mod:`zkcoord.protocol`: a test keeps :data:`ASSIGNOR_NAMES` in step with its server-side assignors).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Self

from zkcoord.errors import CodecError, ConfigurationError
from zkcoord.layout.znodes import FORMAT_VERSION, INT_TEXT, dump_object, get_field, load_object

#: The assignors a group config may name: KIP-848's server-side assignors (``group.consumer.assignors``' default).
ASSIGNOR_NAMES = ("uniform", "range")
#: ``rebalance.timeout.ms`` bounds: the coordinator's own ``--rebalance-timeout`` range (0.05..3600 s).
MIN_REBALANCE_TIMEOUT_MS = 50
MAX_REBALANCE_TIMEOUT_MS = 3_600_000
#: ``max.size`` bounds: Kafka's ``group.consumer.max.size`` is a Java int, at least 1.
MAX_GROUP_SIZE = 2**31 - 1

ASSIGNOR = "assignor"
REBALANCE_TIMEOUT_MS = "rebalance.timeout.ms"
MAX_SIZE = "max.size"
#: Every key, in the order they are shown; each maps to the field of :class:`GroupConfig` named alike.
KEYS = (ASSIGNOR, REBALANCE_TIMEOUT_MS, MAX_SIZE)
_FIELDS = {ASSIGNOR: "assignor", REBALANCE_TIMEOUT_MS: "rebalance_timeout_ms", MAX_SIZE: "max_size"}


def _int_value(key: str, text: str, low: int, high: int) -> int:
    # Canonical decimals only ("01", "+1", " 1", "1e3" refused), and the length checked before int() converts it.
    if len(text) > len(str(high)) or not INT_TEXT.fullmatch(text) or not low <= int(text) <= high:
        raise ConfigurationError(f"{key} must be an integer in {low}..{high}, got {text[:40]!r}")
    return int(text)


def parse_value(key: str, text: str) -> str | int:
    """The value of ``key`` given as ``text`` (as typed, or as stored).

    :raises ConfigurationError: ``key`` is unknown or ``text`` is not one of its values (one line, naming both).
    """
    if key == ASSIGNOR:
        if text not in ASSIGNOR_NAMES:
            raise ConfigurationError(f"{ASSIGNOR} must be one of {', '.join(ASSIGNOR_NAMES)}, got {text[:40]!r}")
        return text
    if key == REBALANCE_TIMEOUT_MS:
        return _int_value(key, text, MIN_REBALANCE_TIMEOUT_MS, MAX_REBALANCE_TIMEOUT_MS)
    if key == MAX_SIZE:
        return _int_value(key, text, 1, MAX_GROUP_SIZE)
    raise ConfigurationError(f"unknown group config key {key[:60]!r} (known: {', '.join(KEYS)})")


def check_keys(keys: Iterable[str]) -> list[str]:
    """``keys`` if each is a known key, else :class:`ConfigurationError` naming the first that is not."""
    out = list(keys)
    for key in out:
        if key not in _FIELDS:
            raise ConfigurationError(f"unknown group config key {key[:60]!r} (known: {', '.join(KEYS)})")
    return out


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """One group's dynamic configuration; ``None``: not set (the coordinator's own setting applies).  Validates
    itself: :class:`ConfigurationError` for a value out of its range."""

    assignor: str | None = None
    rebalance_timeout_ms: int | None = None
    max_size: int | None = None

    def __post_init__(self) -> None:
        for key, value in self._items():
            # bool is an int in Python, and never a value of these keys.
            if isinstance(value, bool) or not isinstance(value, str | int) or parse_value(key, str(value)) != value:
                raise ConfigurationError(f"{key} cannot be {value!r}")

    def _items(self) -> list[tuple[str, str | int]]:
        pairs = [(key, getattr(self, _FIELDS[key])) for key in KEYS]
        return [(key, value) for key, value in pairs if value is not None]

    @classmethod
    def from_mapping(cls, values: Mapping[str, str]) -> Self:
        """A config from ``key -> text`` (the CLI's ``key=value`` pairs, a znode's ``config``).

        :raises ConfigurationError: an unknown key or a bad value.
        """
        parsed = {key: parse_value(key, text) for key, text in values.items()}  # an unknown key raises here
        kwargs: dict[str, Any] = {_FIELDS[key]: value for key, value in parsed.items()}
        return cls(**kwargs)

    def to_mapping(self) -> dict[str, str]:
        """The keys set, ``key -> text``, in :data:`KEYS` order (what ``from_mapping`` reads back)."""
        return {key: str(value) for key, value in self._items()}

    @property
    def empty(self) -> bool:
        return not self._items()

    def updated(self, other: GroupConfig) -> GroupConfig:
        """This config with every key ``other`` sets set to ``other``'s value."""
        return replace(
            self, **{f.name: getattr(other, f.name) for f in fields(other) if getattr(other, f.name) is not None}
        )

    def without(self, keys: Iterable[str]) -> GroupConfig:
        """This config with ``keys`` unset.  :raises ConfigurationError: an unknown key."""
        return replace(self, **dict.fromkeys((_FIELDS[key] for key in check_keys(keys)), None))

    def rebalance_timeout_s(self, default_s: float) -> float:
        """The rebalance step timeout in seconds: ``rebalance.timeout.ms`` if set, else ``default_s``."""
        return default_s if self.rebalance_timeout_ms is None else self.rebalance_timeout_ms / 1000

    def over_max_size(self, incarnations: Mapping[str, int]) -> list[str]:
        """The members beyond ``max.size``, sorted: those that registered last (``incarnations``: consumer id ->
        ``czxid`` of its registration, which orders registrations by creation).  Kafka refuses the joins beyond the
        maximum (GROUP_MAX_SIZE_REACHED) and keeps the members it has; so here the oldest registrations stay in.
        A member that registers again (a new session) is a new registration, and waits behind the others."""
        if self.max_size is None or len(incarnations) <= self.max_size:
            return []
        newest_first = sorted(incarnations, key=lambda cid: (incarnations[cid], cid), reverse=True)
        return sorted(newest_first[: len(incarnations) - self.max_size])

    # --- codec ----------------------------------------------------------------------------------------------------

    def encode(self) -> bytes:
        """``/config/groups/<g>``: Kafka's config znode format, ``{"config":{...},"version":1}``, values as text."""
        return dump_object({"version": FORMAT_VERSION, "config": self.to_mapping()})

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> Self:
        """:raises CodecError: anything but exactly ``version`` 1 and a ``config`` object of known keys with valid
        text values."""
        what = "group config"
        obj = load_object(what, data, path)
        extra = sorted(set(obj) - {"version", "config"})
        if extra:
            raise CodecError(what, f"unknown field {extra[0][:60]!r}", path)
        config = get_field(obj, "config", dict, what, path)
        for key, value in config.items():
            if not isinstance(value, str):
                raise CodecError(what, f"value of {key[:60]!r} must be a string, got {type(value).__name__}", path)
        try:
            return cls.from_mapping(config)
        except ConfigurationError as e:
            raise CodecError(what, str(e), path) from e
