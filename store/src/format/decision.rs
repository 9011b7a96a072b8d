//! The gate decision record (SPEC 1.2, seed 003 `dwell_gate.py`): one row per admission decision.
//!
//! A router logs the four fields the dwell gate reads (queue age, expected service, retry tax and
//! deadline slack, all in seconds), the decision it took, and later whether the job missed its
//! slack. Identity: (`job_id`, `decided_at`). The write rules are SPEC 2's, as for attempts
//! ([`merge_decision`]); input lines are read by [`DecisionReader`], the attempt framing with a
//! decision decoder.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::format::parse::{
    Cell, FieldErrors, InputFormat, LineError, LineReader, RecordDecoder, boolean, from_csv_with, from_json_with, id,
    integer, number, text, timestamp,
};
use crate::model::record::Reject;
use crate::model::write_rules::{FieldDiff, Merge};
use crate::policy::gate::{GateDecision, GateInput, decide_safe, dwell};

/// The service time of a reserved worker, in seconds, when a decision does not log one (SPEC 7
/// `gate.reserved_service_s: 8`; seed 003 "Expected service … is eight seconds"). Used by the
/// weekly ratio "defers that would have fit a reserved worker".
pub const DEFAULT_RESERVED_SERVICE_S: f64 = 8.0;

/// One admission decision of the dwell gate, as a router logged it (SPEC 1.2, seed 003 "Keep one
/// row per decision"). Identity: (`job_id`, `decided_at`). Every duration is in seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// The job, 1–256 bytes.
    pub job_id: String,
    /// When the gate decided, µs since the epoch, UTC.
    pub decided_at: i64,
    /// Seconds since the job was enqueued (seed 003 `queue_age_s`), ≥ 0.
    pub queue_age_s: f64,
    /// The declared free-path service time in seconds (seed 003 `expected_service_s`), ≥ 0; 0 is
    /// the seed's "zero service guess" that `decide_safe` defers.
    pub expected_service_s: f64,
    /// One unused retry priced in wall seconds (seed 003 `retry_tax_s`), ≥ 0.
    pub retry_tax_s: f64,
    /// Cutoff time minus elapsed wall time in seconds (seed 003 `deadline_slack_s`); negative once
    /// the cutoff has passed.
    pub deadline_slack_s: f64,
    /// The queue-age cap in seconds the gate used; `None` means the `lane.yaml` default (30, seed
    /// 003 `max_queue_age_s = 30.0`).
    pub max_queue_age_s: Option<f64>,
    /// The decision the router logged (seed 003 `admit_free | defer | reserved`).
    #[serde(with = "decision_serde")]
    pub decision: GateDecision,
    /// Retries already spent; SQL shows 0 when absent.
    pub retry_count: Option<u64>,
    /// Whether the job later missed its slack (seed 003 `slack_miss`); usually sent later, when the
    /// job ends, and so completes the row.
    pub slack_miss: Option<bool>,
    /// The reserved worker's service time in seconds; `None` means the `lane.yaml` default
    /// ([`DEFAULT_RESERVED_SERVICE_S`]).
    pub reserved_service_s: Option<f64>,
    /// Every other input field, as a JSON object text (SQL column `attrs`), keys sorted.
    pub attrs: Option<String>,
}

/// The stored spelling of [`GateDecision`]: the seed's words.
mod decision_serde {
    use super::GateDecision;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &GateDecision, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(d.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<GateDecision, D::Error> {
        let s = String::deserialize(d)?;
        GateDecision::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("unknown decision {s:?}")))
    }
}

/// The decision fields in SPEC 1.2's order, then `attrs`; used to name the fields of a conflict.
pub const DECISION_FIELDS: [&str; 12] = [
    "job_id",
    "decided_at",
    "queue_age_s",
    "expected_service_s",
    "retry_tax_s",
    "deadline_slack_s",
    "max_queue_age_s",
    "decision",
    "retry_count",
    "slack_miss",
    "reserved_service_s",
    "attrs",
];

impl Decision {
    /// The gate's input for this row, in seconds, with `default_max_queue_age_s` where the row
    /// logged no cap (seed 003 `Job`).
    pub fn gate_input(&self, default_max_queue_age_s: f64) -> GateInput {
        GateInput {
            queue_age_s: self.queue_age_s,
            expected_service_s: self.expected_service_s,
            retry_tax_s: self.retry_tax_s,
            deadline_slack_s: self.deadline_slack_s,
            max_queue_age_s: self.max_queue_age_s.unwrap_or(default_max_queue_age_s),
        }
    }

    /// Free-path dwell in seconds: queue age + expected service + retry tax (seed 003 `dwell`).
    pub fn dwell_s(&self) -> f64 {
        dwell(&self.gate_input(0.0))
    }

    /// What the gate should have decided: seed 003 `decide_safe` on this row, with
    /// `default_max_queue_age_s` (seconds) where the row logged no cap.
    pub fn expected_decision(&self, default_max_queue_age_s: f64) -> GateDecision {
        decide_safe(&self.gate_input(default_max_queue_age_s))
    }

    /// The record as one NDJSON object in the input format of SPEC 1.2: `decided_at` in RFC 3339
    /// `Z`, absent fields left out, `attrs` members at the top level, so it reads back unchanged.
    pub fn to_json(&self) -> Value {
        use crate::model::time::format_timestamp;
        use serde_json::{Map, json};
        let mut m = Map::new();
        m.insert("job_id".into(), json!(self.job_id));
        m.insert("decided_at".into(), json!(format_timestamp(self.decided_at)));
        m.insert("queue_age_s".into(), json!(self.queue_age_s));
        m.insert("expected_service_s".into(), json!(self.expected_service_s));
        m.insert("retry_tax_s".into(), json!(self.retry_tax_s));
        m.insert("deadline_slack_s".into(), json!(self.deadline_slack_s));
        if let Some(v) = self.max_queue_age_s {
            m.insert("max_queue_age_s".into(), json!(v));
        }
        m.insert("decision".into(), json!(self.decision.as_str()));
        if let Some(v) = self.retry_count {
            m.insert("retry_count".into(), json!(v));
        }
        if let Some(v) = self.slack_miss {
            m.insert("slack_miss".into(), json!(v));
        }
        if let Some(v) = self.reserved_service_s {
            m.insert("reserved_service_s".into(), json!(v));
        }
        if let Some(attrs) = &self.attrs
            && let Ok(Value::Object(extra)) = serde_json::from_str::<Value>(attrs)
        {
            for (k, v) in extra {
                m.entry(k).or_insert(v);
            }
        }
        Value::Object(m)
    }
}

/// A decision as the ledger holds it: the record plus when it was first accepted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredDecision {
    /// The record, completed by later deliveries where they added fields (e.g. `slack_miss`).
    pub decision: Decision,
    /// Append order: the n-th accepted decision of this ledger has `seq` n (from 1).
    pub seq: u64,
    /// When the first record of this identity was accepted, µs since the epoch, UTC.
    pub ingested_at: i64,
}

/// A decision record that disagreed with the row in force (SPEC 2 conflict), kept as it arrived
/// in `decision_conflict`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionConflict {
    /// Where it came from: a file path, `-` for stdin, or an HTTP route.
    pub source: String,
    /// The 1-based line number in the source (the record's first line for CSV).
    pub line: u64,
    /// The identity it claims.
    pub job_id: String,
    /// The identity it claims: µs since the epoch, UTC.
    pub decided_at: i64,
    /// The names of the fields that differ from the row in force, in [`DECISION_FIELDS`] order.
    pub fields: Vec<String>,
    /// The record as parsed.
    pub decision: Decision,
    /// The raw input text.
    pub raw: String,
    /// When it arrived, µs since the epoch, UTC.
    pub received_at: i64,
}

/// The on-disk decision value, versioned so a later release reads files written by this one.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum DecisionRecord {
    /// Format version 1.
    V1(StoredDecision),
}

/// The on-disk decision conflict value, versioned.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum DecisionConflictRecord {
    /// Format version 1.
    V1(DecisionConflict),
}

/// Compares `incoming` with the decision in force (`held`) field by field (SPEC 2): the same
/// record is a duplicate, added optional fields (`slack_miss` sent when the job ends) complete the
/// row, a differing field is a conflict naming it (`attrs.KEY` for a differing attrs key).
pub fn merge_decision(held: &Decision, incoming: &Decision) -> Merge<Decision> {
    let mut d = FieldDiff::default();
    let mut out = held.clone();
    d.required("job_id", &held.job_id, &incoming.job_id);
    d.required("decided_at", &held.decided_at, &incoming.decided_at);
    d.required("queue_age_s", &held.queue_age_s, &incoming.queue_age_s);
    d.required(
        "expected_service_s",
        &held.expected_service_s,
        &incoming.expected_service_s,
    );
    d.required("retry_tax_s", &held.retry_tax_s, &incoming.retry_tax_s);
    d.required("deadline_slack_s", &held.deadline_slack_s, &incoming.deadline_slack_s);
    d.optional("max_queue_age_s", &mut out.max_queue_age_s, &incoming.max_queue_age_s);
    d.required("decision", &held.decision, &incoming.decision);
    d.optional("retry_count", &mut out.retry_count, &incoming.retry_count);
    d.optional("slack_miss", &mut out.slack_miss, &incoming.slack_miss);
    d.optional(
        "reserved_service_s",
        &mut out.reserved_service_s,
        &incoming.reserved_service_s,
    );
    d.attrs(&mut out.attrs, &incoming.attrs);
    d.verdict(out)
}

/// Builds a decision from named cells, applying SPEC 1.2's rules. Unknown fields go to `attrs`;
/// the derived columns of `gate_decision` (`dwell_s`, `expected_decision`, `ingested_at`) are
/// recomputed, never taken from input, so an exported table reads back as the same rows.
fn decode_decision<'a>(cells: &mut dyn Iterator<Item = (&'a str, Cell<'a>)>) -> Result<Decision, FieldErrors> {
    let mut job_id = None;
    let mut decided_at = None;
    let mut queue_age_s = None;
    let mut expected_service_s = None;
    let mut retry_tax_s = None;
    let mut deadline_slack_s = None;
    let mut decision = None;
    let mut max_queue_age_s = None;
    let mut retry_count = None;
    let mut slack_miss = None;
    let mut reserved_service_s = None;
    let mut attrs: BTreeMap<String, Value> = BTreeMap::new();
    for (name, cell) in cells {
        if cell.is_absent() {
            continue;
        }
        match name {
            "job_id" => job_id = Some(id("job_id", cell)?),
            "decided_at" => decided_at = Some(timestamp("decided_at", cell)?),
            "queue_age_s" => queue_age_s = Some(number("queue_age_s", cell, true)?),
            "expected_service_s" => expected_service_s = Some(number("expected_service_s", cell, true)?),
            "retry_tax_s" => retry_tax_s = Some(number("retry_tax_s", cell, true)?),
            "deadline_slack_s" => deadline_slack_s = Some(number("deadline_slack_s", cell, false)?),
            "max_queue_age_s" => max_queue_age_s = Some(number("max_queue_age_s", cell, true)?),
            "decision" => {
                let s = text("decision", cell)?;
                decision = Some(
                    GateDecision::parse(s)
                        .ok_or_else(|| ("decision", format!("{s:?} is not admit_free, defer or reserved")))?,
                );
            }
            "retry_count" => retry_count = Some(integer("retry_count", cell, 0, i64::MAX as u64)?),
            "slack_miss" => slack_miss = Some(boolean("slack_miss", cell)?),
            "reserved_service_s" => reserved_service_s = Some(number("reserved_service_s", cell, true)?),
            other => {
                attrs.insert(other.to_string(), cell.to_json());
            }
        }
    }
    let missing = |name: &'static str| (name, "missing".to_string());
    Ok(Decision {
        job_id: job_id.ok_or_else(|| missing("job_id"))?,
        decided_at: decided_at.ok_or_else(|| missing("decided_at"))?,
        queue_age_s: queue_age_s.ok_or_else(|| missing("queue_age_s"))?,
        expected_service_s: expected_service_s.ok_or_else(|| missing("expected_service_s"))?,
        retry_tax_s: retry_tax_s.ok_or_else(|| missing("retry_tax_s"))?,
        deadline_slack_s: deadline_slack_s.ok_or_else(|| missing("deadline_slack_s"))?,
        max_queue_age_s,
        decision: decision.ok_or_else(|| missing("decision"))?,
        retry_count,
        slack_miss,
        reserved_service_s,
        attrs: (!attrs.is_empty()).then(|| serde_json::to_string(&attrs).expect("a map of JSON values serializes")),
    })
}

/// Reads one NDJSON line as a decision (SPEC 1.2): `Err((field, reason))`, field `None` for bad
/// JSON. Numbers are JSON numbers (seconds); booleans JSON `true`/`false`.
pub fn decision_from_json(line: &str) -> Result<Decision, LineError> {
    from_json_with(line, decode_decision)
}

/// Reads one CSV row as a decision given the header's column names (SPEC 1.2). Numbers are
/// decimal text, finite (`NaN`, `inf` refused); booleans `true`/`false` (any case) or `1`/`0`.
pub fn decision_from_csv(header: &[String], row: &[&str]) -> Result<Decision, LineError> {
    from_csv_with(header, row, decode_decision)
}

/// The gate decision decoder of SPEC 1.2 ([`decision_from_json`], [`decision_from_csv`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct DecisionDecoder;

impl RecordDecoder for DecisionDecoder {
    type Record = Decision;
    fn from_json(line: &str) -> Result<Decision, LineError> {
        decision_from_json(line)
    }
    fn from_csv(header: &[String], row: &[&str]) -> Result<Decision, LineError> {
        decision_from_csv(header, row)
    }
}

/// Iterates the decisions of one input, NDJSON or CSV, with the attempts' framing (BOM, CRLF,
/// blank lines, no final newline, quoted multi-line CSV rows, 1 MiB line cap).
pub type DecisionReader<R> = LineReader<R, DecisionDecoder>;

/// Starts a [`DecisionReader`] over `reader`, naming it `source` in rejects.
pub fn decision_reader<R: std::io::BufRead>(
    source: impl Into<String>,
    reader: R,
    format: InputFormat,
) -> DecisionReader<R> {
    LineReader::new(source, reader, format)
}

/// One decision offered to the ledger: a parsed record, or a line already known to be bad.
#[derive(Debug, Clone)]
pub enum IncomingDecision {
    /// A parsed decision with where it came from.
    Decision {
        /// A file path, `-` for stdin, or an HTTP route.
        source: String,
        /// 1-based line number in the source.
        line: u64,
        /// The raw text, kept if the record conflicts.
        raw: String,
        /// The record.
        decision: Decision,
    },
    /// A line that failed to parse; it is kept in `ingest_reject`.
    Reject(Reject),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::parse::Framed;

    const D1: &str = r#"{"job_id":"j1","decided_at":"2026-11-23T09:00:00Z","queue_age_s":12,"expected_service_s":8,"retry_tax_s":8,"deadline_slack_s":90,"decision":"admit_free"}"#;

    fn err(line: &str) -> String {
        match decision_from_json(line).unwrap_err() {
            (Some(f), r) => format!("{f}: {r}"),
            (None, r) => r,
        }
    }

    #[test]
    fn a_full_line_reads_with_defaults_absent_and_extras_in_attrs() {
        let d = decision_from_json(D1).unwrap();
        assert_eq!(d.job_id, "j1");
        assert_eq!((d.queue_age_s, d.deadline_slack_s), (12.0, 90.0));
        assert_eq!(d.decision, GateDecision::AdmitFree);
        assert_eq!((d.max_queue_age_s, d.retry_count, d.slack_miss), (None, None, None));
        assert_eq!(d.dwell_s(), 28.0);
        let more = D1.replace(
            "}",
            r#","slack_miss":true,"retry_count":2,"max_queue_age_s":45.5,"router":"r1","dwell_s":999}"#,
        );
        let d = decision_from_json(&more).unwrap();
        assert_eq!(d.slack_miss, Some(true));
        assert_eq!(d.retry_count, Some(2));
        assert_eq!(d.max_queue_age_s, Some(45.5));
        // A field named like a derived column is kept, as every other unknown field is.
        assert_eq!(d.attrs.as_deref(), Some(r#"{"dwell_s":999,"router":"r1"}"#));
        assert_eq!(decision_from_json(&d.to_json().to_string()).unwrap(), d);
    }

    #[test]
    fn field_rules_of_spec_1_2() {
        let cases: &[(&str, &str, &str)] = &[
            (r#""job_id":"j1","#, "", "job_id: missing"),
            (r#""queue_age_s":12,"#, "", "queue_age_s: missing"),
            (
                r#""decision":"admit_free""#,
                r#""decision":"maybe""#,
                "decision: \"maybe\" is not admit_free, defer or reserved",
            ),
            (
                r#""queue_age_s":12"#,
                r#""queue_age_s":"12""#,
                "queue_age_s: expected a number, found a string",
            ),
            (
                r#""queue_age_s":12"#,
                r#""queue_age_s":-1"#,
                "queue_age_s: -1 is negative",
            ),
            (
                r#""retry_tax_s":8"#,
                r#""retry_tax_s":-0.5"#,
                "retry_tax_s: -0.5 is negative",
            ),
            (
                r#""decided_at":"2026-11-23T09:00:00Z""#,
                r#""decided_at":"2026-11-23T09:00:00""#,
                "decided_at: timestamp has no UTC offset (add Z or +HH:MM)",
            ),
            (
                r#""deadline_slack_s":90"#,
                r#""deadline_slack_s":1e999"#,
                "bad JSON: number out of range at line 1 column 131",
            ),
            (
                r#""decision""#,
                r#""slack_miss":"yes","decision""#,
                "slack_miss: expected true or false, found a string",
            ),
            (
                r#""decision""#,
                r#""retry_count":1.5,"decision""#,
                "retry_count: expected an integer, found 1.5",
            ),
            (
                r#""job_id":"j1""#,
                r#""job_id":"j1","job_id":"j1""#,
                "bad JSON: duplicate key \"job_id\" at line 1 column 28",
            ),
        ];
        for (from, to, want) in cases {
            let line = D1.replace(from, to);
            assert_eq!(&err(&line), want, "for {line}");
        }
        // Slack may be negative (the cutoff has passed); service may be 0 (the gate defers it).
        let d = decision_from_json(&D1.replace(r#""deadline_slack_s":90"#, r#""deadline_slack_s":-1"#)).unwrap();
        assert_eq!(d.expected_decision(30.0), GateDecision::Defer);
        let d = decision_from_json(&D1.replace(r#""expected_service_s":8"#, r#""expected_service_s":0"#)).unwrap();
        assert_eq!(d.expected_decision(30.0), GateDecision::Defer);
    }

    #[test]
    fn csv_numbers_must_be_finite_and_booleans_are_true_false_1_0() {
        let header: Vec<String> =
            "job_id,decided_at,queue_age_s,expected_service_s,retry_tax_s,deadline_slack_s,decision,slack_miss"
                .split(',')
                .map(String::from)
                .collect();
        let row = |age: &str, miss: &str| {
            let cells = ["j", "2026-11-23T09:00:00Z", age, "8", "8", "90", "defer", miss];
            decision_from_csv(&header, &cells)
        };
        assert_eq!(row("12.5", "1").unwrap().slack_miss, Some(true));
        assert_eq!(row("12", "FALSE").unwrap().slack_miss, Some(false));
        assert_eq!(row("12", "0").unwrap().slack_miss, Some(false));
        assert_eq!(row("12", "").unwrap().slack_miss, None);
        assert_eq!(row("12.5", "true").unwrap().queue_age_s, 12.5);
        for bad in ["NaN", "inf", "-infinity"] {
            let (f, r) = row(bad, "true").unwrap_err();
            assert_eq!(f.as_deref(), Some("queue_age_s"));
            assert!(r.starts_with("expected a finite number, found"), "{bad}: {r}");
        }
        assert_eq!(row("x", "true").unwrap_err().1, "expected a number, found \"x\"");
        assert_eq!(
            row("1", "yes").unwrap_err().1,
            "expected true, false, 1 or 0, found \"yes\""
        );
    }

    #[test]
    fn the_reader_uses_the_attempt_framing() {
        let input = format!("\u{feff}{D1}\r\n\r\n{{oops\r\n{}", D1.replace("j1", "j2"));
        let got: Vec<String> = decision_reader("in", input.as_bytes(), InputFormat::Ndjson)
            .map(|p| match p.unwrap() {
                Framed::Record { line, record, .. } => format!("{line} {}", record.job_id),
                Framed::Reject(r) => format!("{}", r),
            })
            .collect();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], "1 j1");
        assert!(got[1].starts_with("in:3: bad JSON"), "{}", got[1]);
        assert_eq!(got[2], "4 j2");
    }

    #[test]
    fn merge_rules_for_decisions() {
        let held = decision_from_json(D1).unwrap();
        assert_eq!(merge_decision(&held, &held), Merge::Duplicate);
        let mut later = held.clone();
        later.slack_miss = Some(false);
        let Merge::Complete(row, fields) = merge_decision(&held, &later) else {
            panic!()
        };
        assert_eq!(fields, ["slack_miss"]);
        assert_eq!(row.slack_miss, Some(false));
        assert_eq!(merge_decision(&later, &held), Merge::Duplicate);
        let mut changed = later.clone();
        changed.slack_miss = Some(true);
        changed.decision = GateDecision::Reserved;
        changed.deadline_slack_s = 91.0;
        assert_eq!(
            merge_decision(&later, &changed),
            Merge::Conflict(vec!["deadline_slack_s".into(), "decision".into(), "slack_miss".into()])
        );
    }
}
