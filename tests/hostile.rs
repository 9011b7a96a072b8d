//! `laneledger sql` against hostile statements (issue 36): a statement past `--timeout` is stopped
//! with exit 5 and a message, a string function past its size cap is refused with exit 1 (never
//! a panic's 101), and the process ends promptly after the timeout. Bounds are generous (debug
//! build, 2-core CI box).

#[path = "support/generated.rs"]
mod generated;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_laneledger"))
}

fn ledger(dir: &Path, n: usize) -> std::path::PathBuf {
    generated::ledger(dir, "hostile", n)
}

fn sql(db: &Path, args: &[&str]) -> (Output, Duration) {
    let t = Instant::now();
    let o = bin().arg("sql").arg("--db").arg(db).args(args).output().unwrap();
    (o, t.elapsed())
}

#[test]
fn a_statement_past_the_timeout_exits_5_promptly() {
    let dir = tempfile::tempdir().unwrap();
    let db = ledger(dir.path(), 2_000);
    let (o, took) = sql(
        &db,
        &[
            "--timeout",
            "1",
            "SELECT count(*) FROM job_attempt a, job_attempt b, job_attempt c \
             WHERE a.tokens_in + b.tokens_in + c.tokens_in >= 0",
        ],
    );
    assert_eq!(o.status.code(), Some(5), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "laneledger: the statement ran longer than 1 s (--timeout) and was stopped\n"
    );
    assert!(o.stdout.is_empty());
    assert!(took < Duration::from_secs(10), "{took:?}");
    // Under the timeout the answer is printed as before.
    let (o, _) = sql(
        &db,
        &[
            "--timeout",
            "30",
            "--format",
            "csv",
            "SELECT count(*) AS n FROM job_attempt",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "n\r\n2000\r\n");
}

#[test]
fn a_bad_timeout_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = ledger(dir.path(), 10);
    let (o, _) = sql(&db, &["--timeout", "-1", "SELECT 1"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "laneledger: --timeout must be a number of seconds from 0 (no limit) to 31536000, not -1\n"
    );
}

#[test]
fn repeat_past_the_cap_exits_1_with_a_message_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let db = ledger(dir.path(), 2_000);
    let (o, _) = sql(&db, &["SELECT max(length(repeat(job_id, 100000))) FROM job_attempt"]);
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.starts_with("laneledger: query failed: Execution error: repeat would build more than 67108864 bytes"),
        "{e}"
    );
    assert!(!e.contains("panicked"), "{e}");
}

#[test]
fn the_memory_limit_is_a_flag() {
    let dir = tempfile::tempdir().unwrap();
    let db = ledger(dir.path(), 2_000);
    // Four million distinct keys need more than 2 MiB.
    let (o, _) = sql(
        &db,
        &[
            "--memory",
            "2097152",
            "SELECT count(DISTINCT a.job_id || b.job_id) FROM job_attempt a, job_attempt b",
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("Resources exhausted"), "{e}");
}
