"""Scrape a ``/metrics`` endpoint over HTTP and read it with prometheus_client's own parser, as Prometheus would."""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class Scrape:
    """One scrape: every sample by name and labels, and the families' types."""

    samples: dict[tuple[str, frozenset[tuple[str, str]]], float]
    types: dict[str, str]

    def value(self, name: str, **labels: str) -> float | None:
        """The sample ``name`` with exactly ``labels`` (None: not in this scrape)."""
        return self.samples.get((name, frozenset(labels.items())))

    def get(self, name: str, **labels: str) -> float:
        """As :meth:`value`, failing the test if the sample is missing."""
        value = self.value(name, **labels)
        assert value is not None, f"{name}{labels} not scraped; have {sorted({n for n, _ in self.samples})}"
        return value

    def labelled(self, name: str) -> dict[frozenset[tuple[str, str]], float]:
        """Every sample of ``name``, by its labels."""
        return {labels: v for (n, labels), v in self.samples.items() if n == name}


def scrape(port: int, host: str = "127.0.0.1", timeout: float = 5.0) -> Scrape:
    """GET ``http://host:port/metrics`` and parse it.  :raises OSError: nothing answers there (yet)."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return Scrape(samples, types)


def try_scrape(port: int, host: str = "127.0.0.1") -> Scrape | None:
    """:func:`scrape`, or None while nothing answers (a process still starting)."""
    try:
        return scrape(port, host)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None
