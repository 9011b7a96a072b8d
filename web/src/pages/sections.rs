//! The audit sections of a week page (seeds 000, 002, 003): a generic table per
//! [`laneledger_query::Section`], with job ids linked to their job page and the SQL one click away.

use laneledger_query::{Group, Section};

/// One cell: its text, and a link when it names a job.
pub(crate) struct CellView {
    pub(crate) text: String,
    pub(crate) href: Option<String>,
}

/// One section as the template shows it.
pub(crate) struct SectionView {
    /// A group heading when this section opens a new group.
    pub(crate) heading: Option<&'static str>,
    pub(crate) id: &'static str,
    pub(crate) title: &'static str,
    pub(crate) description: &'static str,
    pub(crate) sql: String,
    pub(crate) columns: Vec<String>,
    pub(crate) rows: Vec<Vec<CellView>>,
    /// Rows the SQL returns in all (more than `rows` when the page shows the first ones).
    pub(crate) total_rows: usize,
    /// The rows counted by group, shown above them.
    pub(crate) summary: Option<SummaryView>,
}

/// A section's summary as the template shows it.
pub(crate) struct SummaryView {
    /// `kind, reason and model`.
    pub(crate) by: String,
    pub(crate) sql: String,
    pub(crate) columns: Vec<String>,
    /// How many of the first columns are groups (the rest are counts, right-aligned).
    pub(crate) groups: usize,
    pub(crate) rows: Vec<Vec<String>>,
    pub(crate) total_rows: usize,
}

impl SummaryView {
    fn new(s: laneledger_query::Summary) -> Self {
        let mut by: Vec<String> = s.columns.iter().take(s.groups).cloned().collect();
        let last = by.pop();
        let by = match (by.is_empty(), last) {
            (_, None) => String::new(),
            (true, Some(l)) => l,
            (false, Some(l)) => format!("{} and {l}", by.join(", ")),
        };
        SummaryView {
            by,
            sql: s.sql,
            groups: s.groups,
            rows: s
                .rows
                .into_iter()
                .map(|r| r.into_iter().map(|c| c.unwrap_or_else(|| "—".to_string())).collect())
                .collect(),
            columns: s.columns,
            total_rows: s.total_rows,
        }
    }
}

/// Columns whose values are job ids.
const JOB_COLUMNS: [&str; 2] = ["job_id", "refused_job_id"];

fn heading(g: Group) -> &'static str {
    match g {
        Group::Lane => "Lanes and duplicates",
        Group::Keys => "Key refusals",
        Group::Gate => "Dwell gate",
        Group::Cost => "Cost and latency",
        Group::Data => "Data quality",
    }
}

/// Percent-encodes a path segment (everything but unreserved characters).
pub(crate) fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The template's view of `sections`, in order, with a heading where the group changes.
pub(crate) fn views(sections: Vec<Section>) -> Vec<SectionView> {
    let mut last: Option<Group> = None;
    sections
        .into_iter()
        .map(|s| {
            let links: Vec<bool> = s.columns.iter().map(|c| JOB_COLUMNS.contains(&c.as_str())).collect();
            let view = SectionView {
                heading: (last != Some(s.group)).then(|| heading(s.group)),
                id: s.id,
                title: s.title,
                description: s.description,
                sql: s.sql,
                total_rows: s.total_rows,
                summary: s.summary.map(SummaryView::new),
                rows: s
                    .rows
                    .into_iter()
                    .map(|r| {
                        r.into_iter()
                            .zip(&links)
                            .map(|(c, link)| CellView {
                                href: c
                                    .as_deref()
                                    .filter(|_| *link)
                                    .map(|j| format!("/jobs/{}", encode_segment(j))),
                                text: c.unwrap_or_else(|| "—".to_string()),
                            })
                            .collect()
                    })
                    .collect(),
                columns: s.columns,
            };
            last = Some(s.group);
            view
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_percent_encoded() {
        assert_eq!(encode_segment("pin-job-000001"), "pin-job-000001");
        assert_eq!(encode_segment("job/7 <b>&"), "job%2F7%20%3Cb%3E%26");
    }
}
