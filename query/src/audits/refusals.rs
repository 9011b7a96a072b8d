//! Key refusal audits (SPEC 5.2, seed 002): same-key retries, keys used inside their rest or long
//! break, pool overload episodes, turns past the attempt bound, and router outcomes that
//! contradict the refusal's kind.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use laneledger_store::policy::refusal::{self, ErrorKind, ZAI_OVERLOAD};
use laneledger_store::{Attempt, Outcome};

use super::rows::{float, int, text, ts};
use super::{AuditSettings, Snapshot};
use crate::error::Result;
use crate::job_attempt::{error_kind_of, timestamp_type};

fn kind(a: &Attempt) -> Option<ErrorKind> {
    error_kind_of(a.http_status, a.provider_code)
}

fn batch(schema: SchemaRef, cols: Vec<datafusion::arrow::array::ArrayRef>) -> Result<RecordBatch> {
    Ok(RecordBatch::try_new(schema, cols).map_err(datafusion::error::DataFusionError::from)?)
}

fn f(name: &str, t: DataType, nullable: bool) -> Field {
    Field::new(name, t, nullable)
}

/// How long a refused key rests, in seconds: seed 002 `cooldown_seconds` with lane.yaml's
/// `keys.cooldown_base_s`, `cooldown_cap_s` and `key_break_s` (exactly the seed's with its values).
pub fn rest_seconds(k: ErrorKind, strikes: u32, s: &AuditSettings) -> u32 {
    let d = AuditSettings::default();
    if (s.cooldown_base_s, s.cooldown_cap_s, s.key_break_s) == (d.cooldown_base_s, d.cooldown_cap_s, d.key_break_s) {
        return refusal::cooldown_seconds(k.as_u8(), strikes);
    }
    match k {
        ErrorKind::Quota | ErrorKind::Auth => s.key_break_s,
        ErrorKind::Transient => {
            let mut wait = s.cooldown_base_s;
            for _ in 0..strikes {
                if wait >= s.cooldown_cap_s {
                    return s.cooldown_cap_s;
                }
                wait = wait.saturating_mul(2);
            }
            wait.min(s.cooldown_cap_s)
        }
        _ => 0,
    }
}

// ----- same_key_retry -----------------------------------------------------------------------------

/// iso_week, job_id, attempt_no, key_id, pool_id, previous_attempt_no, previous_kind,
/// previous_http_status, previous_provider_code.
pub fn same_key_retry_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        f("iso_week", DataType::Utf8, false),
        f("job_id", DataType::Utf8, false),
        f("attempt_no", DataType::Int64, false),
        f("key_id", DataType::Utf8, false),
        f("pool_id", DataType::Utf8, true),
        f("previous_attempt_no", DataType::Int64, false),
        f("previous_kind", DataType::Utf8, false),
        f("previous_http_status", DataType::Int64, true),
        f("previous_provider_code", DataType::Int64, true),
    ]))
}

/// An attempt on the very key that refused the job's previous attempt (seed 002 `next_free`:
/// "never the key that just failed"; the #9967 case).
pub fn same_key_retry(snap: &Snapshot, _s: &AuditSettings) -> Result<RecordBatch> {
    let mut rows: Vec<(&Attempt, &Attempt, ErrorKind)> = Vec::new();
    for job in snap.jobs() {
        for w in job.windows(2) {
            let (prev, next) = (&w[0].attempt, &w[1].attempt);
            let Some(k) = kind(prev) else { continue };
            if matches!(k, ErrorKind::Transient | ErrorKind::Quota | ErrorKind::Auth)
                && prev.key_id.is_some()
                && prev.key_id == next.key_id
            {
                rows.push((prev, next, k));
            }
        }
    }
    let weeks: Vec<String> = rows.iter().map(|r| snap.week(&r.1.job_id)).collect();
    batch(
        same_key_retry_schema(),
        vec![
            text(weeks.iter().map(|w| Some(w.as_str()))),
            text(rows.iter().map(|r| Some(r.1.job_id.as_str()))),
            int(rows.iter().map(|r| Some(i64::from(r.1.attempt_no)))),
            text(rows.iter().map(|r| r.1.key_id.as_deref())),
            text(rows.iter().map(|r| r.1.pool_id.as_deref())),
            int(rows.iter().map(|r| Some(i64::from(r.0.attempt_no)))),
            text(rows.iter().map(|r| Some(r.2.as_str()))),
            int(rows.iter().map(|r| r.0.http_status.map(i64::from))),
            int(rows.iter().map(|r| r.0.provider_code.map(i64::from))),
        ],
    )
}

// ----- key_rest_violation -------------------------------------------------------------------------

/// iso_week, key_id, pool_id, job_id, attempt_no, started_at, rest (`rest` | `long break`),
/// refused_job_id, refused_attempt_no, refused_kind, strikes (transient refusals in a row before
/// the refusal), rest_s (seconds), rest_until, early_s (seconds before the rest ended).
pub fn key_rest_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        f("iso_week", DataType::Utf8, false),
        f("key_id", DataType::Utf8, false),
        f("pool_id", DataType::Utf8, true),
        f("job_id", DataType::Utf8, false),
        f("attempt_no", DataType::Int64, false),
        f("started_at", timestamp_type(), false),
        f("rest", DataType::Utf8, false),
        f("refused_job_id", DataType::Utf8, false),
        f("refused_attempt_no", DataType::Int64, false),
        f("refused_kind", DataType::Utf8, false),
        f("strikes", DataType::Int64, false),
        f("rest_s", DataType::Int64, false),
        f("rest_until", timestamp_type(), false),
        f("early_s", DataType::Float64, false),
    ]))
}

struct Rest<'a> {
    until: i64,
    refused: &'a Attempt,
    kind: ErrorKind,
    strikes: u32,
    rest_s: u32,
}

/// A key used again while it rests after a transient refusal (seed 002 `cooldown_seconds`) or
/// during its long break after a quota or auth refusal (`key_closes`), across all jobs.
///
/// A rest runs from the moment the refusal arrived (its `ended_at`) for `rest_s` seconds; an
/// attempt that started on the key inside that span is flagged. Strikes are the key's transient
/// refusals in a row before this one, in the order they arrived; an answer resets them.
pub fn key_rest_violation(snap: &Snapshot, s: &AuditSettings) -> Result<RecordBatch> {
    let mut by_key: BTreeMap<&str, Vec<&Attempt>> = BTreeMap::new();
    for a in snap.attempts.iter().map(|x| &x.attempt) {
        if let Some(k) = a.key_id.as_deref() {
            by_key.entry(k).or_default().push(a);
        }
    }
    let end = |a: &Attempt| a.ended_at.unwrap_or(a.started_at);
    let mut rows: Vec<(&Attempt, Rest)> = Vec::new();
    for uses in by_key.values_mut() {
        // The rests, in the order the answers arrived.
        uses.sort_by_key(|a| (end(a), a.started_at, a.job_id.as_str(), a.attempt_no));
        let mut rests: Vec<(i64, Rest)> = Vec::new();
        let mut strikes = 0u32;
        for a in uses.iter() {
            match kind(a) {
                Some(k @ (ErrorKind::Transient | ErrorKind::Quota | ErrorKind::Auth)) => {
                    let rest_s = rest_seconds(k, strikes, s);
                    let from = end(a);
                    rests.push((
                        from,
                        Rest {
                            until: from + i64::from(rest_s) * 1_000_000,
                            refused: a,
                            kind: k,
                            strikes,
                            rest_s,
                        },
                    ));
                    strikes = if k == ErrorKind::Transient {
                        strikes.saturating_add(1)
                    } else {
                        0
                    };
                }
                Some(ErrorKind::Ok) => strikes = 0,
                _ => {}
            }
        }
        // Each use against the rest in force when it started: the one, among those already
        // begun, that ends last.
        uses.sort_by_key(|a| (a.started_at, a.job_id.as_str(), a.attempt_no));
        let mut next = 0;
        let mut in_force: Option<&Rest> = None;
        for a in uses.iter() {
            while next < rests.len() && rests[next].0 <= a.started_at {
                let r = &rests[next].1;
                if in_force.is_none_or(|f| r.until > f.until) {
                    in_force = Some(r);
                }
                next += 1;
            }
            if let Some(r) = in_force
                && a.started_at < r.until
                && !std::ptr::eq(r.refused, *a)
            {
                rows.push((
                    a,
                    Rest {
                        refused: r.refused,
                        ..*r
                    },
                ));
            }
        }
    }
    let weeks: Vec<String> = rows.iter().map(|r| snap.week(&r.0.job_id)).collect();
    batch(
        key_rest_schema(),
        vec![
            text(weeks.iter().map(|w| Some(w.as_str()))),
            text(rows.iter().map(|r| r.0.key_id.as_deref())),
            text(rows.iter().map(|r| r.0.pool_id.as_deref())),
            text(rows.iter().map(|r| Some(r.0.job_id.as_str()))),
            int(rows.iter().map(|r| Some(i64::from(r.0.attempt_no)))),
            ts(rows.iter().map(|r| Some(r.0.started_at))),
            text(rows.iter().map(|r| {
                Some(if r.1.kind == ErrorKind::Transient {
                    "rest"
                } else {
                    "long break"
                })
            })),
            text(rows.iter().map(|r| Some(r.1.refused.job_id.as_str()))),
            int(rows.iter().map(|r| Some(i64::from(r.1.refused.attempt_no)))),
            text(rows.iter().map(|r| Some(r.1.kind.as_str()))),
            int(rows.iter().map(|r| Some(i64::from(r.1.strikes)))),
            int(rows.iter().map(|r| Some(i64::from(r.1.rest_s)))),
            ts(rows.iter().map(|r| Some(r.1.until))),
            float(rows.iter().map(|r| Some((r.1.until - r.0.started_at) as f64 / 1e6))),
        ],
    )
}

// ----- pool_overload_episode ----------------------------------------------------------------------

/// iso_week (of the episode's start), pool_id, started_at, ended_at (the first and last 1305 of
/// the episode), refusals_1305, distinct_keys, keys (comma-separated), pool_size_seen (distinct
/// keys of the pool in the ledger), window_s (seconds).
pub fn overload_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        f("iso_week", DataType::Utf8, false),
        f("pool_id", DataType::Utf8, false),
        f("started_at", timestamp_type(), false),
        f("ended_at", timestamp_type(), false),
        f("refusals_1305", DataType::Int64, false),
        f("distinct_keys", DataType::Int64, false),
        f("keys", DataType::Utf8, false),
        f("pool_size_seen", DataType::Int64, false),
        f("window_s", DataType::Int64, false),
    ]))
}

/// One overload episode of a pool.
#[derive(Debug, Clone, PartialEq)]
pub struct Episode {
    /// The pool.
    pub pool_id: String,
    /// First 1305 of the episode, µs.
    pub start: i64,
    /// Last 1305 of the episode, µs.
    pub end: i64,
    /// 1305 refusals from `start` to `end`.
    pub refusals: usize,
    /// The keys that answered 1305 in the episode.
    pub keys: BTreeSet<String>,
    /// Distinct keys of the pool seen in the ledger.
    pub pool_size: usize,
}

/// seed 002 `pool_overloaded` with lane.yaml's `keys.pool_overload_keys`.
fn overloaded(distinct: usize, pool_size: usize, s: &AuditSettings) -> bool {
    if s.pool_overload_keys == refusal::POOL_OVERLOAD_KEYS {
        return refusal::pool_overloaded(distinct as u32, pool_size as u32);
    }
    distinct >= s.pool_overload_keys as usize || (pool_size > 0 && distinct >= pool_size)
}

/// Episodes where ≥ `pool_overload_keys` distinct keys of one pool answered 1305 inside
/// `overload_window_s` (or every key of a smaller pool did): the pool's model was overloaded.
pub fn episodes(snap: &Snapshot, s: &AuditSettings) -> Vec<Episode> {
    let mut pool_keys: HashMap<&str, BTreeSet<&str>> = HashMap::new();
    let mut events: BTreeMap<&str, Vec<(i64, &str)>> = BTreeMap::new();
    for a in snap.attempts.iter().map(|x| &x.attempt) {
        let (Some(pool), Some(key)) = (a.pool_id.as_deref(), a.key_id.as_deref()) else {
            continue;
        };
        pool_keys.entry(pool).or_default().insert(key);
        if a.provider_code == Some(ZAI_OVERLOAD) {
            events
                .entry(pool)
                .or_default()
                .push((a.ended_at.unwrap_or(a.started_at), key));
        }
    }
    let window = i64::from(s.overload_window_s) * 1_000_000;
    let mut out: Vec<Episode> = Vec::new();
    for (pool, mut ev) in events {
        ev.sort();
        let pool_size = pool_keys.get(pool).map_or(0, BTreeSet::len);
        let mut lo = 0;
        let mut open: Option<Episode> = None;
        for hi in 0..ev.len() {
            while ev[hi].0 - ev[lo].0 > window {
                lo += 1;
            }
            let keys: BTreeSet<&str> = ev[lo..=hi].iter().map(|e| e.1).collect();
            if !overloaded(keys.len(), pool_size, s) {
                continue;
            }
            match &mut open {
                Some(e) if ev[lo].0 <= e.end => {
                    e.end = ev[hi].0;
                    e.keys.extend(keys.iter().map(|k| k.to_string()));
                }
                _ => {
                    if let Some(done) = open.take() {
                        out.push(done);
                    }
                    open = Some(Episode {
                        pool_id: pool.to_string(),
                        start: ev[lo].0,
                        end: ev[hi].0,
                        refusals: 0,
                        keys: keys.iter().map(|k| k.to_string()).collect(),
                        pool_size,
                    });
                }
            }
        }
        out.extend(open);
        for e in out.iter_mut().filter(|e| e.pool_id == pool) {
            e.refusals = ev.iter().filter(|x| x.0 >= e.start && x.0 <= e.end).count();
        }
    }
    out
}

/// The rows of `pool_overload_episode`.
pub fn pool_overload_episode(snap: &Snapshot, s: &AuditSettings) -> Result<RecordBatch> {
    let e = episodes(snap, s);
    let weeks: Vec<String> = e.iter().map(|x| super::iso_week_of(x.start)).collect();
    let keys: Vec<String> = e
        .iter()
        .map(|x| x.keys.iter().cloned().collect::<Vec<_>>().join(","))
        .collect();
    batch(
        overload_schema(),
        vec![
            text(weeks.iter().map(|w| Some(w.as_str()))),
            text(e.iter().map(|x| Some(x.pool_id.as_str()))),
            ts(e.iter().map(|x| Some(x.start))),
            ts(e.iter().map(|x| Some(x.end))),
            int(e.iter().map(|x| Some(x.refusals as i64))),
            int(e.iter().map(|x| Some(x.keys.len() as i64))),
            text(keys.iter().map(|k| Some(k.as_str()))),
            int(e.iter().map(|x| Some(x.pool_size as i64))),
            int(e.iter().map(|_| Some(i64::from(s.overload_window_s)))),
        ],
    )
}

// ----- attempt_bound_exceeded ---------------------------------------------------------------------

/// iso_week, job_id, attempts, bound, last_outcome.
pub fn bound_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        f("iso_week", DataType::Utf8, false),
        f("job_id", DataType::Utf8, false),
        f("attempts", DataType::Int64, false),
        f("bound", DataType::Int64, false),
        f("last_outcome", DataType::Utf8, true),
    ]))
}

/// Jobs (turns) with more attempts than `max_attempts_per_turn` (seed 002 `MAX_ATTEMPTS_PER_TURN`:
/// "it keeps a turn from spinning through 34 keys").
pub fn attempt_bound_exceeded(snap: &Snapshot, s: &AuditSettings) -> Result<RecordBatch> {
    let jobs: Vec<_> = snap
        .jobs()
        .filter(|j| j.len() > s.max_attempts_per_turn as usize)
        .collect();
    let weeks: Vec<String> = jobs.iter().map(|j| snap.week(&j[0].attempt.job_id)).collect();
    batch(
        bound_schema(),
        vec![
            text(weeks.iter().map(|w| Some(w.as_str()))),
            text(jobs.iter().map(|j| Some(j[0].attempt.job_id.as_str()))),
            int(jobs.iter().map(|j| Some(j.len() as i64))),
            int(jobs.iter().map(|_| Some(i64::from(s.max_attempts_per_turn)))),
            text(jobs.iter().map(|j| j[j.len() - 1].attempt.outcome.map(Outcome::as_str))),
        ],
    )
}

// ----- outcome_mismatch ---------------------------------------------------------------------------

/// iso_week, job_id, attempt_no, outcome, error_kind, http_status, provider_code, reason.
pub fn mismatch_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        f("iso_week", DataType::Utf8, false),
        f("job_id", DataType::Utf8, false),
        f("attempt_no", DataType::Int64, false),
        f("outcome", DataType::Utf8, false),
        f("error_kind", DataType::Utf8, false),
        f("http_status", DataType::Int64, true),
        f("provider_code", DataType::Int64, true),
        f("reason", DataType::Utf8, false),
    ]))
}

/// Why an outcome contradicts a refusal's kind, or `None` when it does not.
pub fn contradiction(outcome: Outcome, k: ErrorKind) -> Option<&'static str> {
    match (outcome, k) {
        (Outcome::Retryable, ErrorKind::Quota) => {
            Some("a spent quota closes the key for the long break (seed 002 key_closes): not retryable on it")
        }
        (Outcome::Retryable, ErrorKind::Auth) => {
            Some("a refused key closes for the long break (seed 002 key_closes): not retryable on it")
        }
        (Outcome::Retryable, ErrorKind::Request) => {
            Some("a wrong request fails on every key (seed 002 FA_FAIL): not retryable")
        }
        (Outcome::Permanent, ErrorKind::Transient) => {
            Some("a transient refusal clears on its own (seed 002 KE_TRANSIENT): not permanent")
        }
        (Outcome::Ok, ErrorKind::Transient | ErrorKind::Quota | ErrorKind::Auth | ErrorKind::Request) => {
            Some("a refusal is not an answer")
        }
        _ => None,
    }
}

/// Attempts whose router outcome contradicts seed 002 `error_kind` of their status and code.
pub fn outcome_mismatch(snap: &Snapshot, _s: &AuditSettings) -> Result<RecordBatch> {
    let rows: Vec<(&Attempt, Outcome, ErrorKind, &str)> = snap
        .attempts
        .iter()
        .map(|x| &x.attempt)
        .filter_map(|a| {
            let (o, k) = (a.outcome?, kind(a)?);
            contradiction(o, k).map(|why| (a, o, k, why))
        })
        .collect();
    let weeks: Vec<String> = rows.iter().map(|r| snap.week(&r.0.job_id)).collect();
    batch(
        mismatch_schema(),
        vec![
            text(weeks.iter().map(|w| Some(w.as_str()))),
            text(rows.iter().map(|r| Some(r.0.job_id.as_str()))),
            int(rows.iter().map(|r| Some(i64::from(r.0.attempt_no)))),
            text(rows.iter().map(|r| Some(r.1.as_str()))),
            text(rows.iter().map(|r| Some(r.2.as_str()))),
            int(rows.iter().map(|r| r.0.http_status.map(i64::from))),
            int(rows.iter().map(|r| r.0.provider_code.map(i64::from))),
            text(rows.iter().map(|r| Some(r.3))),
        ],
    )
}
