//! The built-in mappings on the sample exports (`sample-data/routers/`, shaped as each format's
//! published documentation shows it), and the engine's rules.

use std::io::Cursor;

use serde_json::{Value, json};

use super::source::SourceReader;
use super::*;
use crate::format::parse::Framed;
use crate::model::record::{Attempt, Lane, Outcome};

fn records(text: &str, shape: InputShape) -> Vec<SourceRecord> {
    SourceReader::new("t", Cursor::new(text.as_bytes().to_vec()), shape)
        .map(|r| r.expect("reads").expect("frames"))
        .collect()
}

fn attempts(m: &Mapped) -> Vec<&Attempt> {
    m.framed
        .iter()
        .map(|f| match f {
            Framed::Record { record, .. } => record,
            Framed::Reject(r) => panic!("rejected: {r:?}"),
        })
        .collect()
}

fn attrs(a: &Attempt) -> Value {
    serde_json::from_str(a.attrs.as_deref().unwrap()).unwrap()
}

/// A prior made of what an earlier map call gave.
struct Earlier(Vec<Attempt>);
impl PriorAttempts for Earlier {
    fn attempts_of(&self, job_id: &str) -> Vec<PriorAttempt> {
        self.0
            .iter()
            .filter(|a| a.job_id == job_id)
            .map(|a| PriorAttempt {
                attempt_no: a.attempt_no,
                started_at: a.started_at,
                attempt_key: a.attrs.as_deref().and_then(attempt_key),
            })
            .collect()
    }
}

const LITELLM: &str = include_str!("../../../../sample-data/routers/litellm.ndjson");

#[test]
fn litellm_payloads_become_numbered_attempts() {
    let mut m = Mapping::resolve("litellm").unwrap();
    let out = m.map("litellm.ndjson", records(LITELLM, InputShape::Json), &NoPrior);
    // Without the declared fallback, the record with no key is rejected, saying how to declare it.
    match &out.framed[3] {
        Framed::Reject(r) => {
            assert_eq!(r.line, 4);
            assert_eq!(r.field.as_deref(), Some("idem_key"));
            assert!(r.reason.contains("--idem-fallback"), "{}", r.reason);
        }
        other => panic!("{other:?}"),
    }
    m.allow_idem_fallback(true);
    let out = m.map("litellm.ndjson", records(LITELLM, InputShape::Json), &NoPrior);
    let a = attempts(&out);
    assert_eq!(a.len(), 4);
    assert_eq!(
        a.iter()
            .map(|a| (
                a.job_id.as_str(),
                a.attempt_no,
                a.lane,
                a.outcome,
                a.http_status,
                a.provider_code
            ))
            .collect::<Vec<_>>(),
        vec![
            (
                "trace-7f3a",
                1,
                Lane::Free,
                Some(Outcome::Retryable),
                Some(429),
                Some(1305)
            ),
            (
                "trace-7f3a",
                2,
                Lane::Free,
                Some(Outcome::Retryable),
                Some(429),
                Some(1305)
            ),
            ("trace-7f3a", 3, Lane::Paid, Some(Outcome::Ok), Some(200), None),
            ("trace-90c1", 1, Lane::Free, Some(Outcome::Ok), Some(200), None),
        ]
    );
    assert_eq!(a[0].idem_key, "idem-7f3a");
    assert_eq!(
        crate::model::time::format_timestamp(a[0].started_at),
        "2025-11-16T10:00:00.125000Z"
    );
    assert_eq!(
        crate::model::time::format_timestamp(a[2].ended_at.unwrap()),
        "2025-11-16T10:00:09.250000Z"
    );
    assert_eq!((a[2].tokens_in, a[2].tokens_out), (Some(1520), Some(412)));
    assert_eq!(a[2].artifact_id.as_deref(), Some("chatcmpl-9b2d41e7"));
    assert_eq!(a[0].artifact_id, None);
    assert_eq!(a[2].key_id.as_deref(), Some("dep-paid-1"));
    assert_eq!(a[2].pool_id.as_deref(), Some("paid"));
    assert_eq!(a[2].model.as_deref(), Some("gpt-4o-mini"));
    assert_eq!(a[3].idem_key, "fallback:trace-90c1");
    let kept = attrs(a[2]);
    assert_eq!(kept["idem_key_from"], "/metadata/spend_logs_metadata/idempotency_key");
    assert_eq!(kept["attempt_key"], "chatcmpl-9b2d41e7");
    assert_eq!(kept["response_cost"], json!(0.000475));
    assert_eq!(kept["mapping"], "litellm");
    assert_eq!(kept["call_type"], "acompletion");
    assert_eq!(kept["metadata"], json!({"user_api_key_alias": "batch-runner"}));
    assert!(kept.get("messages").is_none() && kept.get("response").is_none());
    assert_eq!(attrs(a[3])["idem_key_from"], "fallback /trace_id");
    assert_eq!(out.idem_fallback, 1);
    assert_eq!(out.found["idem_key"], 4);
    assert_eq!(out.found.get("provider_code"), Some(&2));
    assert_eq!(out.found.get("http_status"), Some(&4));
}

#[test]
fn derived_numbers_are_the_same_across_batches_and_re_ingests() {
    let mut m = Mapping::resolve("litellm").unwrap();
    m.allow_idem_fallback(true);
    let all = records(LITELLM, InputShape::Json);
    let whole: Vec<Attempt> = attempts(&m.map("t", all.clone(), &NoPrior))
        .into_iter()
        .cloned()
        .collect();
    // The last two lines first, then the first two: the numbers follow the start times.
    let late = m.map("t", vec![all[2].clone(), all[3].clone()], &NoPrior);
    let late: Vec<Attempt> = attempts(&late).into_iter().cloned().collect();
    assert_eq!(late[0].attempt_no, 1);
    // A re-ingest of the whole export against what the first ingest stored: the same numbers.
    let again: Vec<Attempt> = attempts(&m.map("t", all.clone(), &Earlier(whole.clone())))
        .into_iter()
        .cloned()
        .collect();
    assert_eq!(again, whole);
    // Batches in file order, each seeing the ones before: the same numbers as one batch.
    let first: Vec<Attempt> = attempts(&m.map("t", all[..2].to_vec(), &NoPrior))
        .into_iter()
        .cloned()
        .collect();
    let second: Vec<Attempt> = attempts(&m.map("t", all[2..].to_vec(), &Earlier(first.clone())))
        .into_iter()
        .cloned()
        .collect();
    let batched: Vec<Attempt> = first.into_iter().chain(second).collect();
    assert_eq!(batched, whole);
}

#[test]
fn otlp_spans_of_both_attribute_generations() {
    let m = Mapping::resolve("otlp").unwrap();
    let text = include_str!("../../../../sample-data/routers/otlp-genai.json");
    let out = m.map("otlp-genai.json", records(text, InputShape::Otlp), &NoPrior);
    assert_eq!(out.skipped, 1, "the parent span is not an attempt");
    let a = attempts(&out);
    assert_eq!(a.len(), 2);
    assert_eq!(
        (a[0].job_id.as_str(), a[0].idem_key.as_str(), a[0].attempt_no, a[0].lane),
        ("ticket-4411", "idem-4411", 1, Lane::Free)
    );
    assert_eq!(
        (
            a[0].outcome,
            a[0].http_status,
            a[0].provider_code,
            a[0].artifact_id.as_deref()
        ),
        (Some(Outcome::Retryable), Some(429), Some(1305), None)
    );
    assert_eq!(
        crate::model::time::format_timestamp(a[0].started_at),
        "2025-11-16T10:00:02Z"
    );
    assert_eq!(
        crate::model::time::format_timestamp(a[0].ended_at.unwrap()),
        "2025-11-16T10:00:02.800000Z"
    );
    assert_eq!(a[0].pool_id.as_deref(), Some("api.z.ai"));
    assert_eq!(
        (a[1].attempt_no, a[1].lane, a[1].outcome),
        (2, Lane::Paid, Some(Outcome::Ok))
    );
    assert_eq!((a[1].tokens_in, a[1].tokens_out), (Some(1500), Some(700)));
    assert_eq!(a[1].artifact_id.as_deref(), Some("chatcmpl-abc"));
    assert_eq!(a[1].model.as_deref(), Some("gpt-4o-mini-2024-07-18"));
    let kept = attrs(a[1]);
    assert_eq!(kept["attempt_key"], "eee19b7ec3c1b175");
    assert_eq!(kept["attributes"]["gen_ai.system"], "openai");
    assert_eq!(kept["resource"]["service.name"], "bee-runner");
}

#[test]
fn openrouter_tries_are_exploded_in_order() {
    let mut m = Mapping::resolve("openrouter").unwrap();
    m.allow_idem_fallback(true);
    let text = include_str!("../../../../sample-data/routers/openrouter-generations.json");
    let out = m.map("g.json", records(text, InputShape::Json), &NoPrior);
    let a = attempts(&out);
    assert_eq!(
        a.iter()
            .map(|a| (
                a.job_id.as_str(),
                a.attempt_no,
                a.lane,
                a.outcome,
                a.http_status,
                a.tokens_in,
                a.artifact_id.as_deref()
            ))
            .collect::<Vec<_>>(),
        vec![
            (
                "gen-3bhGkxlo4XFrqiabUM7NDtwDzWwG",
                1,
                Lane::Paid,
                Some(Outcome::Retryable),
                Some(503),
                None,
                None
            ),
            (
                "gen-3bhGkxlo4XFrqiabUM7NDtwDzWwG",
                2,
                Lane::Paid,
                Some(Outcome::Ok),
                Some(200),
                Some(10),
                Some("gen-3bhGkxlo4XFrqiabUM7NDtwDzWwG")
            ),
            (
                "gen-8QpZr2Lm5VnXcT7yWkA1sD4fG6hJ",
                1,
                Lane::Free,
                Some(Outcome::Ok),
                Some(200),
                Some(44),
                Some("gen-8QpZr2Lm5VnXcT7yWkA1sD4fG6hJ")
            ),
        ]
    );
    assert_eq!(a[1].key_id.as_deref(), Some("ep_b"));
    let kept = attrs(a[1]);
    assert_eq!(kept["latency"], 950);
    assert_eq!(kept["response_cost"], json!(0.0015));
    assert!(kept.get("provider_responses").is_none());
    assert_eq!(kept["idem_key_from"], "fallback ^/id");
}

#[test]
fn langfuse_csv_generations_only() {
    let mut m = Mapping::resolve("langfuse").unwrap();
    let text = include_str!("../../../../sample-data/routers/langfuse-observations.csv");
    let out = m.map("o.csv", records(text, InputShape::Csv), &NoPrior);
    assert_eq!(out.skipped, 1, "the SPAN row is not an attempt");
    let a = attempts(&out);
    assert_eq!(
        a.iter()
            .map(|a| (
                a.job_id.as_str(),
                a.idem_key.as_str(),
                a.attempt_no,
                a.lane,
                a.outcome,
                a.http_status
            ))
            .collect::<Vec<_>>(),
        vec![
            (
                "trace-4411",
                "idem-4411",
                1,
                Lane::Free,
                Some(Outcome::Retryable),
                Some(429)
            ),
            ("trace-4411", "idem-4411", 2, Lane::Paid, Some(Outcome::Ok), None),
        ]
    );
    assert_eq!(
        crate::model::time::format_timestamp(a[1].ended_at.unwrap()),
        "2025-11-16T10:00:08.250000Z"
    );
    assert_eq!((a[1].tokens_in, a[1].tokens_out), (Some(1520), Some(412)));
    assert_eq!(a[0].artifact_id, None);
    assert_eq!(a[1].artifact_id.as_deref(), Some("obs-02"));
    m.allow_idem_fallback(true);
    assert_eq!(
        m.map("o.csv", records(text, InputShape::Csv), &NoPrior).idem_fallback,
        0
    );
}

#[test]
fn litellm_spendlogs_csv() {
    let m = Mapping::resolve("litellm-spendlogs").unwrap();
    let text = include_str!("../../../../sample-data/routers/litellm-spendlogs.csv");
    let out = m.map("s.csv", records(text, InputShape::Csv), &NoPrior);
    let a = attempts(&out);
    assert_eq!(
        a.iter()
            .map(|a| (
                a.job_id.as_str(),
                a.attempt_no,
                a.lane,
                a.outcome,
                a.http_status,
                a.provider_code
            ))
            .collect::<Vec<_>>(),
        vec![
            (
                "trace-5e21",
                1,
                Lane::Free,
                Some(Outcome::Retryable),
                Some(429),
                Some(1305)
            ),
            ("trace-5e21", 2, Lane::Paid, Some(Outcome::Ok), Some(200), None),
        ]
    );
    assert_eq!(
        crate::model::time::format_timestamp(a[0].started_at),
        "2025-11-16T10:00:00.125000Z"
    );
    assert_eq!(a[1].artifact_id.as_deref(), Some("chatcmpl-5e21aa01"));
    assert_eq!(attrs(a[1])["response_cost"], "0.000475");
}

#[test]
fn a_reject_names_every_bad_field() {
    let m = Mapping::resolve("litellm").unwrap();
    let line = r#"{"id":"x","status":"success","startTime":"yesterday","model_group":"free"}"#;
    let out = m.map("bad.ndjson", records(line, InputShape::Json), &NoPrior);
    match &out.framed[0] {
        Framed::Reject(r) => {
            assert_eq!(r.field.as_deref(), Some("job_id, idem_key, started_at"));
            assert!(
                r.reason
                    .starts_with("job_id: no value at /metadata/spend_logs_metadata/job_id")
            );
            assert!(
                r.reason.ends_with(
                    "; started_at: /startTime: not a number of seconds; not an RFC 3339 timestamp: \"yesterday\""
                ),
                "{}",
                r.reason
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_bad_mapping_names_its_line_and_key() {
    let text = "name: x\nfields:\n  job_id: {from: [trace_id]}\n";
    let e = Mapping::from_yaml(text, "my.yaml").unwrap_err().to_string();
    assert_eq!(
        e,
        "bad mapping: my.yaml:3: fields.job_id.from[0]: \"trace_id\" is not a JSON Pointer: it starts with / \
         (or ^/ for the record an exploded item came from)"
    );
    let text = "name: x\nfields:\n  job_id: {from: [/a]}\n  started_at: {from: [/b], as: epoch_hours}\n";
    let e = Mapping::from_yaml(text, "my.yaml").unwrap_err().to_string();
    assert!(e.starts_with("bad mapping: my.yaml:4: fields.started_at.as"), "{e}");
    let text = "name: x\nfields:\n  job_id: {from: [/a]}\n  started_at: {from: [/b]}\n  colour: {from: [/c]}\n";
    let e = Mapping::from_yaml(text, "my.yaml").unwrap_err().to_string();
    assert!(
        e.starts_with("bad mapping: my.yaml:5: unknown key fields.colour"),
        "{e}"
    );
    let text = "name: x\nfields:\n  job_id: {from: [/a]}\n  started_at: {from: [/b]}\nidem_key: {from: [/k]}\n\
                attempt_no: {index: true}\nlane: {default: free}\n";
    let e = Mapping::from_yaml(text, "my.yaml").unwrap_err().to_string();
    assert_eq!(
        e,
        "bad mapping: my.yaml:6: attempt_no.index: numbers exploded items: it needs `explode`"
    );
    assert!(matches!(Mapping::resolve("kong"), Err(MappingError::Unknown { .. })));
}

#[test]
fn every_builtin_parses() {
    for (name, _) in BUILTIN {
        assert_eq!(Mapping::resolve(name).unwrap().name(), name);
    }
}

#[test]
fn source_framing() {
    // A pretty-printed object, a one-line array, NDJSON with a bad line.
    let pretty = "{\n  \"a\": 1\n}\n";
    assert_eq!(records(pretty, InputShape::Json).len(), 1);
    let items: Vec<_> = SourceReader::new(
        "t",
        Cursor::new(b"{\"a\":1}\nnot json\n\n{\"a\":2}\n".to_vec()),
        InputShape::Json,
    )
    .map(|r| r.unwrap())
    .collect();
    assert_eq!(items.len(), 3);
    assert_eq!(items[0].as_ref().unwrap().line, 1);
    let bad = items[1].as_ref().unwrap_err();
    assert_eq!(bad.line, 2);
    assert!(bad.reason.starts_with("bad JSON"));
    assert_eq!(items[2].as_ref().unwrap().line, 4);
    let arr = records("[{\"a\":1},{\"a\":2}]", InputShape::Json);
    assert_eq!(arr.iter().map(|r| r.line).collect::<Vec<_>>(), vec![1, 2]);
}

#[test]
fn litellm_1_110_2_generic_api_logger_as_captured() {
    // Four payloads LiteLLM 1.110.2's generic API logger sent (log_format ndjson): a Router with
    // three 429 tries on `free` and a fallback to `paid`, the key in spend_logs_metadata.
    let text = include_str!("../../../../sample-data/routers/litellm-1.110.2-generic-api.ndjson");
    let m = Mapping::resolve("litellm").unwrap();
    let out = m.map("t", records(text, InputShape::Json), &NoPrior);
    let a = attempts(&out);
    assert_eq!(
        a.iter()
            .map(|a| (
                a.job_id.as_str(),
                a.idem_key.as_str(),
                a.attempt_no,
                a.lane,
                a.outcome,
                a.http_status,
                a.tokens_in,
                a.tokens_out
            ))
            .collect::<Vec<_>>(),
        vec![
            (
                "job-ll-3",
                "idem-ll-3",
                1,
                Lane::Free,
                Some(Outcome::Retryable),
                Some(429),
                Some(0),
                Some(0)
            ),
            (
                "job-ll-3",
                "idem-ll-3",
                2,
                Lane::Free,
                Some(Outcome::Retryable),
                Some(429),
                Some(0),
                Some(0)
            ),
            (
                "job-ll-3",
                "idem-ll-3",
                3,
                Lane::Free,
                Some(Outcome::Retryable),
                Some(429),
                Some(0),
                Some(0)
            ),
            (
                "job-ll-3",
                "idem-ll-3",
                4,
                Lane::Paid,
                Some(Outcome::Ok),
                Some(200),
                Some(10),
                Some(20)
            ),
        ]
    );
    assert!(a[3].artifact_id.as_deref().unwrap().starts_with("chatcmpl-"));
    // The payload is about 14 KB, mostly nulls, the model price map and a traceback: attrs keep
    // what is left.
    for x in &a {
        let len = x.attrs.as_deref().unwrap().len();
        assert!(len < 2048, "attrs of {len} bytes: {}", x.attrs.as_deref().unwrap());
        assert!(!x.attrs.as_deref().unwrap().contains("null"));
    }
}
