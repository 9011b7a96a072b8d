//! The OpenTelemetry Python SDK against `laneledger serve`: a real `TracerProvider` sends one
//! job's GenAI spans to `POST /v1/traces`, once through the SDK's OTLP/HTTP protobuf exporter and
//! once as OTLP/JSON (the SDK's JSON encoding, gzip, posted by the script), and the stored
//! attempts are exactly the job's two tries: attempt 1 refused with a 429, attempt 2 ok with its
//! tokens and artifact. The script is `tests/python/otel_genai.py`.
//!
//! Needs Python 3 with the SDK packages (`.ci/run` installs them); without them the test fails
//! saying what to install.

#[path = "support/server.rs"]
mod server;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use server::{ServerProcess, TOKEN, agent, binary};

const PIP: &str = "python3 -m pip install opentelemetry-sdk==1.45.2 opentelemetry-exporter-otlp-proto-http==1.45.2 \
                   opentelemetry-exporter-otlp-json-common==0.66b1";

/// Fails, naming the pip line, when Python or a package the script imports is missing.
fn require_python_packages() {
    let check = Command::new("python3")
        .args([
            "-c",
            "import opentelemetry.sdk.trace, opentelemetry.exporter.otlp.proto.http.trace_exporter, \
             opentelemetry.exporter.otlp.json.common.trace_encoder",
        ])
        .output();
    match check {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "the OpenTelemetry Python SDK is missing; install it with `{PIP}` (as .ci/run does): {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!("python3 is needed to run the OpenTelemetry SDK ({e}); install Python 3, then `{PIP}`"),
    }
}

/// Runs the script in `mode` against `server` for `job` and `idem`; returns its JSON summary.
fn run_script(server: &ServerProcess, mode: &str, job: &str, idem: &str) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/otel_genai.py");
    let endpoint = format!("{}/v1/traces", server.base);
    let o = Command::new("python3")
        .arg(&script)
        .args([mode, &endpoint, TOKEN, job, idem])
        .output()
        .expect("run python3");
    assert!(
        o.status.success(),
        "{mode} export failed: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
}

/// The job's attempts as `GET /v1/jobs/{job}/attempts` gives them, without `ingested_at`.
fn attempts(server: &ServerProcess, job: &str) -> Vec<Value> {
    let mut r = agent(Duration::from_secs(10))
        .get(format!("{}/v1/jobs/{job}/attempts", server.base))
        .call()
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    v["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let mut a = a.clone();
            a.as_object_mut().unwrap().remove("ingested_at");
            a
        })
        .collect()
}

/// The fields of an attempt that the `otlp` mapping sets, and the span it came from.
fn mapped_fields(a: &Value) -> Value {
    let keep = [
        "job_id",
        "idem_key",
        "attempt_no",
        "lane",
        "started_at",
        "ended_at",
        "outcome",
        "tokens_in",
        "tokens_out",
        "artifact_id",
        "http_status",
        "provider_code",
        "pool_id",
        "model",
        "idem_key_from",
        "mapping",
        "name",
        "kind",
        "status",
    ];
    let m = a.as_object().unwrap();
    Value::Object(
        keep.iter()
            .filter_map(|k| m.get(*k).map(|v| (k.to_string(), v.clone())))
            .collect(),
    )
}

/// What the script's two tries of `job` must be once stored.
fn want(job: &str, idem: &str) -> Vec<Value> {
    vec![
        json!({
            "job_id": job, "idem_key": idem, "attempt_no": 1, "lane": "paid",
            "started_at": "2025-10-17T13:20:02Z", "ended_at": "2025-10-17T13:20:02.800000Z",
            "outcome": "retryable", "http_status": 429, "provider_code": 1305,
            "pool_id": "api.z.ai", "model": "glm-4.6",
            "idem_key_from": "/attributes/laneledger.idem_key", "mapping": "otlp",
            "name": "chat glm-4.6", "kind": 3, "status": {"code": 2, "message": "rate limited"},
        }),
        json!({
            "job_id": job, "idem_key": idem, "attempt_no": 2, "lane": "paid",
            "started_at": "2025-10-17T13:20:06Z", "ended_at": "2025-10-17T13:20:13.500000Z",
            "outcome": "ok", "tokens_in": 1500, "tokens_out": 700, "artifact_id": "chatcmpl-sdk-2",
            "pool_id": "api.z.ai", "model": "glm-4.6-0930",
            "idem_key_from": "/attributes/laneledger.idem_key", "mapping": "otlp",
            "name": "chat glm-4.6", "kind": 3, "status": {"code": 1},
        }),
    ]
}

#[test]
fn the_python_sdk_exports_genai_spans_that_land_as_attempts() {
    require_python_packages();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("otel.redb");
    let server =
        ServerProcess::start(&binary(), &db, &[], Duration::from_secs(30)).expect("laneledger serve did not start");

    // Protobuf, through the SDK's OTLPSpanExporter behind a BatchSpanProcessor.
    let out = run_script(&server, "protobuf", "job-sdk-pb", "idem-sdk-pb");
    assert_eq!(
        out,
        json!({"exported": 3, "results": [{"spans": 3, "result": "SUCCESS"}]})
    );
    let got = attempts(&server, "job-sdk-pb");
    assert_eq!(
        got.iter().map(mapped_fields).collect::<Vec<_>>(),
        want("job-sdk-pb", "idem-sdk-pb")
    );
    // The SDK's own ids: one trace, the two tries siblings under the job's span.
    assert_eq!(got[0]["traceId"], got[1]["traceId"]);
    assert_eq!(got[0]["parentSpanId"], got[1]["parentSpanId"]);
    assert_ne!(got[0]["spanId"], got[1]["spanId"]);
    assert_eq!(got[0]["traceId"].as_str().unwrap().len(), 32);

    // OTLP/JSON (gzip): every span taken, so the answer is the empty ExportTraceServiceResponse.
    let out = run_script(&server, "json", "job-sdk-json", "idem-sdk-json");
    assert_eq!(
        out,
        json!({"exported": 3, "results": [{"spans": 3, "result": "SUCCESS"}],
               "answers": [{"status": 200, "body": {}}]})
    );
    let got = attempts(&server, "job-sdk-json");
    assert_eq!(
        got.iter().map(mapped_fields).collect::<Vec<_>>(),
        want("job-sdk-json", "idem-sdk-json")
    );
    // The parent spans were skipped: no other job, no reject.
    assert_eq!(attempts(&server, "job-sdk-pb").len(), 2);
}
