//! Why a job was flagged: every row of the week's audit sections that names the job (issue 31),
//! with the rule it broke in words, for the job page.
//!
//! The findings come from the sections themselves ([`Session::audit_sections`]), so a section
//! with a `job_id` column is searched without being listed here; [`words`] says the known ones
//! in sentences and any other as its columns.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::error::Result;
use crate::review::sections::{Section, cells};
use crate::session::Session;

/// One audit row about a job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// The section's id (`same_key_retry`): its anchor on the week page.
    pub section: &'static str,
    /// The section's title.
    pub title: &'static str,
    /// The ISO week whose review lists it.
    pub week: String,
    /// The attempt it is about, when the row names one.
    pub attempt_no: Option<String>,
    /// What went wrong, in words.
    pub words: String,
}

/// `'` doubled, for a string literal in SQL.
fn quote(s: &str) -> String {
    s.replace('\'', "''")
}

impl Session {
    /// Every audit finding about `job_id`: the rows naming it in the audit sections of each of
    /// `weeks` (the job's own week, from its first attempt) and of the weeks of its gate
    /// decisions (their lists go by `decided_at`). In week order, then page order.
    pub async fn job_findings(&self, job_id: &str, weeks: &[String]) -> Result<Vec<Finding>> {
        let mut all: BTreeSet<String> = weeks.iter().cloned().collect();
        let sql = format!(
            "SELECT DISTINCT to_char(decided_at, '%G-W%V') AS week FROM gate_decision WHERE job_id = '{}'",
            quote(job_id)
        );
        for row in cells(&self.query(&sql).await?.batches, usize::MAX)? {
            all.extend(row.into_iter().flatten());
        }
        let mut out = Vec::new();
        for week in &all {
            for section in self.audit_sections(week).await? {
                out.extend(self.section_findings(&section, job_id, week).await?);
            }
        }
        Ok(out)
    }

    /// The rows of `section` that name `job_id` in its `job_id` column.
    async fn section_findings(&self, section: &Section, job_id: &str, week: &str) -> Result<Vec<Finding>> {
        let Some(col) = section.column("job_id") else {
            return Ok(Vec::new());
        };
        let rows: Vec<Vec<Option<String>>> = if section.total_rows <= section.rows.len() {
            section
                .rows
                .iter()
                .filter(|r| r[col].as_deref() == Some(job_id))
                .cloned()
                .collect()
        } else {
            // A cut section: its SQL again, for the job's rows only.
            let sql = format!(
                "SELECT * FROM ({}) AS section WHERE job_id = '{}'",
                section.sql,
                quote(job_id)
            );
            cells(&self.query(&sql).await?.batches, usize::MAX)?
        };
        let attempt = section.column("attempt_no");
        Ok(rows
            .iter()
            .map(|r| Finding {
                section: section.id,
                title: section.title,
                week: week.to_string(),
                attempt_no: attempt.and_then(|i| r[i].clone()),
                words: words(section, r),
            })
            .collect())
    }
}

/// What one row of `section` says, in a sentence for the known audits; any other section's row
/// as `column value` pairs.
pub fn words(section: &Section, row: &[Option<String>]) -> String {
    let get = |c: &str| {
        section
            .column(c)
            .and_then(|i| row.get(i).cloned().flatten())
            .unwrap_or_else(|| "—".to_string())
    };
    match section.id {
        "lane_policy_violation" => format!(
            "a {} attempt where the lane policy answers {}: {}",
            get("lane"),
            get("expected_lane"),
            get("reason")
        ),
        "duplicate_reconciliation" => format!(
            "artifact {} is a second artifact of idempotency key {} (the first, {}, came {} s before): {}",
            get("artifact_id"),
            get("idem_key"),
            get("first_artifact_id"),
            get("gap_s"),
            get("class")
        ),
        "same_key_retry" => format!(
            "sent to key {} right after that key refused the previous attempt ({}, HTTP {}, code {})",
            get("key_id"),
            get("previous_kind"),
            get("previous_http_status"),
            get("previous_provider_code")
        ),
        "key_rest_violation" => format!(
            "key {} used {} s before its {} of {} s ran out (it had refused job {} with a {} refusal)",
            get("key_id"),
            get("early_s"),
            get("rest"),
            get("rest_s"),
            get("refused_job_id"),
            get("refused_kind")
        ),
        "attempt_bound_exceeded" => format!(
            "{} attempts, past the bound of {}; the last ended {}",
            get("attempts"),
            get("bound"),
            get("last_outcome")
        ),
        "outcome_mismatch" => format!(
            "logged {} for a {} refusal (HTTP {}, code {}): {}",
            get("outcome"),
            get("error_kind"),
            get("http_status"),
            get("provider_code"),
            get("reason")
        ),
        "gate_free_admit_miss" => format!(
            "admitted to the free lane at {} with a dwell of {} s against {} s of slack, and missed its slack",
            get("decided_at"),
            get("dwell_s"),
            get("deadline_slack_s")
        ),
        "gate_decision_mismatch" => format!(
            "decided {} at {}; the safe decision was {}",
            get("decision"),
            get("decided_at"),
            get("expected_decision")
        ),
        "data_quality" => format!("{}: {}", get("kind").replace('_', " "), get("detail")),
        _ => section
            .columns
            .iter()
            .zip(row)
            .filter(|(c, _)| !matches!(c.as_str(), "job_id" | "attempt_no"))
            .map(|(c, v)| format!("{c} {}", v.as_deref().unwrap_or("—")))
            .collect::<Vec<_>>()
            .join(", "),
    }
}
