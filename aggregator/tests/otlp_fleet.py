"""A fleet on OpenTelemetry: each device an SDK MeterProvider whose
resource carries `device.id` and `firmware`; per round every device sets a
gauge `cabin.temperature` and adds 1 to a delta counter `trips`; its
metrics are collected and encoded by the SDK's OTLP encoder
(opentelemetry-exporter-otlp-proto-common), several devices' resources in
one ExportMetricsServiceRequest, as a Collector batches them.

Usage: otlp_fleet.py DEVICES ROUNDS PER_MESSAGE proto|json
Prints one line per message: hex of its bytes, then a line of JSON truth:
{"temp": [[round means]], ...}.
"""

import json
import sys

from google.protobuf.json_format import MessageToJson
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.sdk.metrics import Counter, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.resources import Resource

devices, rounds, per_message, encoding = (
    int(sys.argv[1]),
    int(sys.argv[2]),
    int(sys.argv[3]),
    sys.argv[4],
)
fleet = []
for d in range(devices):
    reader = InMemoryMetricReader(preferred_temporality={Counter: AggregationTemporality.DELTA})
    provider = MeterProvider(
        resource=Resource.create(
            {"device.id": f"car-{d}", "firmware": "4.2" if d % 3 == 0 else "4.1"}
        ),
        metric_readers=[reader],
    )
    meter = provider.get_meter("fleet")
    fleet.append(
        (reader, meter.create_gauge("cabin.temperature", unit="Cel"), meter.create_counter("trips"))
    )

means = []
for r in range(rounds):
    values = [15.0 + (d * 7 + r * 3) % 20 + 0.25 for d in range(devices)]
    means.append(sum(values) / devices)
    requests = []
    for d, (reader, gauge, trips) in enumerate(fleet):
        gauge.set(values[d], {"zone": "front"})
        trips.add(1)
        requests.append(encode_metrics(reader.get_metrics_data()))
    for i in range(0, devices, per_message):
        req = ExportMetricsServiceRequest()
        for part in requests[i : i + per_message]:
            req.resource_metrics.extend(part.resource_metrics)
        if encoding == "json":
            body = MessageToJson(req, use_integers_for_enums=True, indent=None).encode()
        else:
            body = req.SerializeToString()
        print(body.hex())
print(json.dumps({"temp_means": means}))
