"""docs/metrics.md is the list of metrics: every family a broker's or a consumer's registry exposes is in its tables,
with its type and labels, and every metric the tables name is exposed.  Also: the Prometheus rules and the Grafana
dashboard under deploy/ use only metrics that exist, and the Prometheus of compose.yaml scrapes every broker and
consumer there, each of which serves its metrics to the network."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

import yaml
from prometheus_client.core import Metric

from zkcoord.consumer import Consumer, ConsumerConfig, Subscription, TopicPartition
from zkcoord.consumer.metrics import ConsumerCollector, ConsumerStats
from zkcoord.consumer.shared import ConsumerMetrics
from zkcoord.coordinator import Coordinator
from zkcoord.region.metrics import RegionCollector, RegionStats

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\| `(zkcoord_[a-z_]+)` \| (\w+) \|([^|]*)\|")


def documented() -> dict[str, tuple[str, set[str]]]:
    """name -> (type, label names) from the tables of docs/metrics.md."""
    out: dict[str, tuple[str, set[str]]] = {}
    for line in (ROOT / "docs" / "metrics.md").read_text().splitlines():
        if m := ROW.match(line):
            assert m.group(1) not in out, f"{m.group(1)} listed twice"
            names = re.sub(r"\([^)]*\)", "", m.group(3))  # label values are in parentheses after their name
            out[m.group(1)] = (m.group(2), set(re.findall(r"`([a-z_]+)`", names)))
    return out


def exposed_name(family: Metric) -> str:
    """The name a family is scraped under (prometheus_client keeps a counter's without ``_total``)."""
    return {"counter": f"{family.name}_total", "info": f"{family.name}_info"}.get(family.type, family.name)


def exposed(families: Iterable[Metric]) -> dict[str, tuple[str, set[str] | None]]:
    """name -> (type, label names, None for a family without samples now)."""
    out: dict[str, tuple[str, set[str] | None]] = {}
    for family in families:
        labels = {k for s in family.samples for k in s.labels} or (None if not family.samples else set())
        out[exposed_name(family)] = (family.type, labels)
    return out


class _Busy:
    """A consumer with a partition, a lag and a rebalance behind it, so every consumer family has samples."""

    consumer_id = "g_h-1-00000000"
    config = ConsumerConfig("g", Subscription.static({"t": 1}), "127.0.0.1:2181", Path())
    stats = ConsumerStats()

    def metrics(self) -> ConsumerMetrics:
        lag = {TopicPartition("t", 0): 3}
        return ConsumerMetrics(1, 10, 1.0, 1, 2.0, 5.0, 3, True, lag)


def test_every_exposed_metric_is_documented_and_every_documented_one_exposed() -> None:
    docs = documented()
    idle_consumer = Consumer(ConsumerConfig("g", Subscription.static({"t": 1}), "127.0.0.1:2181", Path()))
    families = [
        *Coordinator(1).collector().collect(),  # not started: what a standby shows
        *ConsumerCollector(idle_consumer).collect(),
        *RegionCollector(RegionStats(), "r1", "m1").collect(),
    ]
    shown = exposed(families)
    busy = exposed(ConsumerCollector(_Busy()).collect())
    assert set(busy) == {n for n in shown if n.startswith("zkcoord_consumer_")}
    assert sorted(set(shown) - set(docs)) == [], "exposed but not in docs/metrics.md"
    assert sorted(set(docs) - set(shown)) == [], "in docs/metrics.md but not exposed"
    for name, (kind, now) in shown.items():
        labels = busy[name][1] if now is None else now
        want_kind, want_labels = docs[name]
        assert kind == want_kind, name
        assert labels is not None
        assert labels - {"le"} == want_labels - {"le"}, name


def test_the_check_can_fail() -> None:
    fake = Metric("zkcoord_nothing", "not documented", "gauge")
    fake.add_sample("zkcoord_nothing", {}, 1)
    assert "zkcoord_nothing" not in documented()
    assert exposed([fake]) == {"zkcoord_nothing": ("gauge", set())}


def _unknown(exprs: str, recorded: set[str]) -> tuple[set[str], set[str]]:
    """The metric names in PromQL ``exprs`` (a histogram's ``_bucket``/``_sum``/``_count`` series count as its
    family), and those of them that are neither documented nor ``recorded`` by a rule."""
    docs = set(documented())
    used = set(re.findall(r"[a-z_:]*zkcoord_[a-z0-9_:]*", exprs))
    unknown = {n for n in used if n not in recorded and re.sub(r"_(bucket|sum|count)$", "", n) not in docs}
    return used, unknown


def test_the_prometheus_rules_and_the_dashboard_use_metrics_that_exist() -> None:
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "rules.yml").read_text())
    recorded = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    assert all(re.fullmatch(r"[a-z_]+:zkcoord_[a-z_]+:[a-z0-9_]+", r) for r in recorded), recorded  # level:metric:op
    used, unknown = _unknown(" ".join(str(r["expr"]) for g in rules["groups"] for r in g["rules"]), recorded)
    assert used and not unknown, sorted(unknown)
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "zkcoord.json").read_text())
    used, unknown = _unknown(" ".join(t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])), recorded)
    assert used and not unknown, sorted(unknown)
    assert _unknown("rate(zkcoord_no_such_total[1m]) + x:zkcoord_y:z", recorded)[1] == {  # the check can fail
        "zkcoord_no_such_total",
        "x:zkcoord_y:z",
    }


def test_compose_serves_every_broker_and_consumer_and_prometheus_scrapes_them() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    scraped: set[str] = set()
    for job in config["scrape_configs"]:
        for static in job.get("static_configs", []):
            scraped |= set(static["targets"])
        for dns in job.get("dns_sd_configs", []):
            scraped |= {f"{name}:{dns['port']}" for name in dns["names"]}
    served = set()
    for name, spec in compose["services"].items():
        command = [str(a) for a in spec.get("command", [])]
        if command[:2] not in (["zkcoord", "broker"], ["zkcoord", "consume"]):
            continue
        assert command[command.index("--metrics-addr") + 1] == "0.0.0.0", name  # noqa: S104 (reachable from another container)
        served.add(f"{name}:{command[command.index('--metrics-port') + 1]}")
    assert len(served) == 5
    assert served == scraped
    prometheus = compose["services"]["prometheus"]
    assert "./deploy/prometheus:/etc/prometheus:ro" in prometheus["volumes"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]
    assert config["rule_files"] == ["rules.yml"] and (ROOT / "deploy" / "prometheus" / "rules.yml").exists()
