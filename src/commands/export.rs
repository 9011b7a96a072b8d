//! `laneledger export` (SPEC 8 export).

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use laneledger_query::export::{self, ExportFormat, parse_bound};

use crate::cli::ExportFormatArg;

pub fn run(
    db: &Path,
    format: ExportFormatArg,
    out: &Path,
    since: Option<&str>,
    until: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let since = since.map(parse_bound).transpose().context("--since")?;
    let until = until.map(parse_bound).transpose().context("--until")?;
    let format = match format {
        ExportFormatArg::Parquet => ExportFormat::Parquet,
        ExportFormatArg::Arrow => ExportFormat::Arrow,
        ExportFormatArg::Csv => ExportFormat::Csv,
    };
    let ledger = super::open_to_read(db)?;
    let summary = export::export(&ledger, format, out, since, until)?;
    super::print(&format!("{summary}\n"))?;
    Ok(ExitCode::SUCCESS)
}
