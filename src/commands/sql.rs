//! `laneledger sql`.

use std::path::Path;
use std::process::ExitCode;

use laneledger_query::{OutputFormat, Session, format_result};

use crate::cli::SqlFormat;

pub fn run(db: &Path, format: SqlFormat, sql: &str) -> anyhow::Result<ExitCode> {
    let ledger = super::open_to_read(db)?;
    let sql = if sql == "-" {
        std::io::read_to_string(std::io::stdin())?
    } else {
        sql.to_string()
    };
    let out = super::runtime()?.block_on(async {
        let session = Session::new(ledger).await?;
        let result = session.query(&sql).await?;
        let fmt = match format {
            SqlFormat::Table => OutputFormat::Table,
            SqlFormat::Csv => OutputFormat::Csv,
            SqlFormat::Json => OutputFormat::Json,
        };
        format_result(&result, fmt)
    })?;
    super::print(&out)?;
    Ok(ExitCode::SUCCESS)
}
