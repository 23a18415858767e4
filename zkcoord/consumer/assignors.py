"""Loading a classic-protocol member's client-side assignors by name (``--assignors``; ``docs/classic-protocol.md``).

A name is a built-in's (:data:`~zkcoord.protocol.classic_group.BUILTINS`: ``range``, ``roundrobin``, ``sticky``,
``uniform``) or ``package.module:Class``, a user's own assignor: a class whose instances (made with no arguments)
have ``assign(subscriptions, partitions, current)`` returning ``topic -> partition -> thread id``
(``docs/classic-protocol.md`` has the interface and an example, ``docs/examples/sticky_range.py``).

Threads: any (loading imports the module once, through Python's import lock).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from zkcoord.errors import CodecError, ConfigurationError
from zkcoord.layout.classic import check_strategies
from zkcoord.protocol.classic_group import BUILTINS, ClientAssignor


def load_assignor(name: str) -> ClientAssignor:
    """The client-side assignor called ``name``.

    :raises ConfigurationError: not a built-in and not an importable ``module:Class`` whose instances have a callable
        ``assign`` (its import or its constructor raising is reported so too, in one line).
    """
    if name in BUILTINS:
        return BUILTINS[name]
    module_name, sep, class_name = name.partition(":")
    if not sep:
        known = ", ".join(sorted(BUILTINS))
        raise ConfigurationError(f"unknown assignor {name!r} (built-in: {known}; or your own as module:Class)")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 -- a user's module may raise anything while importing
        raise ConfigurationError(f"cannot import the assignor {name!r}: {type(e).__name__}: {e}") from None
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type):
        raise ConfigurationError(f"assignor {name!r}: {module_name} has no class {class_name!r}")
    try:
        instance = cls()
    except Exception as e:  # noqa: BLE001 -- a user's constructor may raise anything
        raise ConfigurationError(f"assignor {name!r}: {class_name}() raised {type(e).__name__}: {e}") from None
    assign = getattr(instance, "assign", None)
    if not callable(assign):
        raise ConfigurationError(f"assignor {name!r}: {class_name} has no assign(subscriptions, partitions, current)")

    def call(
        subscriptions: Mapping[str, Mapping[str, int]],
        partitions: Mapping[str, int],
        current: Mapping[str, Mapping[int, str]],
    ) -> object:
        return assign(subscriptions, partitions, current)

    return call


def check_assignors(names: tuple[str, ...]) -> tuple[str, ...]:
    """``names`` (a member's strategies, most preferred first), each loadable.

    :raises ConfigurationError: empty, repeated, malformed, or one cannot be loaded.
    """
    try:
        check_strategies(list(names))
    except CodecError as e:
        raise ConfigurationError(f"--assignors: {e.reason}") from None
    for name in names:
        load_assignor(name)
    return names
