//! Policy audits (SPEC 5.1, 5.2): what a review meeting asks of the routers. Each audit is a
//! table computed from a fresh ledger snapshot at every query, so reviewers can slice it in SQL;
//! every row carries the `iso_week` of its job (the week of the job's first attempt, SPEC 4).
//!
//! | table | rule |
//! |---|---|
//! | `lane_policy_violation` | seed 000 `next_lane`, replayed over each job's attempts |
//! | `duplicate_reconciliation` | seed 000 `late_completion_window_s`: a later artifact's gap |
//! | `same_key_retry` | seed 002 `next_free`: the next attempt never goes to the key that just failed |
//! | `key_rest_violation` | seed 002 `cooldown_seconds`, `key_closes`: a key used inside its rest or break |
//! | `pool_overload_episode` | seed 002 `pool_overloaded`: ≥ N distinct keys of a pool answered 1305 in a window |
//! | `attempt_bound_exceeded` | seed 002 `MAX_ATTEMPTS_PER_TURN` |
//! | `outcome_mismatch` | the router's outcome against seed 002 `error_kind` |
//! | `refusal_by_kind`, `refusal_by_code`, `free_lane_bet` | SQL views, see [`views`] |

pub mod lane_policy;
pub mod reconcile;
pub mod refusals;
mod rows;
pub mod views;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::execution::context::SessionContext;
use laneledger_store::{Ledger, StoredAttempt};

use crate::error::Result;
use crate::ledger_table::{LedgerTable, ReadFn};

/// The lane.yaml settings the audits use, with the seeds' values as defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditSettings {
    /// `lanes.free.max_attempts`: free attempts before a job is pinned (seed 000: 2).
    pub max_free_attempts: u32,
    /// `lanes.free.pin_on`: outcomes that pin a job to paid (seed 000: ambiguous, permanent).
    pub pin_on: Vec<String>,
    /// `reconcile.late_completion_window_s`: seconds (seed 000: 900).
    pub late_completion_window_s: f64,
    /// `keys.cooldown_base_s`: seconds (seed 002: 15).
    pub cooldown_base_s: u32,
    /// `keys.cooldown_cap_s`: seconds (seed 002: 240).
    pub cooldown_cap_s: u32,
    /// `keys.key_break_s`: seconds (seed 002: 1800).
    pub key_break_s: u32,
    /// `keys.pool_overload_keys`: distinct keys (seed 002: 3).
    pub pool_overload_keys: u32,
    /// `keys.overload_window_s`: seconds (seed 002: 60).
    pub overload_window_s: u32,
    /// `keys.max_attempts_per_turn`: attempts (seed 002: 8).
    pub max_attempts_per_turn: u32,
}

impl Default for AuditSettings {
    fn default() -> Self {
        use laneledger_store::policy::{lane, refusal};
        AuditSettings {
            max_free_attempts: lane::MAX_FREE_ATTEMPTS,
            pin_on: lane::PIN_ON.iter().map(|s| s.to_string()).collect(),
            late_completion_window_s: 900.0,
            cooldown_base_s: refusal::COOL_BASE_SECONDS,
            cooldown_cap_s: refusal::COOL_CAP_SECONDS,
            key_break_s: refusal::KEY_BREAK_SECONDS,
            pool_overload_keys: refusal::POOL_OVERLOAD_KEYS,
            overload_window_s: refusal::OVERLOAD_WINDOW_SECONDS,
            max_attempts_per_turn: refusal::MAX_ATTEMPTS_PER_TURN,
        }
    }
}

impl From<&laneledger_store::LaneConfig> for AuditSettings {
    /// The audit settings of a lane.yaml.
    fn from(c: &laneledger_store::LaneConfig) -> Self {
        AuditSettings {
            max_free_attempts: c.lanes.free.max_attempts,
            pin_on: c.lanes.free.pin_on.iter().map(|o| o.as_str().to_string()).collect(),
            late_completion_window_s: f64::from(c.reconcile.late_completion_window_s),
            cooldown_base_s: c.keys.cooldown_base_s,
            cooldown_cap_s: c.keys.cooldown_cap_s,
            key_break_s: c.keys.key_break_s,
            pool_overload_keys: c.keys.pool_overload_keys,
            overload_window_s: c.keys.overload_window_s,
            max_attempts_per_turn: c.keys.max_attempts_per_turn,
        }
    }
}

/// Every attempt of the ledger in (job_id, attempt_no) order, with each job's ISO week.
pub struct Snapshot {
    /// The attempts, grouped by job, in attempt_no order.
    pub attempts: Vec<StoredAttempt>,
    /// job_id → `2026-W47`, the ISO week of the job's first attempt's started_at.
    pub job_week: HashMap<String, String>,
}

/// `2026-W47` for µs since the epoch.
pub fn iso_week_of(micros: i64) -> String {
    use chrono::Datelike;
    let t = chrono::DateTime::<chrono::Utc>::from_timestamp_micros(micros).unwrap_or_default();
    let w = t.iso_week();
    format!("{}-W{:02}", w.year(), w.week())
}

impl Snapshot {
    /// Reads the whole ledger once.
    pub fn read(ledger: &Ledger) -> Result<Self> {
        let mut attempts = Vec::new();
        ledger.for_each_attempt(|a| attempts.push(a))?;
        let mut first: HashMap<&str, i64> = HashMap::new();
        for a in &attempts {
            let e = first.entry(a.attempt.job_id.as_str()).or_insert(a.attempt.started_at);
            *e = (*e).min(a.attempt.started_at);
        }
        let job_week = first
            .into_iter()
            .map(|(j, t)| (j.to_string(), iso_week_of(t)))
            .collect();
        Ok(Snapshot { attempts, job_week })
    }

    /// The ISO week of `job_id` (empty when unknown).
    pub fn week(&self, job_id: &str) -> String {
        self.job_week.get(job_id).cloned().unwrap_or_default()
    }

    /// The attempts of each job, in attempt_no order.
    pub fn jobs(&self) -> impl Iterator<Item = &[StoredAttempt]> {
        self.attempts.chunk_by(|a, b| a.attempt.job_id == b.attempt.job_id)
    }
}

/// The last snapshot read, under the ledger write generation it was read at.
type SharedSnapshot = Mutex<Option<(u64, Arc<Snapshot>)>>;

type AuditFn = fn(&Snapshot, &AuditSettings) -> Result<RecordBatch>;

/// The audit tables: (name, schema, builder).
pub fn audit_tables() -> Vec<(&'static str, SchemaRef, AuditFn)> {
    vec![
        ("lane_policy_violation", lane_policy::schema(), lane_policy::build),
        ("duplicate_reconciliation", reconcile::schema(), reconcile::build),
        (
            "same_key_retry",
            refusals::same_key_retry_schema(),
            refusals::same_key_retry,
        ),
        (
            "key_rest_violation",
            refusals::key_rest_schema(),
            refusals::key_rest_violation,
        ),
        (
            "pool_overload_episode",
            refusals::overload_schema(),
            refusals::pool_overload_episode,
        ),
        (
            "attempt_bound_exceeded",
            refusals::bound_schema(),
            refusals::attempt_bound_exceeded,
        ),
        (
            "outcome_mismatch",
            refusals::mismatch_schema(),
            refusals::outcome_mismatch,
        ),
    ]
}

/// Creates the SQL audit views of [`views`]; call after the core views exist.
pub async fn create_views(ctx: &SessionContext) -> Result<()> {
    for (_, sql) in views::AUDIT_VIEWS {
        ctx.sql(sql).await?.collect().await?;
    }
    Ok(())
}

/// Registers every audit table in `ctx`, each reading `ledger` afresh at every scan.
///
/// The tables share one snapshot per ledger write generation, so the ledger is decoded once for
/// all of them, not once per table.
pub fn register(ctx: &SessionContext, ledger: &Ledger, settings: &AuditSettings) -> Result<()> {
    let shared: Arc<SharedSnapshot> = Arc::default();
    for (name, schema, build) in audit_tables() {
        let (settings, shared) = (settings.clone(), shared.clone());
        let read: ReadFn = Arc::new(move |l: &Ledger| {
            let snap = snapshot(l, &shared)?;
            Ok(vec![build(&snap, &settings)?])
        });
        ctx.register_table(name, Arc::new(LedgerTable::new(schema, ledger.clone(), read)))?;
    }
    Ok(())
}

/// The snapshot of `ledger` at its current write generation, read once and shared.
fn snapshot(ledger: &Ledger, shared: &SharedSnapshot) -> Result<Arc<Snapshot>> {
    // The generation is taken before the read: a write landing meanwhile bumps it, so a cached
    // snapshot is never labelled newer than its rows.
    let generation = ledger.generation();
    if let Ok(guard) = shared.lock()
        && let Some((g, snap)) = guard.as_ref()
        && *g == generation
    {
        return Ok(snap.clone());
    }
    let snap = Arc::new(Snapshot::read(ledger)?);
    if let Ok(mut guard) = shared.lock() {
        *guard = Some((generation, snap.clone()));
    }
    Ok(snap)
}
