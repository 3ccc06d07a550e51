"""FleetDP's OpenTelemetry output read as the Collector's Kafka receiver
reads it: a Kafka consumer (confluent-kafka) of the OTLP topic, each record
decoded as an ExportMetricsServiceRequest by the official protobuf
definitions (PyPI opentelemetry-proto): binary with ParseFromString,
OTLP/JSON with json_format.Parse (which refuses unknown or misspelt fields).

Usage: otlp_out.py BROKERS TOPIC RECORDS otlp_proto|otlp_json
Prints one JSON line per record: {"key": ..., "content_type": ...,
"resource": {...}, "scope": ..., "points": [[metric, unit, {attributes},
value, start_time_unix_nano, time_unix_nano], ...]}. Exits 1 if fewer than
RECORDS records arrive within 60 s.
"""

import json
import sys
import time
import uuid

from confluent_kafka import Consumer
from google.protobuf.json_format import Parse
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

brokers, topic, records, encoding = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]


def value_of(any_value):
    return getattr(any_value, any_value.WhichOneof("value"))


def attributes(kvs):
    return {kv.key: value_of(kv.value) for kv in kvs}


consumer = Consumer(
    {
        "bootstrap.servers": brokers,
        "group.id": f"otlp-out-{uuid.uuid4()}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
    }
)
consumer.subscribe([topic])
seen = 0
deadline = time.time() + 60
while seen < records and time.time() < deadline:
    msg = consumer.poll(0.5)
    if msg is None or msg.error():
        continue
    req = ExportMetricsServiceRequest()
    if encoding == "otlp_json":
        Parse(msg.value().decode("utf-8"), req)
    else:
        req.ParseFromString(msg.value())
    (rm,) = req.resource_metrics
    (sm,) = rm.scope_metrics
    points = []
    for m in sm.metrics:
        assert m.WhichOneof("data") == "gauge", m.name
        for p in m.gauge.data_points:
            assert p.WhichOneof("value") == "as_double", m.name
            points.append(
                [m.name, m.unit, attributes(p.attributes), p.as_double,
                 p.start_time_unix_nano, p.time_unix_nano]
            )
    headers = dict(msg.headers() or [])
    print(
        json.dumps(
            {
                "key": msg.key().decode("utf-8"),
                "content_type": headers.get("content-type", b"").decode("utf-8"),
                "resource": attributes(rm.resource.attributes),
                "scope": sm.scope.name,
                "points": points,
            }
        ),
        flush=True,
    )
    seen += 1
consumer.close()
sys.exit(0 if seen >= records else 1)
