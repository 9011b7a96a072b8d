//! `ingest --config` with lane.yaml's own tiers (issue 31): records on those lanes land under the
//! configured names, another name is refused naming the file, line and field, and the review
//! replays the tiers.

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_laneledger"))
        .args(args)
        .env("LANELEDGER_LOG", "off")
        .output()
        .unwrap()
}

fn line(job: &str, no: u32, lane: &str, outcome: &str) -> String {
    format!(
        r#"{{"job_id":"{job}","idem_key":"k-{job}","attempt_no":{no},"lane":"{lane}","started_at":"2026-11-24T09:00:0{no}Z","ended_at":"2026-11-24T09:00:0{no}.5Z","outcome":"{outcome}"}}"#
    )
}

#[test]
fn ingest_takes_the_configured_tiers_and_refuses_another_lane() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("lane.yaml");
    std::fs::write(
        &config,
        "lanes:\n  tiers:\n    - {name: Gemini-Free, max_attempts: 2, pin_on: [ambiguous]}\n    - {name: gpt-4o}\n",
    )
    .unwrap();
    let input = dir.path().join("in.ndjson");
    let text = [
        line("j1", 1, "Gemini-Free", "ambiguous"),
        line("j1", 2, "Gemini-Free", "ok"),
        line("j2", 1, "gpt-4o", "ok"),
        line("j3", 1, "paid", "ok"),
    ]
    .join("\n");
    std::fs::write(&input, text).unwrap();
    let db = dir.path().join("l.redb");
    let (db, config, input) = (db.to_str().unwrap(), config.to_str().unwrap(), input.to_str().unwrap());

    let o = run(&["ingest", "--db", db, "--config", config, input]);
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(
        String::from_utf8(o.stdout).unwrap(),
        "accepted 3, completed 0, duplicate deliveries 0, conflicts 0, rejected 1\n"
    );
    assert!(
        String::from_utf8(o.stderr)
            .unwrap()
            .contains(&format!("{input}:4: lane: \"paid\" is not Gemini-Free or gpt-4o")),
    );

    let o = run(&[
        "sql",
        "--db",
        db,
        "--format",
        "csv",
        "SELECT job_id, attempt_no, lane FROM job_attempt ORDER BY job_id, attempt_no",
    ]);
    assert_eq!(
        String::from_utf8(o.stdout).unwrap(),
        "job_id,attempt_no,lane\r\nj1,1,Gemini-Free\r\nj1,2,Gemini-Free\r\nj2,1,gpt-4o\r\n"
    );

    // Without the config, the same lanes are not the default ones.
    let o = run(&["ingest", "--db", db, input]);
    assert_eq!(
        String::from_utf8(o.stdout).unwrap(),
        "accepted 1, completed 0, duplicate deliveries 0, conflicts 0, rejected 3\n"
    );

    let o = run(&[
        "review", "--db", db, "--config", config, "--week", "2026-W48", "--format", "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let review: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let text = review.to_string();
    assert!(
        text.contains("a Gemini-Free attempt after an ambiguous outcome: pin to gpt-4o"),
        "{text}"
    );
}
