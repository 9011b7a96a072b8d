//! `laneledger whatif`.

use std::path::Path;
use std::process::ExitCode;

use laneledger_query::session::QUERY_MEMORY_BYTES;
use laneledger_query::{Session, Upkeep};

use crate::cli::ReviewFormat;

pub fn run(
    db: &Path,
    week: &str,
    config: &Path,
    base: Option<&Path>,
    seed: u64,
    format: ReviewFormat,
) -> anyhow::Result<ExitCode> {
    let changed = super::load_config(Some(config))?;
    let now = super::load_config(base)?;
    let ledger = super::open_to_read(db)?;
    let whatif = super::runtime()?.block_on(async {
        let session = Session::with_upkeep(ledger, now, QUERY_MEMORY_BYTES, Upkeep::PerRead).await?;
        session.whatif(week, &changed, seed).await
    })?;
    match format {
        ReviewFormat::Text => super::print(&whatif.to_text())?,
        ReviewFormat::Json => super::print(&format!("{}\n", serde_json::to_string_pretty(&whatif)?))?,
    }
    Ok(ExitCode::SUCCESS)
}
