//! The audit sections of the weekly review (issue 3): each a titled table with the SQL behind it,
//! its cells already formatted for people. The CLI prints them; the site renders them.

use datafusion::arrow::array::{Array, RecordBatch};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use serde::Serialize;

use crate::error::Result;
use crate::review::metrics::parse_iso_week;
use crate::session::Session;

/// Rows a section shows; its SQL returns them all.
pub const MAX_SECTION_ROWS: usize = 100;

/// Which seed a section audits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Group {
    /// Seed 000: lanes, pinning, late completions.
    Lane,
    /// Seed 002: key refusals.
    Keys,
    /// Seed 003: the dwell gate.
    Gate,
    /// What the week cost and how long its attempts took ([`crate::review::cost`]).
    Cost,
    /// Records the figures cannot take at face value (`data_quality`).
    Data,
}

/// One table of the review: what it shows, the SQL behind it, and its rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Section {
    /// A stable id, e.g. `lane_policy_violation` (an anchor on the page).
    pub id: &'static str,
    /// The seed it audits.
    pub group: Group,
    /// A short title.
    pub title: &'static str,
    /// One sentence on what it shows and the rule behind it.
    pub description: &'static str,
    /// The SQL that produced the rows (runs as is in `laneledger sql`).
    pub sql: String,
    /// Column names.
    pub columns: Vec<String>,
    /// Cells formatted for people; `None` is SQL NULL. At most [`MAX_SECTION_ROWS`] rows.
    pub rows: Vec<Vec<Option<String>>>,
    /// How many rows the SQL returns in all (more than `rows.len()` when cut).
    pub total_rows: usize,
    /// Counts of the rows grouped by what matters for the section (kind, reason, key, pool,
    /// model), shown above them; `None` for a section that is itself a count, or has no rows.
    pub summary: Option<Summary>,
}

/// Groups a summary shows; its SQL returns them all.
pub const MAX_SUMMARY_ROWS: usize = 20;

/// A section's rows counted by group, most first: the table a reader sees before the rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// The SQL that counts them (runs as is in `laneledger sql`).
    pub sql: String,
    /// Column names: the grouping columns, then the counts.
    pub columns: Vec<String>,
    /// Cells formatted for people; `None` is SQL NULL. At most [`MAX_SUMMARY_ROWS`] groups.
    pub rows: Vec<Vec<Option<String>>>,
    /// How many groups the SQL returns in all (more than `rows.len()` when cut).
    pub total_rows: usize,
    /// The first `groups` columns are what the rows are grouped by; the others count them.
    pub groups: usize,
}

impl Section {
    /// The index of `column`, if the section has it.
    pub fn column(&self, column: &str) -> Option<usize> {
        self.columns.iter().position(|c| c == column)
    }
}

pub(crate) fn cells(batches: &[RecordBatch], max_rows: usize) -> Result<Vec<Vec<Option<String>>>> {
    let opts = FormatOptions::default();
    let mut out = Vec::new();
    for b in batches {
        let fmts = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        for r in 0..b.num_rows() {
            if out.len() == max_rows {
                return Ok(out);
            }
            out.push(
                b.columns()
                    .iter()
                    .zip(&fmts)
                    .map(|(c, f)| (!c.is_null(r)).then(|| f.value(r).to_string()))
                    .collect(),
            );
        }
    }
    Ok(out)
}

struct Spec {
    id: &'static str,
    group: Group,
    title: &'static str,
    description: &'static str,
    sql: &'static str,
    /// The section's rows counted by group, with `{week}` as in `sql`: shown above the rows.
    summary: Option<&'static str>,
}

/// `sql` of a section of ISO week `week` (`2026-W47`): `{week}` is its label, `{week_start}` and
/// `{week_end}` the first instant of it and of the next week (`2026-11-16T00:00:00Z`). A range on
/// a timestamp reads as it is; `to_char(t, '%G-W%V') = '{week}'` formats every row's time (180 ms
/// over 1 M attempts, against 7 ms for the range).
fn fill(sql: &str, week: &str) -> Result<String> {
    let (year, number) = parse_iso_week(week)?;
    let monday = crate::review::metrics::week_monday(year, number)?;
    let instant = |d: chrono::NaiveDate| format!("{}T00:00:00Z", d.format("%Y-%m-%d"));
    Ok(sql
        .replace("{week_start}", &instant(monday))
        .replace("{week_end}", &instant(monday + chrono::Days::new(7)))
        .replace("{week}", week))
}

/// The sections, with `{week}` standing for the ISO week label and `{week_start}`, `{week_end}`
/// for its bounds ([`fill`]). A summary that shows the model reads it from the audit's own rows
/// (each names its attempt's model): a join of a busy week's 2.3 M key rest violations with the
/// week's attempts took a second at 10 M attempts.
const SPECS: &[Spec] = &[
    Spec {
        id: "lane_policy_violation",
        group: Group::Lane,
        title: "Lane policy violations",
        description: "Each job's attempts replayed through the lane policy (lanes in lane.yaml): a free attempt where it answers paid (after an ambiguous or permanent outcome, once pinned, past the free budget), or a paid attempt where it answers free.",
        sql: "SELECT job_id, attempt_no, lane, expected_lane, kind, reason FROM lane_policy_violation WHERE iso_week = '{week}' ORDER BY job_id, attempt_no",
        summary: Some(
            "SELECT kind, reason, model, COUNT(*) AS violations, COUNT(DISTINCT job_id) AS jobs FROM lane_policy_violation WHERE iso_week = '{week}' GROUP BY kind, reason, model ORDER BY violations DESC, kind, reason, model",
        ),
    },
    Spec {
        id: "duplicate_reconciliation",
        group: Group::Lane,
        title: "Duplicates against the reconcile window",
        description: "Each later artifact of an idem_key, by the gap between the first artifact's ended_at and its own: inside lane.yaml's late_completion_window_s (900 s by default) it was reconcilable, after it the window was too short.",
        sql: "SELECT idem_key, artifact_id, first_artifact_id, job_id, attempt_no, gap_s, class FROM duplicate_reconciliation WHERE iso_week = '{week}' ORDER BY class, gap_s, idem_key, artifact_id, job_id, attempt_no",
        summary: Some(
            "SELECT class, model, COUNT(*) AS duplicates, COUNT(DISTINCT idem_key) AS keys FROM duplicate_reconciliation WHERE iso_week = '{week}' GROUP BY class, model ORDER BY duplicates DESC, class, model",
        ),
    },
    Spec {
        id: "idem_key_source",
        group: Group::Lane,
        title: "Where the idempotency keys came from",
        description: "Attempts by the source of their idempotency key: sent with the record, or the request id a router's mapping declared as its fallback (ingest --idem-fallback; such keys start with fallback:). A fallback key is one per request, so duplicates across a client's own retries cannot be seen through it.",
        sql: "SELECT CASE WHEN starts_with(idem_key, 'fallback:') THEN 'fallback: the request id' ELSE 'sent with the record' END AS key_source, COUNT(*) AS attempts, ROUND(100.0 * COUNT(*) / SUM(COUNT(*)) OVER (), 1) AS share_pct FROM job_attempt WHERE started_at >= '{week_start}' AND started_at < '{week_end}' GROUP BY 1 ORDER BY attempts DESC, key_source",
        summary: None,
    },
    Spec {
        id: "refusal_by_kind",
        group: Group::Keys,
        title: "Refusals by kind",
        description: "Attempts a provider refused, by error kind (from http_status and provider_code: transient, quota, auth, request).",
        sql: "SELECT error_kind, attempts, keys FROM refusal_by_kind WHERE iso_week = '{week}' ORDER BY attempts DESC, error_kind",
        summary: Some(
            "SELECT error_kind, pool_id, model, COUNT(*) AS attempts, COUNT(DISTINCT key_id) AS keys FROM week_attempt WHERE iso_week = '{week}' AND error_kind IS NOT NULL AND error_kind <> 'ok' GROUP BY error_kind, pool_id, model ORDER BY attempts DESC, error_kind, pool_id, model",
        ),
    },
    Spec {
        id: "refusal_by_code",
        group: Group::Keys,
        title: "Refusals by provider code",
        description: "The same refusals by HTTP status and provider code. z.ai codes: 1302 is a rate limit and 1305 an overload (both transient); 1113 and 1308–1321, except 1312, mean a spent quota.",
        sql: "SELECT http_status, provider_code, error_kind, attempts FROM refusal_by_code WHERE iso_week = '{week}' ORDER BY attempts DESC, http_status, provider_code",
        summary: None,
    },
    Spec {
        id: "same_key_retry",
        group: Group::Keys,
        title: "Retries on the key that just refused",
        description: "An attempt on the very key that refused the job's previous attempt: the next attempt should never go to the key that just failed.",
        sql: "SELECT job_id, attempt_no, key_id, pool_id, previous_kind, previous_http_status, previous_provider_code FROM same_key_retry WHERE iso_week = '{week}' ORDER BY job_id, attempt_no",
        summary: Some(
            "SELECT key_id, pool_id, model, previous_kind, COUNT(*) AS retries, COUNT(DISTINCT job_id) AS jobs FROM same_key_retry WHERE iso_week = '{week}' GROUP BY key_id, pool_id, model, previous_kind ORDER BY retries DESC, key_id, pool_id, model, previous_kind",
        ),
    },
    Spec {
        id: "key_rest_violation",
        group: Group::Keys,
        title: "Keys used inside their rest or long break",
        description: "A key used again before its rest ran out after a transient refusal (15 s doubling per strike, at most 240 s), or within the 1,800 s break after a quota or auth refusal.",
        sql: "SELECT key_id, job_id, attempt_no, started_at, rest, refused_job_id, refused_kind, strikes, rest_s, early_s FROM key_rest_violation WHERE iso_week = '{week}' ORDER BY key_id, started_at, job_id, attempt_no",
        summary: Some(
            "SELECT key_id, pool_id, model, rest, COUNT(*) AS uses, COUNT(DISTINCT job_id) AS jobs, ROUND(MAX(early_s), 1) AS most_early_s FROM key_rest_violation WHERE iso_week = '{week}' GROUP BY key_id, pool_id, model, rest ORDER BY uses DESC, key_id, pool_id, model, rest",
        ),
    },
    Spec {
        id: "pool_overload_episode",
        group: Group::Keys,
        title: "Pool overload episodes",
        description: "At least keys.pool_overload_keys (3 by default) distinct keys of one pool answered 1305 inside keys.overload_window_s (60 s): the pool's model was overloaded and the next attempt belonged on the next pool.",
        sql: "SELECT pool_id, started_at, ended_at, refusals_1305, distinct_keys, keys, pool_size_seen, window_s FROM pool_overload_episode WHERE iso_week = '{week}' ORDER BY started_at",
        summary: Some(
            "SELECT pool_id, COUNT(*) AS episodes, SUM(refusals_1305) AS refusals_1305, MAX(distinct_keys) AS most_keys FROM pool_overload_episode WHERE iso_week = '{week}' GROUP BY pool_id ORDER BY episodes DESC, pool_id",
        ),
    },
    Spec {
        id: "attempt_bound_exceeded",
        group: Group::Keys,
        title: "Jobs past the attempt bound",
        description: "Jobs with more attempts than keys.max_attempts_per_turn (8 by default).",
        sql: "SELECT job_id, attempts, bound, last_outcome FROM attempt_bound_exceeded WHERE iso_week = '{week}' ORDER BY attempts DESC, job_id",
        summary: Some(
            "SELECT last_outcome, COUNT(*) AS jobs, SUM(attempts) AS attempts, MAX(attempts) AS most_attempts FROM attempt_bound_exceeded WHERE iso_week = '{week}' GROUP BY last_outcome ORDER BY jobs DESC, last_outcome",
        ),
    },
    Spec {
        id: "outcome_mismatch",
        group: Group::Keys,
        title: "Outcomes that contradict the refusal",
        description: "The router's outcome against the refusal's error kind: a quota code sent as retryable, a wrong request sent as retryable, a transient refusal sent as permanent, a refusal sent as ok.",
        sql: "SELECT job_id, attempt_no, outcome, error_kind, http_status, provider_code, reason FROM outcome_mismatch WHERE iso_week = '{week}' ORDER BY job_id, attempt_no",
        summary: Some(
            "SELECT reason, error_kind, model, COUNT(*) AS attempts, COUNT(DISTINCT job_id) AS jobs FROM outcome_mismatch WHERE iso_week = '{week}' GROUP BY reason, error_kind, model ORDER BY attempts DESC, reason, error_kind, model",
        ),
    },
];

/// The data quality findings, after the gate.
const DATA_SPECS: &[Spec] = &[Spec {
    id: "data_quality",
    group: Group::Data,
    title: "Data quality findings",
    description: "Records the figures above cannot take at face value, kept as sent (none dropped or corrected): attempt numbers that skip (a router that retried inside its SDK; no row is made up for the gap), an artifact a success already reported logged ok again (its tokens count twice), ok with no artifact_id or with tokens_out 0 (a stream cut short), ended_at before started_at (left out of the latency percentiles), started_at after the ledger took the record, conflicts and unreadable lines received this week, and jobs keyed by a declared fallback (fallback:…).",
    sql: "SELECT kind, job_id, attempt_no, detail FROM data_quality WHERE iso_week = '{week}' ORDER BY kind, job_id, attempt_no, detail",
    summary: Some(
        "SELECT kind, COUNT(*) AS findings, COUNT(DISTINCT job_id) AS jobs FROM data_quality WHERE iso_week = '{week}' GROUP BY kind ORDER BY findings DESC, kind",
    ),
}];

/// Seed 003's decision lists, after the gate's ratios.
const GATE_SPECS: &[Spec] = &[
    Spec {
        id: "gate_free_admit_miss",
        group: Group::Gate,
        title: "Free admits that missed their slack",
        description: "admit_free decisions that later recorded slack_miss = true: each is worth a page, with dwell, slack and retry count attached.",
        sql: "SELECT job_id, decided_at, dwell_s, deadline_slack_s, retry_count, queue_age_s, expected_service_s, retry_tax_s FROM gate_decision WHERE to_char(decided_at, '%G-W%V') = '{week}' AND decision = 'admit_free' AND slack_miss ORDER BY decided_at",
        summary: Some(
            "SELECT retry_count, COUNT(*) AS decisions, ROUND(AVG(dwell_s), 1) AS mean_dwell_s, ROUND(AVG(deadline_slack_s), 1) AS mean_slack_s FROM gate_decision WHERE to_char(decided_at, '%G-W%V') = '{week}' AND decision = 'admit_free' AND slack_miss GROUP BY retry_count ORDER BY decisions DESC, retry_count",
        ),
    },
    Spec {
        id: "gate_decision_mismatch",
        group: Group::Gate,
        title: "Decisions that differ from the safe decision",
        description: "The logged decision against the safe decision on the same row (column expected_decision) (age cap, then dwell against slack, with non-positive service or slack deferred).",
        sql: "SELECT job_id, decided_at, decision, expected_decision, queue_age_s, max_queue_age_s, dwell_s, deadline_slack_s, expected_service_s FROM gate_decision WHERE to_char(decided_at, '%G-W%V') = '{week}' AND decision <> expected_decision ORDER BY decided_at",
        summary: Some(
            "SELECT decision, expected_decision, COUNT(*) AS decisions FROM gate_decision WHERE to_char(decided_at, '%G-W%V') = '{week}' AND decision <> expected_decision GROUP BY decision, expected_decision ORDER BY decisions DESC, decision, expected_decision",
        ),
    },
];

impl Session {
    /// Seed 003's ratios for `week` as a section: decisions by kind, the three ratios and the
    /// mismatch count, and the freeze alert. No rows when no decision was logged that week.
    async fn gate_ratios(&self, week: &str) -> Result<Section> {
        let mut rows = Vec::new();
        match self.gate_review(Some(week), &self.gate_thresholds()).await {
            Ok(r) => {
                let w = &r.week;
                let ratio = |v: Option<f64>| Some(crate::words::format_ratio(v, 3));
                let n = |v: i64| Some(crate::words::format_count(v));
                let none = || None;
                rows.push(vec![
                    Some("decisions: admit_free".into()),
                    n(w.admit_free),
                    n(w.decisions),
                    ratio(Some(w.admit_free as f64 / w.decisions.max(1) as f64)),
                    none(),
                    none(),
                ]);
                rows.push(vec![
                    Some("decisions: defer".into()),
                    n(w.defer),
                    n(w.decisions),
                    ratio(Some(w.defer as f64 / w.decisions.max(1) as f64)),
                    none(),
                    none(),
                ]);
                rows.push(vec![
                    Some("decisions: reserved".into()),
                    n(w.reserved),
                    n(w.decisions),
                    ratio(Some(w.reserved as f64 / w.decisions.max(1) as f64)),
                    none(),
                    none(),
                ]);
                rows.push(vec![
                    Some("free admits that missed slack ÷ free admits".into()),
                    n(w.free_admit_misses),
                    n(w.admit_free),
                    ratio(w.free_admit_miss_rate),
                    Some(format!("> {}", r.alert.threshold)),
                    Some(match r.action {
                        Some(a) => format!("ALERT: {a}"),
                        None => r.alert.state.as_str().to_string(),
                    }),
                ]);
                rows.push(vec![
                    Some("defers that would have fit a reserved worker ÷ defers".into()),
                    n(w.defers_that_fit_reserved),
                    n(w.defer),
                    ratio(w.defers_that_fit_reserved_rate),
                    none(),
                    none(),
                ]);
                rows.push(vec![
                    Some("reserved shifts whose dwell without the retry tax fits ÷ reserved".into()),
                    n(w.reserved_that_fit_free),
                    n(w.reserved),
                    ratio(w.reserved_that_fit_free_rate),
                    none(),
                    none(),
                ]);
                rows.push(vec![
                    Some("decisions that differ from the safe decision".into()),
                    n(w.decision_mismatches),
                    n(w.decisions),
                    none(),
                    none(),
                    none(),
                ]);
            }
            Err(crate::Error::UnknownWeek(_)) => {}
            Err(e) => return Err(e),
        }
        Ok(Section {
            id: "gate_ratios",
            group: Group::Gate,
            title: "Gate decisions and the weekly ratios",
            description: "Admission decisions logged in the week (by decided_at), the gate's three review ratios and the decisions that differ from the safe decision; above gate.free_admit_miss_rate (1%) of free admits missing their slack, freeze dwell_gate_enabled.",
            sql: format!("SELECT * FROM gate_weekly WHERE iso_week = '{week}'"),
            columns: ["figure", "count", "of", "ratio", "threshold", "state"]
                .map(String::from)
                .to_vec(),
            total_rows: rows.len(),
            rows,
            summary: None,
        })
    }

    /// The audit sections for ISO week `week` (`2026-W47`), in page order: lane, keys, gate.
    ///
    /// Errors: [`crate::Error::BadWeek`] for a label that is not an ISO week.
    pub async fn audit_sections(&self, week: &str) -> Result<Vec<Section>> {
        // One pin for all its reads ([`Session::pinned`]).
        let this = &self.pinned();
        parse_iso_week(week)?;
        this.memo(format!("sections:{week}"), || this.compute_sections(week))
            .await
    }

    async fn compute_sections(&self, week: &str) -> Result<Vec<Section>> {
        use futures::{StreamExt, TryStreamExt};
        // Two sections at a time (the machine's cores, not more: each audit table's first build
        // walks every attempt), answers kept in page order.
        let pending: Vec<_> = SPECS
            .iter()
            .chain(GATE_SPECS)
            .chain(DATA_SPECS)
            .map(|spec| self.spec_section(spec, week))
            .collect();
        let specs: Vec<Section> = futures::stream::iter(pending)
            .buffered(SECTIONS_AT_ONCE)
            .try_collect()
            .await?;
        let mut out = Vec::with_capacity(specs.len() + 2);
        for section in specs {
            if section.id == "lane_policy_violation" && !self.config().lanes.audit {
                out.push(lane_audit_off(section));
                continue;
            }
            if section.id == "gate_free_admit_miss" {
                out.push(self.gate_ratios(week).await?);
            }
            if section.id == "refusal_by_kind" {
                out.push(self.free_lane_bet(week).await?);
            }
            out.push(section);
        }
        let cost = self.week_cost(week).await?;
        out.push(cost.spend_section);
        out.push(cost.latency_section);
        Ok(out)
    }

    /// One section of [`SPECS`] or [`GATE_SPECS`] for `week`.
    async fn spec_section(&self, spec: &'static Spec, week: &str) -> Result<Section> {
        let sql = fill(spec.sql, week)?;
        // The first rows by the section's order (a top-k, not a sort of every row: a busy week
        // has millions of key rest violations), then the count of all of them.
        let result = self.query(&format!("{sql} LIMIT {MAX_SECTION_ROWS}")).await?;
        let total_rows = if result.num_rows() < MAX_SECTION_ROWS {
            result.num_rows()
        } else {
            let count = self.query(&format!("SELECT COUNT(*) AS n FROM ({sql})")).await?;
            let first = count.batches.iter().find(|b| b.num_rows() > 0);
            first.map_or(0, |b| crate::review::metrics::i64_col(b, "n", 0)) as usize
        };
        let summary = match spec.summary {
            Some(summary) if total_rows > 0 => Some(self.summary(&fill(summary, week)?).await?),
            _ => None,
        };
        Ok(Section {
            id: spec.id,
            group: spec.group,
            title: spec.title,
            description: spec.description,
            columns: result.schema.fields().iter().map(|f| f.name().clone()).collect(),
            total_rows,
            rows: cells(&result.batches, MAX_SECTION_ROWS)?,
            sql,
            summary,
        })
    }

    /// The first [`MAX_SUMMARY_ROWS`] groups of a summary's `sql`, and how many there are.
    async fn summary(&self, sql: &str) -> Result<Summary> {
        let result = self.query(sql).await?;
        Ok(Summary {
            columns: result.schema.fields().iter().map(|f| f.name().clone()).collect(),
            total_rows: result.num_rows(),
            rows: cells(&result.batches, MAX_SUMMARY_ROWS)?,
            groups: grouped_columns(sql),
            sql: sql.to_string(),
        })
    }

    /// Page `page` (from 1; past the last, the last) of the week's section `id`:
    /// [`MAX_SECTION_ROWS`] rows a page in the section's order, with its summary. `None` when
    /// the week has no such section.
    ///
    /// A section whose rows are all shown on the week page is one page; a cut one (only a
    /// section of a single SQL statement is cut) is read again with `LIMIT` and `OFFSET`.
    ///
    /// Errors: [`crate::Error::BadWeek`] for a label that is not an ISO week.
    pub async fn section_page(&self, week: &str, id: &str, page: usize) -> Result<Option<SectionPage>> {
        // One pin for all its reads ([`Session::pinned`]).
        let this = &self.pinned();
        let Some(mut section) = this.audit_sections(week).await?.into_iter().find(|s| s.id == id) else {
            return Ok(None);
        };
        let pages = section.total_rows.div_ceil(MAX_SECTION_ROWS).max(1);
        let page = page.clamp(1, pages);
        let first_row = (page - 1) * MAX_SECTION_ROWS;
        if page > 1 {
            let sql = format!("{} LIMIT {MAX_SECTION_ROWS} OFFSET {first_row}", section.sql);
            section.rows = cells(&this.query(&sql).await?.batches, MAX_SECTION_ROWS)?;
        }
        Ok(Some(SectionPage {
            section,
            page,
            pages,
            first_row,
        }))
    }
}

/// One page of a section's rows ([`Session::section_page`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SectionPage {
    /// The section, its `rows` those of this page.
    pub section: Section,
    /// This page, from 1.
    pub page: usize,
    /// Pages in all (at least 1).
    pub pages: usize,
    /// The 0-based index of the page's first row among all the section's rows.
    pub first_row: usize,
}

/// The lane policy section when lane.yaml sets `lanes.audit: false`: it says the audit is off,
/// rather than showing an empty table a reader would take for "none found".
fn lane_audit_off(section: Section) -> Section {
    Section {
        title: "Lane policy violations: off",
        description: "lane.yaml sets lanes.audit: false, so the lane policy is not replayed: this section lists nothing and its alert does not fire.",
        columns: vec!["lane policy audit".to_string()],
        rows: vec![vec![Some("off (lanes.audit: false in lane.yaml)".to_string())]],
        total_rows: 0,
        summary: None,
        ..section
    }
}

/// Sections computed at once by [`Session::audit_sections`].
const SECTIONS_AT_ONCE: usize = 2;

fn f64_at(b: &[RecordBatch], col: &str) -> Option<f64> {
    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::Float64Type;
    let b = b.iter().find(|b| b.num_rows() > 0)?;
    let c = b.column_by_name(col)?.as_primitive_opt::<Float64Type>()?;
    (!c.is_null(0)).then(|| c.value(0))
}

impl Session {
    /// Seed 000's "When the Free Lane Is the Wrong Bet" table for `week`: each row's condition,
    /// what the ledger measured, whether the condition holds, and the seed's route.
    async fn free_lane_bet(&self, week: &str) -> Result<Section> {
        let sql = format!("SELECT * FROM free_lane_bet WHERE iso_week = '{week}'");
        let m = self.query(&sql).await?.batches;
        let slack_sql = format!(
            "SELECT percentile_cont(0.95) WITHIN GROUP (ORDER BY deadline_slack_s) AS slack_p95_s FROM gate_decision WHERE to_char(decided_at, '%G-W%V') = '{week}'"
        );
        // Deadline slack comes from gate decisions (seed 003); a ledger without them has none.
        let slack = match self.query(&slack_sql).await {
            Ok(r) => f64_at(&r.batches, "slack_p95_s"),
            Err(_) => None,
        };
        let p95 = f64_at(&m, "free_p95_latency_s");
        let amb = f64_at(&m, "ambiguous_rate");
        let delta = f64_at(&m, "token_delta");
        // Free attempts that ended before they started have no latency: the p95 leaves them out.
        let left_out = m
            .iter()
            .find(|b| b.num_rows() > 0)
            .map_or(0, |b| crate::review::metrics::i64_col(b, "free_latency_left_out", 0));
        let left_out = match left_out {
            0 => String::new(),
            n => format!(
                " ({} that ended before {} left out)",
                crate::words::counted(n as u64, "attempt", "attempts"),
                if n == 1 { "it started" } else { "they started" }
            ),
        };
        let yes_no = |b: Option<bool>| Some(b.map_or("—", |b| if b { "yes" } else { "no" }).to_string());
        let secs = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.1} s"));
        let pct = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{:.1}%", v * 100.0));
        let rows = vec![
            vec![
                Some("Deadline slack p95 < 2× free-lane p95 latency".to_string()),
                Some(format!(
                    "slack p95 {} (gate decisions); free-lane p95 latency {}{left_out}",
                    secs(slack),
                    secs(p95)
                )),
                yes_no(slack.zip(p95).map(|(s, l)| s < 2.0 * l)),
                Some("Stay on paid".to_string()),
            ],
            vec![
                Some("Ambiguous rate > 2% and no idempotency key at the boundary".to_string()),
                Some(format!(
                    "ambiguous rate {} of free attempts; every attempt carries an idem_key",
                    pct(amb)
                )),
                yes_no(amb.map(|_| false)),
                Some("Fix the key first".to_string()),
            ],
            vec![
                Some("Token delta between lanes < 10%".to_string()),
                Some(format!(
                    "mean tokens per paid attempt differ from free by {}",
                    pct(delta)
                )),
                yes_no(delta.map(|d| d < 0.10)),
                Some("Decide on rework and latency".to_string()),
            ],
            vec![
                Some("Sustained arrival above measured free throughput for 30 min".to_string()),
                Some("not in the ledger (needs arrival and throughput rates)".to_string()),
                yes_no(None),
                Some("Split by priority".to_string()),
            ],
            vec![
                Some("Batch deadline ≥ 6h and outputs idempotent".to_string()),
                Some("not in the ledger (needs the batch deadline)".to_string()),
                yes_no(None),
                Some("Free lane first, pin on ambiguous".to_string()),
            ],
        ];
        Ok(Section {
            id: "free_lane_bet",
            group: Group::Lane,
            title: "When the free lane is the wrong bet",
            description: "The free-lane table, evaluated on the week: each condition, what the ledger measured (view free_lane_bet; deadline slack from gate_decision), whether it holds, and the route to take when it does. The ambiguous row holds only without an idempotency key, which every ledger row has.",
            sql: format!("{sql};\n{slack_sql}"),
            columns: ["condition", "measured", "holds", "route"].map(String::from).to_vec(),
            total_rows: rows.len(),
            rows,
            summary: None,
        })
    }
}

/// An aligned table, each line indented by `indent`.
fn table_text(columns: &[String], rows: &[Vec<Option<String>>], indent: &str) -> String {
    let show = |c: &Option<String>| c.clone().unwrap_or_else(|| "—".to_string());
    let widths: Vec<usize> = (0..columns.len())
        .map(|i| {
            rows.iter()
                .map(|r| show(&r[i]).chars().count())
                .chain([columns[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        format!("{indent}{}\n", padded.join("  ").trim_end())
    };
    let mut out = line(columns.to_vec());
    for r in rows {
        out += &line(r.iter().map(show).collect());
    }
    out
}

/// Plain text of a section: the title, its summary, then an aligned table (or "none").
pub fn section_text(s: &Section) -> String {
    let mut out = format!("{}\n", s.title);
    if s.rows.is_empty() {
        out += "  none\n";
        return out;
    }
    if let Some(sum) = &s.summary {
        out += &format!("  In all, by {}:\n", summary_groups(sum).join(", "));
        out += &table_text(&sum.columns, &sum.rows, "    ");
        if sum.total_rows > sum.rows.len() {
            out += &format!(
                "    … {} groups in all; the first {} shown. All of them: laneledger sql \"{}\"\n",
                sum.total_rows,
                sum.rows.len(),
                sum.sql
            );
        }
        out += "  The rows:\n";
    }
    out += &table_text(&s.columns, &s.rows, "  ");
    if s.total_rows > s.rows.len() {
        out += &format!(
            "  … {} rows in all; the first {} shown. All of them: laneledger sql \"{}\"\n",
            s.total_rows,
            s.rows.len(),
            s.sql
        );
    }
    out
}

/// A summary's grouping columns (the first [`Summary::groups`] columns).
pub fn summary_groups(s: &Summary) -> Vec<&str> {
    s.columns.iter().take(s.groups).map(String::as_str).collect()
}

/// How many columns a summary's SQL groups by: the items of its last `GROUP BY` (the
/// summaries select their grouping columns first, in that order).
fn grouped_columns(sql: &str) -> usize {
    let Some(at) = sql.rfind("GROUP BY ") else {
        return 0;
    };
    let rest = &sql[at + "GROUP BY ".len()..];
    let end = rest
        .find(" ORDER BY")
        .or_else(|| rest.find(" HAVING"))
        .unwrap_or(rest.len());
    rest[..end].split(',').count()
}

/// The weekly review as one JSON document, as `laneledger review --format json` prints it and
/// `GET /v1/review` answers: `{"week": WeekMetrics, "partial": bool, "previous_week": label,
/// "previous": WeekMetrics|null, "alerting": [metric], "alerts": [AlertCheck], "sections":
/// [Section]}`; `previous` is the calendar week before, `null` when it had no attempts;
/// `alerting` names the alerts that fire this week, in the order of `alerts`.
pub fn review_document(review: &crate::review::metrics::WeekReview, sections: &[Section]) -> serde_json::Value {
    let alerting: Vec<&str> = review.firing().map(|a| a.metric).collect();
    serde_json::json!({
        "week": review.week,
        "partial": review.partial,
        "previous_week": review.previous_week,
        "previous": review.previous,
        "alerting": alerting,
        "alerts": review.alerts,
        "sections": sections,
    })
}
