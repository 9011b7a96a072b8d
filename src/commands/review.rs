//! `laneledger review`.

use std::path::Path;
use std::process::ExitCode;

use laneledger_query::{Session, section_text};

use crate::cli::ReviewFormat;

pub fn run(db: &Path, week: Option<&str>, format: ReviewFormat, config: Option<&Path>) -> anyhow::Result<ExitCode> {
    let config = super::load_config(config)?;
    let ledger = super::open_to_read(db)?;
    let (review, sections) = super::runtime()?.block_on(async {
        let session = Session::with_config(ledger, config).await?;
        session.review_with_sections(week, &session.thresholds()).await
    })?;
    match format {
        ReviewFormat::Text => {
            let mut text = review.to_text();
            for s in &sections {
                text += &format!("\n{}", section_text(s));
            }
            super::print(&text)?;
        }
        ReviewFormat::Json => {
            let v = laneledger_query::review_document(&review, &sections);
            super::print(&format!("{}\n", serde_json::to_string_pretty(&v)?))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
