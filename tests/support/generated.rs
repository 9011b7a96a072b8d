//! A ledger of generated attempts, for the tests that attack or damage one (`damage.rs`,
//! `hostile.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// A ledger `dir/NAME.redb` of `n` one-attempt jobs, ingested by the binary.
pub fn ledger(dir: &Path, name: &str, n: usize) -> PathBuf {
    let input = dir.join("attempts.ndjson");
    let text: String = (0..n)
        .map(|i| {
            format!(
                "{{\"job_id\":\"job-{i:06}\",\"idem_key\":\"idem-{i:06}\",\"attempt_no\":1,\"lane\":\"free\",\
                 \"started_at\":\"2026-11-23T10:{:02}:{:02}Z\",\"ended_at\":\"2026-11-23T10:{:02}:{:02}.5Z\",\
                 \"outcome\":\"ok\",\"tokens_in\":{},\"tokens_out\":700,\"artifact_id\":\"art-{i:06}\"}}\n",
                (i / 60) % 60,
                i % 60,
                (i / 60) % 60,
                i % 60,
                100 + i
            )
        })
        .collect();
    std::fs::write(&input, text).unwrap();
    let db = dir.join(format!("{name}.redb"));
    let o = Command::new(env!("CARGO_BIN_EXE_laneledger"))
        .arg("ingest")
        .arg("--db")
        .arg(&db)
        .arg(&input)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    db
}
