//! Lanes as a router has them (issue 31): `lane.yaml` names its own tiers, records on each of
//! them are taken and stored under the name as configured, a lane no tier names is refused with
//! the field named, and the original two lanes keep their stored bytes (so older files and their
//! chain hashes are unchanged).
//!
//! The tiers records are checked against are the process's, so the tests here take turns.

use std::sync::{Mutex, MutexGuard};

use laneledger_store::ingest::mapping::Mapping;
use laneledger_store::model::lanes;
use laneledger_store::model::record::{AttemptRecord, Lane, Outcome, StoredAttempt};
use laneledger_store::{Attempt, DEFAULT_BATCH, InputFormat, LaneConfig, Ledger, ingest_reader};

const THREE_TIERS: &str = "\
lanes:
  audit: true
  tiers:
    - { name: Gemini-Free, max_attempts: 2, pin_on: [ambiguous, permanent] }
    - { name: gpt-4o, max_attempts: 1, pin_on: [permanent] }
    - { name: claude }
";

static TURN: Mutex<()> = Mutex::new(());

/// This test's turn, with `config`'s tiers in force (and the default ones restored after).
struct Turn(#[allow(dead_code)] MutexGuard<'static, ()>);

impl Turn {
    fn with(config: &LaneConfig) -> Turn {
        let guard = TURN.lock().unwrap_or_else(|e| e.into_inner());
        config.lanes.activate();
        Turn(guard)
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        LaneConfig::default().lanes.activate();
    }
}

fn three_tiers() -> LaneConfig {
    LaneConfig::from_yaml_str(THREE_TIERS, "lane.yaml").unwrap()
}

fn err(text: &str) -> String {
    LaneConfig::from_yaml_str(text, "lane.yaml").unwrap_err().to_string()
}

#[test]
fn tiers_parse_in_order_and_default_to_free_then_paid() {
    let c = three_tiers();
    let tiers = c.lanes.tiers();
    let got: Vec<(&str, u32, Vec<Outcome>)> = tiers
        .iter()
        .map(|t| (t.name.as_str(), t.max_attempts, t.pin_on.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("Gemini-Free", 2, vec![Outcome::Ambiguous, Outcome::Permanent]),
            ("gpt-4o", 1, vec![Outcome::Permanent]),
            ("claude", 1, vec![]),
        ]
    );
    assert!(c.lanes.audit);

    let d = LaneConfig::default();
    let names: Vec<(String, u32, usize)> = d
        .lanes
        .tiers()
        .into_iter()
        .map(|t| (t.name, t.max_attempts, t.pin_on.len()))
        .collect();
    assert_eq!(names, [("free".to_string(), 2, 2), ("paid".to_string(), 1, 0)]);
    assert!(d.lanes.audit);
    assert_eq!(d.lanes.tiers, None);

    let off = LaneConfig::from_yaml_str("lanes:\n  audit: false\n", "lane.yaml").unwrap();
    assert!(!off.lanes.audit);
    assert_eq!(off.lanes.tiers().len(), 2);
}

#[test]
fn bad_tiers_are_refused_naming_the_key_and_line() {
    assert_eq!(
        err("lanes:\n  tiers:\n    - {name: a}\n    - {name: b}\n    - {name: a}\n"),
        "lane.yaml:3: lanes.tiers[2].name: \"a\" names an earlier tier again"
    );
    assert_eq!(
        err("lanes:\n  tiers:\n    - {name: cheap}\n    - {name: dear, max_attempts: 0}\n"),
        "lane.yaml:4: lanes.tiers[1].max_attempts: must be at least 1"
    );
    assert_eq!(
        err("lanes:\n  tiers:\n    - {name: cheap, retries: 2}\n"),
        "lane.yaml:3: unknown key lanes.tiers[0].retries (expected one of `name`, `max_attempts`, `pin_on`)"
    );
    assert_eq!(
        err("lanes:\n  tiers: []\n"),
        "lane.yaml:2: lanes.tiers: names no tier: give at least one"
    );
    assert_eq!(
        err("lanes:\n  free: {max_attempts: 3}\n  tiers:\n    - {name: cheap}\n"),
        "lane.yaml:3: lanes.tiers: replaces lanes.free and lanes.paid: leave those out and give their budgets in the tiers"
    );
    assert_eq!(
        err("lanes:\n  tiers:\n    - {name: cheap, pin_on: [sometimes]}\n"),
        "lane.yaml:3: lanes.tiers[0].pin_on[0]: invalid value: string \"sometimes\", expected one of ok, retryable, \
         ambiguous, permanent"
    );
}

fn ingest(ledger: &Ledger, text: &str) -> laneledger_store::IngestReport {
    ingest_reader(
        ledger,
        "in.ndjson",
        text.as_bytes(),
        InputFormat::Ndjson,
        DEFAULT_BATCH,
        |_| {},
    )
    .unwrap()
}

fn line(job: &str, no: u32, lane: &str) -> String {
    format!(
        r#"{{"job_id":"{job}","idem_key":"k-{job}","attempt_no":{no},"lane":"{lane}","started_at":"2026-11-16T09:00:0{no}Z"}}"#
    )
}

#[test]
fn records_on_three_tiers_are_taken_and_an_unknown_lane_is_refused_naming_the_field() {
    let _turn = Turn::with(&three_tiers());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.redb");
    let ledger = Ledger::open(&path).unwrap();
    let text = [
        line("j1", 1, "Gemini-Free"),
        line("j1", 2, "gpt-4o"),
        line("j1", 3, "claude"),
        // Matching is exact: the configured spelling only.
        line("j2", 1, "gemini-free"),
        // The original lanes are not tiers of this file.
        line("j2", 2, "free"),
    ]
    .join("\n");
    let report = ingest(&ledger, &text);
    assert_eq!(
        report.counters.to_string(),
        "accepted 3, completed 0, duplicate deliveries 0, conflicts 0, rejected 2"
    );
    assert_eq!(
        report.problems,
        [
            "in.ndjson:4: lane: \"gemini-free\" is not Gemini-Free, gpt-4o or claude",
            "in.ndjson:5: lane: \"free\" is not Gemini-Free, gpt-4o or claude",
        ]
    );
    let rejects = ledger.rejects().unwrap();
    assert_eq!(
        rejects.iter().map(|r| (r.line, r.field.as_deref())).collect::<Vec<_>>(),
        [(4, Some("lane")), (5, Some("lane"))]
    );
    let lanes: Vec<&str> = ledger
        .job_attempts("j1")
        .unwrap()
        .iter()
        .map(|a| a.attempt.lane.as_str())
        .collect();
    assert_eq!(lanes, ["Gemini-Free", "gpt-4o", "claude"]);

    // The chain holds the new encoding: verified clean, and the same tip after a reopen.
    let first = ledger.verify().unwrap();
    assert_eq!((first.entries, first.records, &first.first_bad), (5, 5, &None));
    drop(ledger);
    let again = Ledger::open(&path).unwrap();
    let second = again.verify().unwrap();
    assert_eq!((&second.tip, &second.first_bad), (&first.tip, &None));
    let lanes: Vec<&str> = again
        .job_attempts("j1")
        .unwrap()
        .iter()
        .map(|a| a.attempt.lane.as_str())
        .collect();
    assert_eq!(lanes, ["Gemini-Free", "gpt-4o", "claude"]);
}

#[test]
fn without_tiers_the_original_check_stands() {
    let _turn = Turn::with(&LaneConfig::default());
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("l.redb")).unwrap();
    let report = ingest(
        &ledger,
        &[line("j1", 1, "free"), line("j1", 2, "gpt-4o"), line("j1", 3, "Paid")].join("\n"),
    );
    assert_eq!(
        report.problems,
        [
            "in.ndjson:2: lane: \"gpt-4o\" is not free or paid",
            "in.ndjson:3: lane: \"Paid\" is not free or paid",
        ]
    );
    assert_eq!(report.counters.accepted, 1);
}

/// Seed 000's lane as the ledger stored it before tiers: serde's derive of a two-variant enum.
#[derive(serde::Serialize)]
enum SeedLane {
    Free,
    Paid,
}

/// The stored attempt value as the ledger wrote it before tiers, field for field.
#[derive(serde::Serialize)]
enum SeedRecord {
    V1(SeedStored),
}

#[derive(serde::Serialize)]
struct SeedStored {
    job_id: String,
    idem_key: String,
    attempt_no: u32,
    lane: SeedLane,
    started_at: i64,
    ended_at: Option<i64>,
    outcome: Option<Outcome>,
    tokens_in: Option<u64>,
    tokens_out: Option<u64>,
    artifact_id: Option<String>,
    http_status: Option<u16>,
    provider_code: Option<u32>,
    key_id: Option<String>,
    pool_id: Option<String>,
    model: Option<String>,
    attrs: Option<String>,
    seq: u64,
    ingested_at: i64,
}

fn attempt(lane: Lane) -> Attempt {
    Attempt {
        job_id: "j1".into(),
        idem_key: "k1".into(),
        attempt_no: 2,
        lane,
        started_at: 1_763_283_600_000_000,
        ended_at: Some(1_763_283_601_000_000),
        outcome: Some(Outcome::Ok),
        tokens_in: Some(500),
        tokens_out: Some(300),
        artifact_id: Some("a1".into()),
        http_status: Some(200),
        provider_code: None,
        key_id: Some("key".into()),
        pool_id: None,
        model: Some("m".into()),
        attrs: None,
    }
}

fn stored(lane: Lane) -> Vec<u8> {
    postcard::to_allocvec(&AttemptRecord::V1(StoredAttempt {
        attempt: attempt(lane),
        seq: 7,
        ingested_at: 1_763_283_700_000_000,
    }))
    .unwrap()
}

#[test]
fn free_and_paid_keep_their_stored_bytes_and_other_names_are_stored_inline() {
    for (lane, seed) in [(Lane::Free, SeedLane::Free), (Lane::Paid, SeedLane::Paid)] {
        let a = attempt(lane);
        let before = postcard::to_allocvec(&SeedRecord::V1(SeedStored {
            job_id: a.job_id,
            idem_key: a.idem_key,
            attempt_no: a.attempt_no,
            lane: seed,
            started_at: a.started_at,
            ended_at: a.ended_at,
            outcome: a.outcome,
            tokens_in: a.tokens_in,
            tokens_out: a.tokens_out,
            artifact_id: a.artifact_id,
            http_status: a.http_status,
            provider_code: a.provider_code,
            key_id: a.key_id,
            pool_id: a.pool_id,
            model: a.model,
            attrs: a.attrs,
            seq: 7,
            ingested_at: 1_763_283_700_000_000,
        }))
        .unwrap();
        assert_eq!(stored(lane), before, "{lane:?}");
    }
    assert_eq!(postcard::to_allocvec(&Lane::Free).unwrap(), [0]);
    assert_eq!(postcard::to_allocvec(&Lane::Paid).unwrap(), [1]);
    let named = lanes::intern("gpt-4o");
    assert_eq!(named, Lane::Named("gpt-4o"));
    assert_eq!(postcard::to_allocvec(&named).unwrap(), b"\x02\x06gpt-4o");
    // A named lane round-trips, owned and in place, and encodes the same every time.
    let bytes = stored(named);
    assert_eq!(bytes, stored(lanes::intern("gpt-4o")));
    assert_eq!(
        laneledger_store::storage::ledger::decode_attempt(&bytes)
            .unwrap()
            .attempt,
        attempt(named)
    );
    assert_eq!(
        laneledger_store::decode_attempt_ref(&bytes)
            .unwrap()
            .attempt
            .lane
            .as_str(),
        "gpt-4o"
    );
    // "free" and "paid" are their own variants whichever way they are named.
    assert_eq!(lanes::intern("free"), Lane::Free);
    assert_eq!(lanes::intern("paid"), Lane::Paid);
}

const MAPPING: &str = "\
name: mine
fields:
  job_id: {from: [/job]}
  started_at: {from: [/at]}
idem_key: {from: [/key]}
attempt_no: {from: [/n]}
lane: {from: [/model], map: {gemini-1.5: Gemini-Free, gpt-4o-2024: gpt-4o}, prefix: {claude-: claude}}
";

#[test]
fn a_mapping_names_configured_tiers_and_is_refused_naming_another() {
    {
        let _turn = Turn::with(&three_tiers());
        let m = Mapping::from_yaml(MAPPING, "mine.yaml").unwrap();
        assert_eq!(m.name(), "mine");
        let bad = MAPPING.replace("gpt-4o-2024: gpt-4o", "gpt-4o-2024: gpt-5");
        let e = Mapping::from_yaml(&bad, "mine.yaml").unwrap_err().to_string();
        assert!(
            e.starts_with("bad mapping: mine.yaml:7: lane.map.gpt-4o-2024: ")
                && e.contains("\"gpt-5\" is not a lane (Gemini-Free, gpt-4o or claude)"),
            "{e}"
        );
    }
    let _turn = Turn::with(&LaneConfig::default());
    let e = Mapping::from_yaml(MAPPING, "mine.yaml").unwrap_err().to_string();
    assert!(e.contains("\"Gemini-Free\" is not a lane (free or paid)"), "{e}");
}

#[test]
fn the_tiers_example_of_the_docs_parses_as_described() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/lane-yaml.md")).unwrap();
    let section = &doc[doc.find("## Your own lanes").expect("the section")..];
    let start = section.find("```yaml\n").expect("a yaml block") + "```yaml\n".len();
    let yaml = &section[start..start + section[start..].find("```").unwrap()];
    let c = LaneConfig::from_yaml_str(yaml, "lane-yaml.md").unwrap();
    assert_eq!(c.lanes.tiers(), three_tiers().lanes.tiers());
}
