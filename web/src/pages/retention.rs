//! `GET /retention`: the oldest record held, the cutoff, attempts per day, when the next sweep is
//! due, every past sweep and the last `verify` result (SPEC 6); and the sweep [`spawn_schedule`]
//! runs inside `serve`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use askama::Template;
use axum::Extension;
use axum::extract::State;
use laneledger_query::archive::retention::RetentionOverview;
use laneledger_query::archive::retention::{
    LAST_VERIFY_SQL, OLDEST_SQL, ROWS_PER_DAY_SQL, SWEEPS_SQL, SweepOptions, SweepOutcome, format_optional_timestamp,
    overview, sweep,
};
use laneledger_query::format_count;
use laneledger_store::storage::retention::RetentionRule;
use laneledger_store::{format_timestamp, now_micros};

use crate::error::AppError;
use crate::pages::html::HtmlTemplate;
use crate::server::state::AppState;

/// The page's clock, µs since the epoch, UTC. Without this extension the page reads the system
/// clock; tests add `Extension(Clock(t))` to the router to read the page at a fixed time.
#[derive(Debug, Clone, Copy)]
pub struct Clock(pub i64);

/// A sweep schedule running in this process for one ledger file.
#[derive(Debug, Clone, Copy)]
struct Schedule {
    /// Time between sweeps.
    every: Duration,
    /// When the next sweep runs, µs since the epoch, UTC.
    next_due: i64,
}

/// The schedules of this process, by ledger path (one process holds a ledger file at a time).
static SCHEDULES: LazyLock<Mutex<HashMap<PathBuf, Schedule>>> = LazyLock::new(Mutex::default);

fn set_schedule(state: &AppState, s: Option<Schedule>) {
    if let Ok(mut m) = SCHEDULES.lock() {
        let path = state.session.ledger().path().to_path_buf();
        match s {
            Some(s) => m.insert(path, s),
            None => m.remove(&path),
        };
    }
}

/// Runs a retention sweep (SPEC 6) of `state`'s ledger every `every`, with lane.yaml's
/// `retention.days` and reconcile window from the session's config, at the system clock; the
/// first one `every` after the call. Blocking ledger work runs on tokio's blocking pool
/// (`spawn_blocking`). Returns `None` (and schedules nothing) when `every` is zero. A failed
/// sweep is logged and tried again at the next turn. The `/retention` page shows when the next
/// one is due.
pub fn spawn_schedule(state: AppState, every: Duration) -> Option<tokio::task::JoinHandle<()>> {
    if every.is_zero() {
        return None;
    }
    let micros = |d: Duration| i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
    Some(tokio::spawn(async move {
        let rule = RetentionRule::from_config(state.session.config());
        loop {
            set_schedule(
                &state,
                Some(Schedule {
                    every,
                    next_due: now_micros().saturating_add(micros(every)),
                }),
            );
            tokio::time::sleep(every).await;
            match sweep(&state.session, now_micros(), &SweepOptions::new(rule)).await {
                Ok(SweepOutcome::Swept { record, .. }) => tracing::info!(
                    "retention sweep {}: removed {} jobs, {} attempts older than {}",
                    record.sweep_no,
                    record.jobs_removed,
                    record.rows_removed,
                    format_timestamp(record.cutoff)
                ),
                Ok(_) => tracing::debug!("retention sweep: nothing to remove"),
                Err(e) => tracing::warn!("retention sweep failed: {e}"),
            }
        }
    }))
}

/// One line of the rows-per-day table.
struct DayLine {
    day: String,
    attempts: String,
    due: bool,
}

/// One past sweep.
struct SweepLine {
    sweep_no: u64,
    swept_at: String,
    cutoff: String,
    days: u32,
    jobs: String,
    rows: String,
    archive: String,
    digest: String,
    weeks: String,
}

/// The retention page.
#[derive(Template)]
#[template(path = "retention.html")]
struct RetentionPage {
    nav: &'static str,
    title: &'static str,
    now: String,
    days: u32,
    cutoff: String,
    oldest: String,
    attempts: String,
    due_jobs: String,
    due_rows: String,
    kept_open: u64,
    kept_reconcile: u64,
    schedule: Option<(String, String)>,
    per_day: Vec<DayLine>,
    sweeps: Vec<SweepLine>,
    verify: Option<(String, bool, String, String)>,
    oldest_sql: &'static str,
    per_day_sql: &'static str,
    sweeps_sql: &'static str,
    verify_sql: &'static str,
}

fn every_text(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        _ if s.is_multiple_of(86_400) => format!("{}d", s / 86_400),
        _ if s.is_multiple_of(3_600) => format!("{}h", s / 3_600),
        _ if s.is_multiple_of(60) => format!("{}m", s / 60),
        _ => format!("{s}s"),
    }
}

fn page_of(o: RetentionOverview, schedule: Option<Schedule>) -> RetentionPage {
    RetentionPage {
        nav: "retention",
        title: "Retention",
        now: format_timestamp(o.now),
        days: o.days,
        cutoff: format_timestamp(o.cutoff),
        oldest: format_optional_timestamp(o.oldest_started_at),
        attempts: format_count(o.attempts),
        due_jobs: format_count(o.due.jobs.len() as i64),
        due_rows: format_count(o.due.attempts.len() as i64),
        kept_open: o.due.kept_open,
        kept_reconcile: o.due.kept_reconcile,
        schedule: schedule.map(|s| (format_timestamp(s.next_due), every_text(s.every))),
        per_day: o
            .rows_per_day
            .iter()
            .map(|d| DayLine {
                day: d.day.clone(),
                attempts: format_count(d.attempts),
                due: d.before_cutoff,
            })
            .collect(),
        sweeps: o
            .sweeps
            .iter()
            .map(|s| SweepLine {
                sweep_no: s.sweep_no,
                swept_at: format_timestamp(s.swept_at),
                cutoff: format_timestamp(s.cutoff),
                days: s.days,
                jobs: format_count(s.jobs_removed as i64),
                rows: format_count(s.rows_removed as i64),
                archive: s.archive.clone().unwrap_or_else(|| "—".into()),
                digest: s.digest.clone(),
                weeks: if s.weeks_snapshotted.is_empty() {
                    "—".into()
                } else {
                    s.weeks_snapshotted.join(", ")
                },
            })
            .collect(),
        verify: o.last_verify.map(|v| {
            (
                format_timestamp(v.at),
                v.clean,
                v.first_bad.unwrap_or_default(),
                format!("{} chain entries, {} records, tip {}", v.entries, v.records, v.tip),
            )
        }),
        oldest_sql: OLDEST_SQL,
        per_day_sql: ROWS_PER_DAY_SQL,
        sweeps_sql: SWEEPS_SQL,
        verify_sql: LAST_VERIFY_SQL,
    }
}

/// `GET /retention`.
pub(crate) async fn page(
    State(state): State<AppState>,
    clock: Option<Extension<Clock>>,
) -> Result<HtmlTemplate<impl Template>, AppError> {
    let now = clock.map_or_else(now_micros, |Extension(Clock(t))| t);
    let rule = RetentionRule::from_config(state.session.config());
    let o = overview(&state.session, now, rule).await?;
    let schedule = SCHEDULES
        .lock()
        .ok()
        .and_then(|m| m.get(state.session.ledger().path()).copied());
    Ok(HtmlTemplate(page_of(o, schedule)))
}
