//! `laneledger export` (SPEC 8 export).

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use laneledger_query::archive::export::{self, ExportFormat, parse_bound};
use laneledger_query::tables::gate_decision::GateDefaults;

use crate::cli::ExportFormatArg;

pub fn run(
    db: &Path,
    format: ExportFormatArg,
    out: &Path,
    since: Option<&str>,
    until: Option<&str>,
    config: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    let (since_text, until_text) = (since, until);
    let since = since.map(parse_bound).transpose().context("--since")?;
    let until = until.map(parse_bound).transpose().context("--until")?;
    let format_name = match format {
        ExportFormatArg::Parquet => "parquet",
        ExportFormatArg::Arrow => "arrow",
        ExportFormatArg::Csv => "csv",
    };
    let format = match format {
        ExportFormatArg::Parquet => ExportFormat::Parquet,
        ExportFormatArg::Arrow => ExportFormat::Arrow,
        ExportFormatArg::Csv => ExportFormat::Csv,
    };
    let lane_yaml = config;
    let config = super::load_config(config)?;
    let gate = GateDefaults {
        max_queue_age_s: config.gate.max_queue_age_s,
        reserved_service_s: config.gate.reserved_service_s,
    };
    let ledger = match super::open_to_read(db) {
        Ok(ledger) => ledger,
        // `serve` holds the file: it exports, and the files are unpacked here.
        Err(e) => {
            let server = super::remote::through_server(db, e)?;
            server.same_config(lane_yaml)?;
            return server.export(format_name, out, since_text, until_text);
        }
    };
    let reporter = crate::progress::Reporter::new("export");
    let summary = export::export_with_progress(&ledger, format, out, since, until, &gate, &reporter)?;
    reporter.finish();
    super::print(&format!("{summary}\n"))?;
    Ok(ExitCode::SUCCESS)
}
