//! The rough edges a new user hits, each with its exact message and exit code: a misspelt table
//! gets a "did you mean", a column outside GROUP BY is explained, a bad line ingested twice is kept
//! once, a usage error exits 2, and counts of one take the singular.

use std::path::Path;
use std::process::{Command, Output};

const ONE: &str = r#"{"job_id":"j1","idem_key":"k1","attempt_no":1,"lane":"free","started_at":"2026-09-01T09:00:00Z","ended_at":"2026-09-01T09:00:05Z","outcome":"ok","tokens_in":10,"tokens_out":5,"artifact_id":"a1"}"#;
const BAD: &str = r#"{"job_id":"j2","idem_key":"k2","attempt_no":1,"lane":"slow","started_at":"2026-09-01T09:00:00Z"}"#;

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_laneledger"))
        .args(args)
        .env("LANELEDGER_LOG", "off")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

/// A ledger holding the one attempt [`ONE`].
fn one_attempt(dir: &Path) -> String {
    let input = dir.join("one.ndjson");
    std::fs::write(&input, format!("{ONE}\n")).unwrap();
    let db = dir.join("l.redb").to_str().unwrap().to_string();
    let o = run(&["ingest", "--db", &db, input.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    db
}

#[test]
fn a_misspelt_table_gets_a_did_you_mean() {
    let dir = tempfile::tempdir().unwrap();
    let db = one_attempt(dir.path());
    let o = run(&["sql", "--db", &db, "SELECT * FROM job_atempt"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "laneledger: table job_atempt not found; did you mean job_attempt?\n"
    );
    let o = run(&["sql", "--db", &db, "SELECT COUNT(*) FROM weekly_metric"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "laneledger: table weekly_metric not found; did you mean weekly_metrics?\n"
    );
}

#[test]
fn a_column_outside_group_by_is_explained_in_words() {
    let dir = tempfile::tempdir().unwrap();
    let db = one_attempt(dir.path());
    let o = run(&["sql", "--db", &db, "SELECT lane, COUNT(*) FROM job_attempt"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "laneledger: column lane is selected beside an aggregate (COUNT, SUM, …) but is not in GROUP BY \
         (a `*` selects every column): add `GROUP BY lane`, or put it inside an aggregate such as `MIN(lane)`\n"
    );
}

#[test]
fn the_same_bad_line_ingested_twice_is_kept_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("l.redb").to_str().unwrap().to_string();
    let input = dir.path().join("bad.ndjson");
    std::fs::write(&input, format!("{ONE}\n{BAD}\n")).unwrap();
    let input = input.to_str().unwrap();
    let first = run(&["ingest", "--db", &db, input]);
    assert_eq!(first.status.code(), Some(3));
    assert_eq!(
        stdout(&first),
        "accepted 1, completed 0, duplicate deliveries 0, conflicts 0, rejected 1\n"
    );
    assert_eq!(
        stderr(&first),
        format!("{input}:2: lane: \"slow\" is not free or paid\n")
    );
    let again = run(&["ingest", "--db", &db, input]);
    assert_eq!(again.status.code(), Some(3));
    assert_eq!(
        stdout(&again),
        "accepted 0, completed 0, duplicate deliveries 1, conflicts 0, rejected 1\n"
    );
    assert_eq!(
        stderr(&again),
        format!("{input}:2: lane: \"slow\" is not free or paid (delivered again: kept once, as ingest_reject 1)\n")
    );
    let o = run(&[
        "sql",
        "--db",
        &db,
        "--format",
        "csv",
        "SELECT COUNT(*) AS n FROM ingest_reject",
    ]);
    assert_eq!(stdout(&o), "n\r\n1\r\n");
}

#[test]
fn a_usage_error_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let db = one_attempt(dir.path());
    for (args, message) in [
        (vec!["retain", "--db", &db, "--days", "0"], "--days must be at least 1"),
        (
            vec!["retain", "--db", &db, "--now", "yesterday", "--dry-run"],
            "--now: not an RFC 3339 timestamp: \"yesterday\"",
        ),
        (
            vec!["ingest", "--db", &db, "--dry-run", "x.ndjson"],
            "--idem-fallback and --dry-run go with --mapping (a router's own log)",
        ),
        (
            vec!["ingest", "--db", &db, "--table", "t", "x.ndjson"],
            "--table names the table of a SQLite database: it goes with --format sqlite",
        ),
        (
            vec!["sql", "--db", &db, "--timeout", "-1", "SELECT 1"],
            "--timeout must be a number of seconds from 0 (no limit) to 31536000, not -1",
        ),
        (
            vec!["drill", "--jobs", "3", "--policy", "pin", "--days", "0"],
            "--days must be above 0",
        ),
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert_eq!(stderr(&o), format!("laneledger: {message}\n"), "{args:?}");
    }
}

#[test]
fn counts_of_one_take_the_singular() {
    let dir = tempfile::tempdir().unwrap();
    let db = one_attempt(dir.path());
    let o = run(&["verify", "--db", &db]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("clean: 1 chain entry, 1 record, 0 checkpoints crossed; tip "),
        "{}",
        stdout(&o)
    );

    let o = run(&[
        "retain",
        "--db",
        &db,
        "--days",
        "1",
        "--now",
        "2026-09-03T00:00:00Z",
        "--dry-run",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.starts_with(
            "dry run, nothing written: would remove 1 job, 1 attempt, every attempt ended before the cutoff \
             2026-09-02T00:00:00Z (1 day before 2026-09-03T00:00:00Z); digest "
        ),
        "{out}"
    );
    assert!(
        out.ends_with(
            "\nkept: 0 old jobs with an open attempt, 0 inside a reconcile window of 900 s\n  2026-09-01  1 attempt\n"
        ),
        "{out}"
    );

    let export = dir.path().join("export");
    let o = run(&[
        "export",
        "--db",
        &db,
        "--format",
        "csv",
        "--out",
        export.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let bytes = std::fs::metadata(export.join("day=2026-09-01").join("attempts.csv"))
        .unwrap()
        .len();
    assert_eq!(
        stdout(&o),
        format!("exported 1 row, 1 day, 1 file, {bytes} bytes to {}\n", export.display())
    );
}

#[test]
fn an_attempt_left_open_past_the_grace_period_is_swept_and_the_sweep_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("open.ndjson");
    std::fs::write(
        &input,
        r#"{"job_id":"lost","idem_key":"k","attempt_no":1,"lane":"free","started_at":"2026-09-01T09:00:00Z"}
"#,
    )
    .unwrap();
    let db = dir.path().join("l.redb");
    let db = db.to_str().unwrap();
    assert_eq!(
        run(&["ingest", "--db", db, input.to_str().unwrap()]).status.code(),
        Some(0)
    );
    // Cutoff 2026-10-02 (30 days): the attempt opened 31 days before it, past the 7-day grace.
    let o = run(&["retain", "--db", db, "--now", "2026-11-01T00:00:00Z"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with("sweep 1: removed 1 job, 1 attempt, "), "{out}");
    assert!(
        out.contains(
            "\nabandoned: 1 job with an attempt still open that started before 2026-09-25T00:00:00Z \
             (7 days before the cutoff)\n"
        ),
        "{out}"
    );
    let o = run(&[
        "sql",
        "--db",
        db,
        "--format",
        "csv",
        "SELECT jobs_removed, jobs_abandoned FROM retention_sweep",
    ]);
    assert_eq!(stdout(&o), "jobs_removed,jobs_abandoned\r\n1,1\r\n");
}

#[test]
fn output_into_a_closed_pipe_stops_quietly() {
    // `laneledger … | head -1`: the reader is gone before the command prints. Every command
    // stops quietly with exit 0, whether it prints a line at a time or a whole table.
    let dir = tempfile::tempdir().unwrap();
    let db = one_attempt(dir.path());
    for args in [
        vec!["mappings"],
        vec!["review", "--db", &db],
        vec!["sql", "--db", &db, "SELECT * FROM generate_series(1, 300000)"],
        vec!["drill", "--policy", "nopin", "--jobs", "2000", "--order", "time"],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let o = Command::new(env!("CARGO_BIN_EXE_laneledger"))
            .args(&args)
            .env("LANELEDGER_LOG", "off")
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        assert_eq!((o.status.code(), stderr(&o)), (Some(0), String::new()), "{args:?}");
    }
}
