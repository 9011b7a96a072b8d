//! `laneledger retain` and `laneledger verify` as a user runs them: exit codes, output, the verify
//! log, and `retain` children killed (SIGKILL) at random moments converging when run again.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use laneledger_store::drill::SplitMix64;
use laneledger_store::{Ledger, StoredAttempt};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_laneledger"))
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run laneledger")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A ledger of seed 000's no-pin drill over 60 days from 2026-09-01 (300 jobs).
fn drill_ledger(dir: &Path) -> String {
    let input = dir.join("d.ndjson");
    let db = dir.join("l.redb");
    let o = run(&[
        "drill",
        "--jobs",
        "300",
        "--policy",
        "nopin",
        "--start",
        "2026-09-01T00:00:00Z",
        "--days",
        "60",
        "--out",
        input.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = run(&["ingest", "--db", db.to_str().unwrap(), input.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    db.to_str().unwrap().to_string()
}

const NOW: &str = "2026-11-01T00:00:00Z";

fn attempts(db: &str) -> Vec<StoredAttempt> {
    let l = Ledger::open(db).unwrap();
    let mut v = Vec::new();
    l.for_each_attempt(|a| v.push(a)).unwrap();
    v
}

#[test]
fn verify_exits_4_naming_the_changed_record_and_logs_each_run() {
    let dir = tempfile::tempdir().unwrap();
    let db = drill_ledger(dir.path());
    let o = run(&["verify", "--db", &db, "--now", NOW]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).starts_with("clean: 415 chain entries, 415 records, 0 checkpoints crossed; tip "));

    // Change one attempt's bytes behind the ledger's back.
    {
        let l = Ledger::open(&db).unwrap();
        let read = l.database().begin_read().unwrap();
        let mut v = laneledger_store::storage::attempt_store::read_rows(&read)
            .unwrap()
            .get("job-000042", 1)
            .unwrap()
            .unwrap();
        drop(read);
        let txn = l.database().begin_write().unwrap();
        let last = v.len() - 1;
        v[last] ^= 1;
        laneledger_store::storage::attempt_store::set_row(&txn, "job-000042", 1, Some(&v)).unwrap();
        txn.commit().unwrap();
    }
    let o = run(&["verify", "--db", &db, "--now", NOW]);
    assert_eq!(o.status.code(), Some(4));
    let err = text(&o.stderr);
    assert!(
        err.contains("first bad record: attempt job_id=job-000042 attempt_no=1 (chain position "),
        "{err}"
    );
    assert!(err.contains("record changed"), "{err}");
    let o = run(&[
        "sql",
        "--db",
        &db,
        "--format",
        "csv",
        "SELECT run_no, verified_at, clean FROM verify_run ORDER BY run_no",
    ]);
    assert_eq!(
        text(&o.stdout),
        "run_no,verified_at,clean\r\n1,2026-11-01T00:00:00Z,true\r\n2,2026-11-01T00:00:00Z,false\r\n"
    );
}

#[test]
fn retain_dry_run_writes_nothing_and_a_sweep_prints_what_it_removed() {
    let dir = tempfile::tempdir().unwrap();
    let db = drill_ledger(dir.path());
    let before = attempts(&db);
    let o = run(&["retain", "--db", &db, "--now", NOW, "--dry-run"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let cutoff = laneledger_store::parse_timestamp("2026-10-02T00:00:00Z").unwrap();
    let old: Vec<&StoredAttempt> = before
        .iter()
        .filter(|a| {
            before
                .iter()
                .filter(|b| b.attempt.job_id == a.attempt.job_id)
                .all(|b| b.attempt.ended_at.is_some_and(|e| e < cutoff))
        })
        .collect();
    let jobs: std::collections::BTreeSet<&str> = old.iter().map(|a| a.attempt.job_id.as_str()).collect();
    let head = format!(
        "dry run, nothing written: would remove {} jobs, {} attempts, every attempt ended before the cutoff \
         2026-10-02T00:00:00Z (30 days before 2026-11-01T00:00:00Z); digest ",
        jobs.len(),
        old.len()
    );
    assert!(out.starts_with(&head), "{out}");
    assert_eq!(attempts(&db), before);

    let o = run(&["retain", "--db", &db, "--now", NOW, "--days", "45"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).starts_with("sweep 1: removed "), "{}", text(&o.stdout));
    let o = run(&["retain", "--db", &db, "--now", NOW, "--days", "45"]);
    assert_eq!(
        text(&o.stdout),
        "nothing to remove: no finished job ended before 2026-09-17T00:00:00Z; nothing written\n"
    );
    let o = run(&["verify", "--db", &db]);
    assert_eq!(o.status.code(), Some(0));
}

/// `compact` after a sweep gives the freed pages back: the file shrinks, and every record, the
/// chain and its tip are as before.
#[test]
fn compact_after_a_sweep_shrinks_the_file_and_keeps_every_record_and_the_tip() {
    let dir = tempfile::tempdir().unwrap();
    let db = drill_ledger(dir.path());
    let o = run(&["retain", "--db", &db, "--now", NOW]);
    assert!(text(&o.stdout).starts_with("sweep 1: removed "), "{}", text(&o.stdout));
    let kept = attempts(&db);
    let o = run(&["verify", "--db", &db, "--now", NOW]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let clean = text(&o.stdout);
    let before = std::fs::metadata(&db).unwrap().len();

    let o = run(&["compact", "--db", &db]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let after = std::fs::metadata(&db).unwrap().len();
    assert!(after < before, "{before} -> {after} bytes");
    let smaller = (before - after) as f64 * 100.0 / before as f64;
    assert_eq!(
        text(&o.stdout),
        format!("compacted {db}: {before} -> {after} bytes ({smaller:.1}% smaller)\n")
    );
    assert_eq!(attempts(&db), kept);
    // The same entries, records and tip (the verify log grew by one run, outside the chain).
    let o = run(&["verify", "--db", &db, "--now", NOW]);
    assert_eq!((o.status.code(), text(&o.stdout)), (Some(0), clean));
}

/// 10 `retain --archive` children killed with SIGKILL after a random delay, each then run again
/// to the end: every ledger ends as the uninterrupted sweep left its own, and verifies.
#[test]
fn retain_killed_at_random_moments_converges_when_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let base = drill_ledger(dir.path());
    let reference = {
        let db = dir.path().join("ref.redb");
        std::fs::copy(&base, &db).unwrap();
        let db = db.to_str().unwrap();
        let arch = dir.path().join("ref-arch");
        let o = run(&["retain", "--db", db, "--now", NOW, "--archive", arch.to_str().unwrap()]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        attempts(db)
    };
    let mut rng = SplitMix64::new(3);
    for i in 0..10 {
        let db = dir.path().join(format!("k{i}.redb"));
        std::fs::copy(&base, &db).unwrap();
        let db = db.to_str().unwrap();
        let arch = dir.path().join(format!("arch-{i}"));
        let mut child = bin()
            .args(["retain", "--db", db, "--now", NOW, "--archive", arch.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(rng.next_u64() % 400));
        child.kill().unwrap(); // SIGKILL on Unix; a child already done is fine
        child.wait().unwrap();
        let o = run(&["retain", "--db", db, "--now", NOW, "--archive", arch.to_str().unwrap()]);
        assert!(o.status.success(), "run {i}: {}", text(&o.stderr));
        assert_eq!(attempts(db), reference, "run {i}");
        let l = Ledger::open(db).unwrap();
        assert_eq!(l.sweeps().unwrap().len(), 1, "run {i}");
        assert!(l.verify().unwrap().is_clean(), "run {i}");
        let left: Vec<_> = std::fs::read_dir(&arch)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["sweep-000001"], "run {i}");
    }
}
