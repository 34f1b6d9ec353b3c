"""``/metrics``: the engine's metrics in Prometheus text, for ``dashboard_app(...,
metrics=True)`` and ``pikku-mongo ui --metrics``.

Needs ``prometheus_client`` and the OpenTelemetry SDK (``pip install
'pikku-mongo[metrics]'``). The page's reader becomes the engine's meter provider in this
process (:func:`engine_core.metrics.use_meter_provider`): what this process records is
what the page shows, as cumulative counters, gauges and histograms. Names follow
Prometheus: dots become underscores, seconds get ``_seconds``, counters ``_total``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

import engine_core.metrics

INSTALL_HINT = "pip install 'pikku-mongo[metrics]'"


class MetricsUnavailableError(RuntimeError):
    """``metrics=True`` without ``prometheus_client`` or the OpenTelemetry SDK."""


class MetricsPage:
    """Reads the engine's instruments and renders them for a Prometheus scrape."""

    def __init__(self) -> None:
        try:
            from opentelemetry.sdk.metrics import MeterProvider
            from opentelemetry.sdk.metrics.export import InMemoryMetricReader
            from prometheus_client import CollectorRegistry
        except ImportError as exc:
            raise MetricsUnavailableError(
                f"/metrics needs prometheus_client and opentelemetry-sdk ({exc.name} is "
                f"missing): {INSTALL_HINT}"
            ) from None
        self._reader = InMemoryMetricReader()
        engine_core.metrics.use_meter_provider(MeterProvider(metric_readers=[self._reader]))
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(_Collector(self._reader))

    async def metrics(self, request: Request) -> Response:
        """``/metrics``: the engine's metrics in Prometheus text."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(self._registry), media_type=CONTENT_TYPE_LATEST)


def prometheus_name(name: str, unit: str) -> str:
    """The Prometheus name of the metric ``name`` measured in ``unit``."""
    base = name.replace(".", "_")
    return base + "_seconds" if unit == "s" else base


class _Collector:
    """A ``prometheus_client`` collector over an OpenTelemetry in-memory reader."""

    def __init__(self, reader: Any) -> None:
        self._reader = reader

    def collect(self) -> Iterator[Any]:
        from opentelemetry.sdk.metrics.export import Gauge, Histogram, Sum
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        data = self._reader.get_metrics_data()
        if data is None:
            return
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    points = list(metric.data.data_points)
                    keys = sorted({k for p in points for k in p.attributes})
                    name = prometheus_name(metric.name, metric.unit or "")
                    doc = metric.description or metric.name
                    family: Any
                    if isinstance(metric.data, Sum) and metric.data.is_monotonic:
                        family = CounterMetricFamily(name, doc, labels=keys)
                    elif isinstance(metric.data, Sum | Gauge):
                        family = GaugeMetricFamily(name, doc, labels=keys)
                    elif isinstance(metric.data, Histogram):
                        family = HistogramMetricFamily(name, doc, labels=keys)
                    else:
                        continue
                    for point in points:
                        labels = [str(point.attributes.get(k, "")) for k in keys]
                        if isinstance(metric.data, Histogram):
                            family.add_metric(labels, _buckets(point), point.sum)
                        else:
                            family.add_metric(labels, point.value)
                    yield family


def _buckets(point: Any) -> list[tuple[str, float]]:
    """Cumulative ``(le, count)`` pairs, ``+Inf`` last."""
    out, seen = [], 0
    for bound, count in zip(point.explicit_bounds, point.bucket_counts, strict=False):
        seen += count
        out.append((repr(float(bound)), float(seen)))
    out.append(("+Inf", float(point.count)))
    return out
