//! `laneledger review`.

use std::path::Path;
use std::process::ExitCode;

use laneledger_query::{Session, Thresholds};

use crate::cli::ReviewFormat;

pub fn run(db: &Path, week: Option<&str>, format: ReviewFormat) -> anyhow::Result<ExitCode> {
    let ledger = super::open_existing(db)?;
    let review = super::runtime()?.block_on(async {
        let session = Session::new(ledger).await?;
        session.review(week, &Thresholds::default()).await
    })?;
    match format {
        ReviewFormat::Text => print!("{}", review.to_text()),
        ReviewFormat::Json => println!("{}", serde_json::to_string_pretty(&review)?),
    }
    Ok(ExitCode::SUCCESS)
}
