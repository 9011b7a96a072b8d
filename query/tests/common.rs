//! Shared test helpers: ledgers built from sample data or from the drill generator.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use laneledger_store::drill::{self, DrillConfig, Policy};
use laneledger_store::{DEFAULT_BATCH, Incoming, InputFormat, Ledger, ingest_reader};

/// A ledger in a temporary folder holding `lines` (NDJSON attempt records), every one accepted.
pub fn ledger_of_lines(lines: &[String]) -> (tempfile::TempDir, Ledger) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("lines.redb")).unwrap();
    let text = lines.join("\n");
    let r = ingest_reader(
        &ledger,
        "fixture",
        text.as_bytes(),
        InputFormat::Ndjson,
        DEFAULT_BATCH,
        |_| {},
    )
    .unwrap();
    assert_eq!(r.counters.rejected + r.counters.conflicts, 0, "{:?}", r.problems);
    (dir, ledger)
}

/// The repository's sample-data folder.
pub fn sample(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample-data").join(name)
}

/// A fresh ledger in a temp dir holding the given sample files.
pub fn ledger_from(files: &[&str]) -> (tempfile::TempDir, Ledger) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("t.redb")).unwrap();
    for f in files {
        let path = sample(f);
        let reader = std::io::BufReader::new(std::fs::File::open(&path).unwrap());
        let report = ingest_reader(&ledger, f, reader, InputFormat::from_path(f), DEFAULT_BATCH, |_| {}).unwrap();
        assert_eq!(
            report.counters.rejected + report.counters.conflicts,
            0,
            "{f}: {:?}",
            report.problems
        );
    }
    (dir, ledger)
}

/// A fresh ledger holding a synthetic drill of `jobs` jobs.
pub fn ledger_from_drill(jobs: usize, policy: Policy, seed: u64) -> (tempfile::TempDir, Ledger) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("t.redb")).unwrap();
    let start = laneledger_store::parse_timestamp("2026-11-02T00:00:00Z").unwrap();
    let cfg = DrillConfig {
        policy,
        seed,
        job_prefix: "g-".into(),
        ids: laneledger_store::drill::DrillIds::Sequential,
    };
    let attempts = drill::synthetic(&cfg, jobs, start, 14.0);
    for chunk in attempts.chunks(DEFAULT_BATCH) {
        let batch = chunk
            .iter()
            .map(|a| Incoming::Attempt {
                source: "gen".into(),
                line: 0,
                raw: String::new(),
                attempt: a.clone(),
            })
            .collect();
        ledger.write_batch(batch).unwrap();
    }
    (dir, ledger)
}
