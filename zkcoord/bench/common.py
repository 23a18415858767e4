"""What every benchmark shares: the results directory, the sizes, the JSON document's envelope, the error.

Every benchmark (``zkcoord bench <name>``) writes one JSON document, ``<results>/<name>.json`` unless ``--out`` says
otherwise, whose top level carries ``"schema": 1`` and ``"benchmark": "<name>"`` so that ``zkcoord analyze --bench``
knows what it reads.  ``--size small|medium|large`` picks a preset (:data:`PRESETS`); an option given explicitly
overrides the preset's value.  ``large`` is each benchmark's full configuration (the figures in docs/benchmarks.md),
``small`` a smoke run of seconds to a minute.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

from zkcoord.errors import ZkCoordError

SCHEMA = 1
#: where the documents go, relative to the working directory (``--out`` or ``--results-dir`` move them)
RESULTS_DIR = Path("bench-results")
SIZES = ("small", "medium", "large")
#: every benchmark, in the order ``zkcoord bench all`` runs them (quick and local first)
NAMES = ("partlog", "assignor", "consumer", "rebalance", "analyze", "scale")

#: benchmark -> size -> option values (option names as the command's parameters)
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "partlog": {
        "small": {"records": 2_000, "repeats": 1},
        "medium": {"records": 50_000, "repeats": 2},
        "large": {"records": 200_000, "repeats": 3},
    },
    "assignor": {
        "small": {"members": 1_000, "topics": (100,), "repeats": 5},
        "medium": {"members": 5_000, "topics": (100,), "repeats": 20},
        "large": {"members": 10_000, "topics": (100, 1_000), "repeats": 40},
    },
    "consumer": {
        "small": {"records": 8_000, "trials": 1, "consumers": (3,), "repeats": 1},
        "medium": {"records": 200_000, "trials": 3, "consumers": (10,), "repeats": 2},
        "large": {"records": 1_000_000, "trials": 5, "consumers": (10, 50), "repeats": 2},
    },
    "rebalance": {
        "small": {"consumers": 4, "partitions": 20, "trials": 1, "legacy_backoff": 0.2},
        "medium": {"consumers": 20, "partitions": 200, "trials": 3, "legacy_backoff": 2.0},
        "large": {"consumers": 50, "partitions": 500, "trials": 5, "legacy_backoff": 2.0},
    },
    "analyze": {
        "small": {"events": (100_000,)},
        "medium": {"events": (1_000_000,)},
        "large": {"events": (1_000_000, 10_000_000, 30_000_000)},
    },
    "scale": {
        "small": {"groups": 10, "consumers": 100, "processes": 2, "failovers": 1},
        "medium": {"groups": 100, "consumers": 1_000, "processes": 4, "failovers": 2},
        "large": {"groups": 1_000, "consumers": 10_000, "processes": 4, "failovers": 3},
    },
}


class BenchError(ZkCoordError):
    """The benchmark could not do what it set out to (a process died, a deadline passed, bad settings)."""


def preset(name: str, size: str, given: dict[str, Any]) -> dict[str, Any]:
    """The preset of ``name`` at ``size`` with every option in ``given`` that is not ``None`` laid over it."""
    if size not in SIZES:
        raise BenchError(f"unknown size {size!r}; choose from {', '.join(SIZES)}")
    return {**PRESETS[name][size], **{k: v for k, v in given.items() if v is not None}}


def default_out(name: str, results_dir: Path | None = None) -> Path:
    return (results_dir or RESULTS_DIR) / f"{name}.json"


def envelope(name: str, document: dict[str, Any]) -> dict[str, Any]:
    """``document`` with ``schema`` and ``benchmark`` first (a document's own ``schema`` is kept)."""
    return {"schema": SCHEMA, "benchmark": name, **document}


def write_document(out: Path, document: dict[str, Any]) -> None:
    """Write ``document`` as indented JSON to ``out`` (its directory created).  :raises BenchError: cannot write."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(document, indent=2) + "\n")
    except OSError as e:
        raise BenchError(f"cannot write {out}: {e.strerror or e}") from e


def preset_help(name: str, key: str) -> str:
    """``[small: 4, medium: 20, large: 50]``, for an option's help."""
    values = []
    for size in SIZES:
        value = PRESETS[name][size][key]
        values.append(f"{size}: {','.join(map(str, value)) if isinstance(value, tuple) else value}")
    return f"[{'; '.join(values)}]"


@contextmanager
def interruptible() -> Iterator[None]:
    """SIGTERM and SIGINT end the run through its clean-up (every process it started is stopped).

    Main thread only (signal handlers).  Raises :class:`BenchError` in the main thread on the first signal; the
    second is ignored so that the clean-up itself is not interrupted.
    """

    def stop(signum: int, _frame: object) -> NoReturn:
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, signal.SIG_IGN)
        raise BenchError(f"interrupted by {signal.Signals(signum).name}; every process of the run was stopped")

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
