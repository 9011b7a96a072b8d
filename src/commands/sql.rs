//! `laneledger sql`.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use laneledger_query::{OutputFormat, ResultLimits, Session, Upkeep, format_result};

use crate::cli::SqlFormat;

/// The exit code of a statement stopped at `--timeout`.
pub const TIMED_OUT: u8 = 5;

/// Runs one statement under `timeout_s` seconds (0: none) and `memory` bytes for its operators,
/// its answer cut at `limits` (a line on stderr says where).
/// The statement runs on the query layer's own threads: at the timeout it is stopped, its
/// threads' work dropped, and the command exits [`TIMED_OUT`].
pub fn run(
    db: &Path,
    format: SqlFormat,
    timeout_s: f64,
    memory: usize,
    limits: ResultLimits,
    sql: &str,
) -> anyhow::Result<ExitCode> {
    if !(timeout_s.is_finite() && (0.0..=31_536_000.0).contains(&timeout_s)) {
        return Err(super::usage::usage(format!(
            "--timeout must be a number of seconds from 0 (no limit) to 31536000, not {timeout_s}"
        )));
    }
    let sql = if sql == "-" {
        std::io::read_to_string(std::io::stdin())?
    } else {
        sql.to_string()
    };
    let ledger = match super::open_to_read(db) {
        Ok(ledger) => ledger,
        // `serve` holds the file: it answers the statement.
        Err(e) => return super::remote::through_server(db, e)?.sql(format, &sql),
    };
    let config = laneledger_store::LaneConfig::default();
    let out = super::runtime()?.block_on(async {
        let session = Session::with_upkeep(ledger, config, memory.max(1 << 20), Upkeep::PerRead).await?;
        let query = session.query_capped(&sql, limits);
        let (result, cut) = if timeout_s == 0.0 {
            query.await?
        } else {
            match tokio::time::timeout(Duration::from_secs_f64(timeout_s), query).await {
                Ok(result) => result?,
                Err(_) => return Ok(None),
            }
        };
        let fmt = match format {
            SqlFormat::Table => OutputFormat::Table,
            SqlFormat::Csv => OutputFormat::Csv,
            SqlFormat::Json => OutputFormat::Json,
        };
        Ok::<_, anyhow::Error>(Some((format_result(&result, fmt)?, cut)))
    })?;
    match out {
        Some((out, cut)) => {
            super::print(&out)?;
            if let Some(cut) = cut {
                eprintln!("laneledger: {}", cut.notice());
            }
            Ok(ExitCode::SUCCESS)
        }
        None => {
            eprintln!("laneledger: the statement ran longer than {timeout_s} s (--timeout) and was stopped");
            Ok(ExitCode::from(TIMED_OUT))
        }
    }
}
