"""Sends one job's GenAI spans to `laneledger serve` with the OpenTelemetry Python SDK.

Used by tests/otel_sdk.rs. A parent span (the job, not a model call) and two `chat` child spans:
try 1 refused with a 429 (status ERROR, `error.type` "429", an exception event carrying the
provider's error body), try 2 ok with usage tokens and `gen_ai.response.id`. Both children carry
`laneledger.job_id` and `laneledger.idem_key`. Times are fixed so the stored attempts are exact.

    python3 otel_genai.py protobuf|json ENDPOINT TOKEN JOB_ID IDEM_KEY

`protobuf`: the SDK's OTLP/HTTP exporter (opentelemetry-exporter-otlp-proto-http), behind a
BatchSpanProcessor, flushed with force_flush. `json`: the Python SDK has no OTLP/HTTP JSON
exporter that installs beside the pinned protobuf one, so the SDK's own OTLP/JSON encoder
(opentelemetry-exporter-otlp-json-common) encodes the finished spans and urllib POSTs them
gzip-compressed, as an OTLP/HTTP JSON exporter would.

Prints one JSON line: {"exported": N, "results": [...]} (for json, the server's answers). Exits 1
when an export did not succeed.
"""

import gzip
import json
import sys
import urllib.error
import urllib.request

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

# 2025-10-17T13:20:01Z and on, in Unix nanoseconds.
T0 = 1_760_707_201_000_000_000
SECOND = 1_000_000_000


def emit(provider, job_id, idem_key):
    """The job's three spans, ended with fixed times."""
    tracer = provider.get_tracer("laneledger.tests.otel_genai", "1.0.0")
    parent = tracer.start_span(
        "run job",
        kind=SpanKind.INTERNAL,
        attributes={"laneledger.job_id": job_id},
        start_time=T0,
    )
    ctx = set_span_in_context(parent)
    common = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "z_ai",
        "gen_ai.request.model": "glm-4.6",
        "server.address": "api.z.ai",
        "laneledger.job_id": job_id,
        "laneledger.idem_key": idem_key,
    }
    first = tracer.start_span(
        "chat glm-4.6", context=ctx, kind=SpanKind.CLIENT, attributes=common, start_time=T0 + 1 * SECOND
    )
    first.set_attribute("error.type", "429")
    first.add_event(
        "exception",
        attributes={
            "exception.type": "RateLimitError",
            "exception.message": '{"error":{"code":"1305","message":"The service is busy"}}',
        },
        timestamp=T0 + 1 * SECOND + 800_000_000,
    )
    first.set_status(Status(StatusCode.ERROR, "rate limited"))
    first.end(end_time=T0 + 1 * SECOND + 800_000_000)

    second = tracer.start_span(
        "chat glm-4.6", context=ctx, kind=SpanKind.CLIENT, attributes=common, start_time=T0 + 5 * SECOND
    )
    second.set_attribute("gen_ai.response.id", "chatcmpl-sdk-2")
    second.set_attribute("gen_ai.response.model", "glm-4.6-0930")
    second.set_attribute("gen_ai.usage.input_tokens", 1500)
    second.set_attribute("gen_ai.usage.output_tokens", 700)
    second.set_attribute("gen_ai.response.finish_reasons", ["stop"])
    second.set_status(Status(StatusCode.OK))
    second.end(end_time=T0 + 12 * SECOND + 500_000_000)

    parent.end(end_time=T0 + 13 * SECOND)


class Recording(SpanExporter):
    """Keeps what another exporter answered, so a failed export fails the script."""

    def __init__(self, inner):
        self.inner = inner
        self.results = []

    def export(self, spans):
        result = self.inner.export(spans)
        self.results.append((len(spans), result))
        return result

    def shutdown(self):
        self.inner.shutdown()


class JsonOverUrllib(SpanExporter):
    """OTLP/HTTP JSON: the SDK's JSON encoding of the spans, gzip, POSTed with urllib."""

    def __init__(self, endpoint, token):
        from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans

        self.encode = encode_spans
        self.endpoint = endpoint
        self.token = token
        self.answers = []

    def export(self, spans):
        body = gzip.compress(self.encode(spans).to_json().encode("utf-8"))
        request = urllib.request.Request(
            self.endpoint,
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/json",
                "Content-Encoding": "gzip",
                "Authorization": "Bearer " + self.token,
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                self.answers.append({"status": response.status, "body": json.loads(response.read())})
                return SpanExportResult.SUCCESS
        except urllib.error.HTTPError as e:
            self.answers.append({"status": e.code, "body": e.read().decode("utf-8", "replace")})
            return SpanExportResult.FAILURE

    def shutdown(self):
        pass


def main():
    mode, endpoint, token, job_id, idem_key = sys.argv[1:6]
    resource = Resource.create({"service.name": "otel-genai-test"})
    provider = TracerProvider(resource=resource)
    if mode == "protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = Recording(OTLPSpanExporter(endpoint=endpoint, headers={"authorization": "Bearer " + token}))
        provider.add_span_processor(BatchSpanProcessor(exporter))
    elif mode == "json":
        inner = JsonOverUrllib(endpoint, token)
        exporter = Recording(inner)
        # One export request for the three spans, as a batch exporter would send them.
        batch = []

        class Collect(SpanExporter):
            def export(self, spans):
                batch.extend(spans)
                return SpanExportResult.SUCCESS

        provider.add_span_processor(SimpleSpanProcessor(Collect()))
    else:
        sys.exit("mode must be protobuf or json")

    emit(provider, job_id, idem_key)
    if not provider.force_flush(30_000):
        sys.exit("force_flush timed out")
    if mode == "json":
        exporter.export(batch)
    results = [{"spans": n, "result": r.name} for n, r in exporter.results]
    out = {"exported": sum(n for n, _ in exporter.results), "results": results}
    if mode == "json":
        out["answers"] = inner.answers
    print(json.dumps(out, sort_keys=True))
    provider.shutdown()
    if not results or any(r != SpanExportResult.SUCCESS for _, r in exporter.results):
        sys.exit(1)


if __name__ == "__main__":
    main()
