//! `laneledger verify`: check the hash chain and every record; log the run.

use std::path::Path;
use std::process::ExitCode;

use laneledger_store::{now_micros, parse_timestamp};

/// The exit code when the ledger does not verify.
pub const BROKEN: u8 = 4;

pub fn run(db: &Path, now: Option<&str>) -> anyhow::Result<ExitCode> {
    let at = match now {
        Some(t) => parse_timestamp(t).map_err(|e| anyhow::anyhow!("--now: {e}"))?,
        None => now_micros(),
    };
    let ledger = super::open_existing(db)?;
    let report = ledger.verify()?;
    ledger.record_verify(at, &report)?;
    match &report.first_bad {
        None => {
            super::print(&format!(
                "clean: {} chain entries, {} records, {} checkpoints crossed; tip {}\n",
                report.entries, report.records, report.checkpoints, report.tip
            ))?;
            Ok(ExitCode::SUCCESS)
        }
        Some(bad) => {
            eprintln!(
                "laneledger: {} does not verify ({} problem{}); first bad record: {bad}",
                db.display(),
                report.problems,
                if report.problems == 1 { "" } else { "s" }
            );
            Ok(ExitCode::from(BROKEN))
        }
    }
}
