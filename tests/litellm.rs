//! LiteLLM itself (pip `litellm==1.110.2`, as .ci/run installs it) sending to `laneledger serve`:
//! a Router with retries and a fallback, mock responses, no network (tests/python/litellm_router.py),
//! through the shipped callback (integrations/litellm/laneledger_callback.py).

#[path = "support/server.rs"]
mod server;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use server::{ServerProcess, TOKEN, agent, binary};

const LITELLM_PIP: &str = "python3 -m pip install litellm==1.110.2";

/// Fails (does not skip) when Python or LiteLLM is missing, saying what to install.
fn require_litellm() {
    match Command::new("python3").args(["-c", "import litellm"]).output() {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "LiteLLM for Python is missing; install it with `{LITELLM_PIP}` (as .ci/run does): {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!("python3 is needed to run LiteLLM ({e}); install Python 3, then `{LITELLM_PIP}`"),
    }
}

/// Runs the Router script in `mode` against `base`; its one JSON line of output.
fn run_router(mode: &str, base: &str, job_id: &str, idem_key: &str) -> Value {
    run_router_logged(mode, base, job_id, idem_key).0
}

/// [`run_router`], with what the script wrote to stderr (its log).
fn run_router_logged(mode: &str, base: &str, job_id: &str, idem_key: &str) -> (Value, String) {
    let o = Command::new("python3")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["tests/python/litellm_router.py", mode, base, TOKEN, job_id, idem_key])
        // No network: LiteLLM's model price map from its package, and any request that is not
        // to laneledger on loopback goes to a closed port.
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("HTTP_PROXY", "http://127.0.0.1:9")
        .env("HTTPS_PROXY", "http://127.0.0.1:9")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "litellm_router.py {mode} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let last = stdout.lines().last().unwrap_or_default();
    let out = serde_json::from_str(last).unwrap_or_else(|e| panic!("litellm_router.py printed {stdout:?}: {e}"));
    (out, String::from_utf8_lossy(&o.stderr).into_owned())
}

/// `GET /v1/jobs/{job}/attempts`: the stored attempts in attempt_no order.
fn attempts_of(base: &str, job_id: &str) -> Vec<Value> {
    let mut r = agent(Duration::from_secs(10))
        .get(format!("{base}/v1/jobs/{job_id}/attempts"))
        .call()
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    body["attempts"].as_array().unwrap().clone()
}

fn serve(dir: &Path) -> ServerProcess {
    ServerProcess::start(&binary(), &dir.join("ledger.redb"), &[], Duration::from_secs(30))
        .expect("laneledger serve did not come up")
}

/// The fields of one stored attempt that the test fixes, as (name, value) pairs; the rest
/// (times, ids LiteLLM draws at random) are checked on their own.
fn fixed(a: &Value, names: &[&str]) -> Vec<(String, Value)> {
    names
        .iter()
        .map(|n| (n.to_string(), a.get(*n).cloned().unwrap_or(Value::Null)))
        .collect()
}

fn expect(pairs: &[(&str, Value)]) -> Vec<(String, Value)> {
    pairs.iter().map(|(n, v)| (n.to_string(), v.clone())).collect()
}

#[test]
fn the_shipped_callback_stores_one_attempt_per_try_with_retries_and_the_fallback() {
    require_litellm();
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path());
    let out = run_router("callback", &server.base, "job-litellm-1", "idem-litellm-1");
    assert_eq!(out["content"], "ok");
    assert_eq!(out["flushed"], true, "{out}");
    assert_eq!(
        (&out["posted"], &out["dropped"], &out["refused"]),
        (&4.into(), &0.into(), &0.into())
    );

    let attempts = attempts_of(&server.base, "job-litellm-1");
    assert_eq!(attempts.len(), 4, "{attempts:#?}");
    let names = [
        "job_id",
        "idem_key",
        "attempt_no",
        "lane",
        "outcome",
        "http_status",
        "provider_code",
        "tokens_in",
        "tokens_out",
        "model",
        "pool_id",
        "error_class",
        "error_kind",
        "litellm_attempted_retries",
        "litellm_attempted_fallbacks",
    ];
    let refused = |n: u64, retries: u64| {
        expect(&[
            ("job_id", "job-litellm-1".into()),
            ("idem_key", "idem-litellm-1".into()),
            ("attempt_no", n.into()),
            ("lane", "free".into()),
            ("outcome", "retryable".into()),
            ("http_status", 429.into()),
            ("provider_code", 1305.into()),
            ("tokens_in", Value::Null),
            ("tokens_out", Value::Null),
            ("model", "glm-4.6".into()),
            ("pool_id", "free".into()),
            ("error_class", "RateLimitError".into()),
            ("error_kind", "transient".into()),
            ("litellm_attempted_retries", retries.into()),
            ("litellm_attempted_fallbacks", 0.into()),
        ])
    };
    assert_eq!(fixed(&attempts[0], &names), refused(1, 0));
    assert_eq!(fixed(&attempts[1], &names), refused(2, 1));
    assert_eq!(fixed(&attempts[2], &names), refused(3, 2));
    // The fallback to `paid`: LiteLLM's own retry count starts again at 0 there, the attempt
    // number does not.
    assert_eq!(
        fixed(&attempts[3], &names),
        expect(&[
            ("job_id", "job-litellm-1".into()),
            ("idem_key", "idem-litellm-1".into()),
            ("attempt_no", 4.into()),
            ("lane", "paid".into()),
            ("outcome", "ok".into()),
            ("http_status", 200.into()),
            ("provider_code", Value::Null),
            ("tokens_in", 10.into()),
            ("tokens_out", 20.into()),
            ("model", "glm-4.6-paid".into()),
            ("pool_id", "paid".into()),
            ("error_class", Value::Null),
            ("error_kind", "ok".into()),
            ("litellm_attempted_retries", 0.into()),
            ("litellm_attempted_fallbacks", 1.into()),
        ])
    );
    assert_eq!(attempts[3]["artifact_id"], out["response_id"]);
    assert!(attempts[..3].iter().all(|a| a.get("artifact_id").is_none()));
    // One deployment served the three refusals, another the answer; every try has its own call id.
    let key = |i: usize| attempts[i]["key_id"].as_str().unwrap().to_string();
    assert_eq!(
        (key(0) == key(1), key(1) == key(2), key(2) == key(3)),
        (true, true, false)
    );
    let calls: std::collections::BTreeSet<&str> = attempts
        .iter()
        .map(|a| a["litellm_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(calls.len(), 4);
    // Times in RFC 3339 UTC, each try ending after it started and starting after the one before.
    let t = |a: &Value, f: &str| laneledger_store::parse_timestamp(a[f].as_str().unwrap()).unwrap();
    for (i, a) in attempts.iter().enumerate() {
        assert!(a["started_at"].as_str().unwrap().ends_with('Z'));
        assert!(t(a, "ended_at") >= t(a, "started_at"), "{a}");
        if i > 0 {
            assert!(t(a, "started_at") >= t(&attempts[i - 1], "ended_at"), "{a}");
        }
    }
}

/// LiteLLM's own generic API logger (`GenericAPILogger`, `log_format="ndjson"`) pointed at
/// `POST /v1/attempts?mapping=litellm&idem_fallback=1`: its payload carries no attempt number
/// (derived per job by start time) and carries the idempotency key only when the request puts it
/// in `metadata.spend_logs_metadata`; otherwise the trace id stands for it, and the row says so.
#[test]
fn litellms_generic_api_logger_lands_through_the_litellm_mapping() {
    require_litellm();
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path());
    let names = [
        "job_id",
        "idem_key",
        "idem_key_from",
        "attempt_no",
        "lane",
        "outcome",
        "provider_code",
        "tokens_in",
        "tokens_out",
        "model",
        "pool_id",
        "mapping",
    ];
    for (mode, job, key, idem_key, from) in [
        (
            "generic",
            "job-generic-1",
            "idem-generic-1",
            "fallback:job-generic-1",
            "fallback /trace_id",
        ),
        (
            "generic-keyed",
            "job-generic-2",
            "idem-generic-2",
            "idem-generic-2",
            "/metadata/spend_logs_metadata/idempotency_key",
        ),
    ] {
        let out = run_router(mode, &server.base, job, key);
        assert_eq!((&out["content"], &out["queued"]), (&"ok".into(), &4.into()), "{out}");
        let attempts = attempts_of(&server.base, job);
        assert_eq!(attempts.len(), 4, "{mode}: {attempts:#?}");
        for (i, a) in attempts.iter().enumerate() {
            let paid = i == 3;
            assert_eq!(
                fixed(a, &names),
                expect(&[
                    ("job_id", job.into()),
                    ("idem_key", idem_key.into()),
                    ("idem_key_from", from.into()),
                    ("attempt_no", (i + 1).into()),
                    ("lane", if paid { "paid" } else { "free" }.into()),
                    ("outcome", if paid { "ok" } else { "retryable" }.into()),
                    ("provider_code", if paid { Value::Null } else { 1305.into() }),
                    ("tokens_in", if paid { 10 } else { 0 }.into()),
                    ("tokens_out", if paid { 20 } else { 0 }.into()),
                    (
                        "model",
                        if paid { "openai/glm-4.6-paid" } else { "openai/glm-4.6" }.into()
                    ),
                    ("pool_id", if paid { "paid" } else { "free" }.into()),
                    ("mapping", "litellm".into()),
                ]),
                "{mode}: attempt {}",
                i + 1
            );
            if !paid {
                assert_eq!(a["http_status"], 429, "{mode}: {a}");
                assert!(a.get("artifact_id").is_none(), "{mode}: {a}");
            }
        }
        assert_eq!(attempts[3]["artifact_id"], out["response_id"]);
    }
}

#[test]
fn with_laneledger_unreachable_the_callers_request_still_answers_and_the_records_are_dropped_and_logged() {
    require_litellm();
    // A port nothing listens on: every POST is refused at once.
    let base = format!("http://127.0.0.1:{}", server::free_port());
    let (out, log) = run_router_logged("callback", &base, "job-litellm-down", "idem-litellm-down");
    assert_eq!(out["content"], "ok");
    assert_eq!(
        (&out["flushed"], &out["posted"], &out["dropped"], &out["refused"]),
        (&true.into(), &0.into(), &4.into(), &0.into()),
        "{out}"
    );
    let unreachable = format!("laneledger: {base}/v1/attempts unreachable");
    assert_eq!(log.matches(&unreachable).count(), 4, "{log}");
}
