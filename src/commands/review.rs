//! `laneledger review`.

use std::path::Path;
use std::process::ExitCode;

use laneledger_query::session::QUERY_MEMORY_BYTES;
use laneledger_query::{Session, Upkeep, section_text};

use crate::cli::ReviewFormat;

pub fn run(db: &Path, week: Option<&str>, format: ReviewFormat, config: Option<&Path>) -> anyhow::Result<ExitCode> {
    let lane_yaml = config;
    let config = super::load_config(config)?;
    let ledger = match super::open_to_read(db) {
        Ok(ledger) => ledger,
        // `serve` holds the file: it renders the review, with its own lane.yaml.
        Err(e) => {
            let server = super::remote::through_server(db, e)?;
            server.same_config(lane_yaml)?;
            return server.review(week, format);
        }
    };
    let (review, sections) = super::runtime()?.block_on(async {
        let session = Session::with_upkeep(ledger, config, QUERY_MEMORY_BYTES, Upkeep::PerRead).await?;
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
