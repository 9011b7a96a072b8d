//! `laneledger verify`: check every page's checksum, the hash chain and every record; log the run.

use std::path::Path;
use std::process::ExitCode;

use laneledger_query::words::counted;
use laneledger_store::{now_micros, parse_timestamp};

/// The exit code when the ledger does not verify.
pub const BROKEN: u8 = 4;

pub fn run(db: &Path, now: Option<&str>) -> anyhow::Result<ExitCode> {
    let at = match now {
        Some(t) => parse_timestamp(t).map_err(|e| super::usage::usage(format!("--now: {e}")))?,
        None => now_micros(),
    };
    let ledger = match super::open_existing(db) {
        Ok(ledger) => ledger,
        // `serve` holds the file: it checks the chain on its open database.
        Err(e) => return super::remote::through_server(db, e)?.verify(),
    };
    // The chain check first: it names the record a damaged value belongs to.
    let reporter = crate::progress::Reporter::new("verify");
    let report = ledger.verify_with_progress(&reporter)?;
    reporter.finish();
    // Then redb's checksum of every page, for damage no record shows (a page header, an index).
    let ledger = if report.first_bad.is_none() && !ledger.is_read_only() {
        drop(ledger);
        super::open_checked(db)?
    } else {
        ledger
    };
    if ledger.is_read_only() {
        eprintln!(
            "laneledger: {} cannot be written: this run is not logged in verify_run",
            db.display()
        );
    } else {
        ledger.record_verify(at, &report)?;
    }
    match &report.first_bad {
        None => {
            super::print(&format!(
                "clean: {}, {}, {} crossed; tip {}\n",
                counted(report.entries, "chain entry", "chain entries"),
                counted(report.records, "record", "records"),
                counted(report.checkpoints, "checkpoint", "checkpoints"),
                report.tip
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
