"""The metrics of one open database, kept in a prometheus_client registry of its own.

The embedded API reads them with ``client.metrics()`` (a dict of sample → value); the
server exports the same registry on ``/metrics``. Names are part of the interface: the
TTL and index names below are the ones docs/user/indexes.md promises.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

try:  # one line per counter, without the *_created companions
    from prometheus_client import disable_created_metrics

    disable_created_metrics()
except ImportError:  # pragma: no cover - older prometheus_client
    pass


class Metrics:
    """Metrics holds the counters and gauges of one Engine."""

    def __init__(self):
        self.registry = CollectorRegistry()
        self.ttl_documents = Counter(
            "hoarddb_ttl_sweep_documents_total", "Documents the TTL sweeper handled, by outcome (expired, skipped)",
            ["outcome"], registry=self.registry)
        self.ttl_budget_exhausted = Counter(
            "hoarddb_ttl_sweep_budget_exhausted_total", "TTL sweeps that stopped at their time budget with work left",
            registry=self.registry)
        self.ttl_backlog = Gauge(
            "hoarddb_ttl_backlog_estimate", "Expired documents the last sweep left for the next one",
            registry=self.registry)
        self.indexes = Gauge("hoarddb_indexes", "Indexes by state", ["state"], registry=self.registry)
        self.cursors_open = Gauge("hoarddb_cursors_open", "Cursors open (find, search, range, list, aggregate "
                                  "answers with more to read)", registry=self.registry)
        self.cursors_timed_out = Counter("hoarddb_cursors_timed_out_total", "Cursors closed after sitting idle "
                                         "for cursor_timeout", registry=self.registry)
        for outcome in ("expired", "skipped"):
            self.ttl_documents.labels(outcome)

    def snapshot(self) -> dict[str, float]:
        """Every sample as ``'name{label="value"}' -> value``."""
        out = {}
        for family in self.registry.collect():
            for sample in family.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                out[sample.name + (f"{{{labels}}}" if labels else "")] = sample.value
        return out

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric."""
        return generate_latest(self.registry)
