//! Key refusal audits (SPEC 5.2, seed 002): same-key retries, keys used inside their rest or long
//! break, pool overload episodes, turns past the attempt bound, and router outcomes that
//! contradict the refusal's kind.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, Float64Builder, Int64Builder, RecordBatch, StringBuilder, TimestampMicrosecondBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::{HashMap, HashSet};
use laneledger_store::Outcome;
use laneledger_store::policy::refusal::{self, ErrorKind, ZAI_OVERLOAD};

use super::rows::{int, text, ts};
use super::{AuditAttempt, AuditSettings, Snapshot};
use crate::error::Result;
use crate::tables::job_attempt::{error_kind_of, timestamp_type};
use crate::tables::labels::{LabelBuilder, labels_type};

fn kind(a: &AuditAttempt<'_>) -> Option<ErrorKind> {
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
/// previous_http_status, previous_provider_code, model.
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
        f("model", DataType::Utf8, true),
    ]))
}

/// An attempt on the very key that refused the job's previous attempt (seed 002 `next_free`:
/// "never the key that just failed"; the #9967 case). Every week's rows, or (`week`) one ISO week's.
pub fn same_key_retry(snap: &Snapshot, _s: &AuditSettings, week: Option<&str>) -> Result<RecordBatch> {
    let mut rows: Vec<(AuditAttempt<'_>, AuditAttempt<'_>, ErrorKind)> = Vec::new();
    snap.for_each_job(week, |job| {
        for w in job.windows(2) {
            let (prev, next) = (w[0], w[1]);
            let Some(k) = kind(&prev) else { continue };
            if matches!(k, ErrorKind::Transient | ErrorKind::Quota | ErrorKind::Auth)
                && prev.key_id.is_some()
                && prev.key_id == next.key_id
            {
                rows.push((prev, next, k));
            }
        }
    });
    batch(
        same_key_retry_schema(),
        vec![
            text(rows.iter().map(|r| Some(snap.week(r.1.row)))),
            text(rows.iter().map(|r| Some(r.1.job_id))),
            int(rows.iter().map(|r| Some(i64::from(r.1.attempt_no)))),
            text(rows.iter().map(|r| r.1.key_id)),
            text(rows.iter().map(|r| r.1.pool_id)),
            int(rows.iter().map(|r| Some(i64::from(r.0.attempt_no)))),
            text(rows.iter().map(|r| Some(r.2.as_str()))),
            int(rows.iter().map(|r| r.0.http_status.map(i64::from))),
            int(rows.iter().map(|r| r.0.provider_code.map(i64::from))),
            text(rows.iter().map(|r| r.1.model)),
        ],
    )
}

// ----- key_rest_violation -------------------------------------------------------------------------

/// iso_week, key_id, pool_id, job_id, attempt_no, started_at, rest (`rest` | `long break`),
/// refused_job_id, refused_attempt_no, refused_kind, strikes (transient refusals in a row before
/// the refusal), rest_s (seconds), rest_until, early_s (seconds before the rest ended), model (the
/// use's). At 10 M attempts a busy week holds millions of rows: key_id, pool_id, rest,
/// refused_kind and model are dictionaries (4 bytes a row instead of a copy).
pub fn key_rest_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        f("iso_week", DataType::Utf8, false),
        f("key_id", labels_type(), false),
        f("pool_id", labels_type(), true),
        f("job_id", DataType::Utf8, false),
        f("attempt_no", DataType::Int64, false),
        f("started_at", timestamp_type(), false),
        f("rest", labels_type(), false),
        f("refused_job_id", DataType::Utf8, false),
        f("refused_attempt_no", DataType::Int64, false),
        f("refused_kind", labels_type(), false),
        f("strikes", DataType::Int64, false),
        f("rest_s", DataType::Int64, false),
        f("rest_until", timestamp_type(), false),
        f("early_s", DataType::Float64, false),
        f("model", labels_type(), true),
    ]))
}

/// A key's rest after a refusal.
#[derive(Clone, Copy)]
pub(super) struct Rest {
    /// When it ends, µs.
    until: i64,
    /// The refused attempt's row.
    pub(super) refused: u32,
    kind: ErrorKind,
    strikes: u32,
    rest_s: u32,
}

/// One use of a key: what the rest rules read of an attempt (rows are in (job_id, attempt_no)
/// order, so `row` breaks ties as those two would).
#[derive(Clone, Copy)]
pub(super) struct Use {
    /// When its answer arrived: ended_at, else started_at (µs).
    pub(super) end: i64,
    pub(super) started_at: i64,
    pub(super) row: u32,
    pub(super) kind: Option<ErrorKind>,
}

/// A key used again while it rests after a transient refusal (seed 002 `cooldown_seconds`) or
/// during its long break after a quota or auth refusal (`key_closes`), across all jobs.
///
/// A rest runs from the moment the refusal arrived (its `ended_at`) for `rest_s` seconds; an
/// attempt that started on the key inside that span is flagged. Strikes are the key's transient
/// refusals in a row before this one, in the order they arrived; an answer resets them.
///
/// With `week`, only the uses by that ISO week's jobs are reported; the rests and strikes still
/// come from every use of the key, whatever its job's week.
pub fn key_rest_violation(snap: &Snapshot, s: &AuditSettings, week: Option<&str>) -> Result<RecordBatch> {
    let reported = snap.rows_in(week);
    // Each use's key: found by hash once a batch (by the dictionary key), then counted, so that
    // every key's uses go to their place in one array. Grown key by key, the lists held up to twice
    // the uses (240 MB at 10 M attempts) and were copied at every growth.
    const NO_KEY: u32 = u32::MAX;
    let mut group_of: HashMap<&str, u32> = HashMap::default();
    let (mut keys, mut counts): (Vec<&str>, Vec<usize>) = (Vec::new(), Vec::new());
    let mut group_at: Vec<u32> = Vec::with_capacity(snap.rows());
    for (_, c) in snap.chunks() {
        let mut by_code: Vec<Option<u32>> = vec![None; c.key_id.codes()];
        for i in 0..c.len() {
            let Some(k) = c.key_id.get(i) else {
                group_at.push(NO_KEY);
                continue;
            };
            let mut group = || {
                *group_of.entry(k).or_insert_with(|| {
                    keys.push(k);
                    counts.push(0);
                    (keys.len() - 1) as u32
                })
            };
            let g = match c.key_id.code(i) {
                Some(code) => *by_code[code].get_or_insert_with(group),
                None => group(),
            };
            counts[g as usize] += 1;
            group_at.push(g);
        }
    }
    // The keys in order, each with its range of `uses`.
    let mut order: Vec<u32> = (0..keys.len() as u32).collect();
    order.sort_unstable_by_key(|&g| keys[g as usize]);
    let (mut next, mut bounds) = (vec![0usize; keys.len()], Vec::with_capacity(keys.len()));
    let mut total = 0;
    for &g in &order {
        next[g as usize] = total;
        total += counts[g as usize];
        bounds.push(next[g as usize]..total);
    }
    let mut uses = vec![
        Use {
            end: 0,
            started_at: 0,
            row: 0,
            kind: None,
        };
        total
    ];
    for (start, c) in snap.chunks() {
        for i in 0..c.len() {
            let g = group_at[start + i];
            if g != NO_KEY {
                let at = &mut next[g as usize];
                uses[*at] = Use {
                    end: c.end(i),
                    started_at: c.started_at.value(i),
                    row: (start + i) as u32,
                    kind: c.kind(i),
                };
                *at += 1;
            }
        }
    }
    drop(group_at);
    let mut flagged: Vec<(u32, Rest)> = Vec::new();
    for range in bounds {
        flag_uses(&mut uses[range], s, |row, r| {
            if reported.keeps(row as usize) {
                flagged.push((row, r));
            }
        });
    }
    drop(uses);
    // Built in one pass: a busy key pool can flag millions of uses.
    let mut out = RestRows::with_capacity(flagged.len());
    for (row, r) in flagged {
        let ((c, i), (rc, ri)) = (snap.at(row as usize), snap.at(r.refused as usize));
        out.push(snap.week(row as usize), &c.rest_use(i), rc.job_attempt(ri), &r);
    }
    out.finish()
}

/// Walks one key's every use (any order) by the rest rules and calls `flagged` with each use
/// started inside a rest and the rest it broke, in the order the uses started (then by row).
pub(super) fn flag_uses(uses: &mut [Use], s: &AuditSettings, mut flagged: impl FnMut(u32, Rest)) {
    // The rests, in the order the answers arrived.
    uses.sort_unstable_by_key(|u| (u.end, u.started_at, u.row));
    let mut rests: Vec<(i64, Rest)> = Vec::new();
    let mut strikes = 0u32;
    for u in uses.iter() {
        match u.kind {
            Some(k @ (ErrorKind::Transient | ErrorKind::Quota | ErrorKind::Auth)) => {
                let rest_s = rest_seconds(k, strikes, s);
                rests.push((
                    u.end,
                    Rest {
                        until: u.end + i64::from(rest_s) * 1_000_000,
                        refused: u.row,
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
    uses.sort_unstable_by_key(|u| (u.started_at, u.row));
    let mut next = 0;
    let mut in_force: Option<Rest> = None;
    for u in uses.iter() {
        while next < rests.len() && rests[next].0 <= u.started_at {
            let r = rests[next].1;
            if in_force.is_none_or(|f| r.until > f.until) {
                in_force = Some(r);
            }
            next += 1;
        }
        if let Some(r) = in_force
            && u.started_at < r.until
            && r.refused != u.row
        {
            flagged(u.row, r);
        }
    }
}

impl super::Columns {
    /// The fields of the use at `i` that a rest row shows.
    pub(super) fn rest_use(&self, i: usize) -> RestUse<'_> {
        RestUse {
            key_id: self.key_id.get(i),
            pool_id: self.pool_id.get(i),
            job_id: self.job_id.value(i),
            attempt_no: self.attempt_no.value(i) as u32,
            started_at: self.started_at.value(i),
            model: self.model.get(i),
        }
    }

    /// (job_id, attempt_no) of the attempt at `i`.
    pub(super) fn job_attempt(&self, i: usize) -> (&str, u32) {
        (self.job_id.value(i), self.attempt_no.value(i) as u32)
    }
}

/// The fields of a key's use that a rest row shows.
pub(super) struct RestUse<'a> {
    pub(super) key_id: Option<&'a str>,
    pub(super) pool_id: Option<&'a str>,
    pub(super) job_id: &'a str,
    pub(super) attempt_no: u32,
    pub(super) started_at: i64,
    pub(super) model: Option<&'a str>,
}

/// `key_rest_violation` rows being built.
pub(super) struct RestRows {
    week: StringBuilder,
    key_id: LabelBuilder,
    pool_id: LabelBuilder,
    job_id: StringBuilder,
    attempt_no: Int64Builder,
    started_at: TimestampMicrosecondBuilder,
    rest: LabelBuilder,
    refused_job_id: StringBuilder,
    refused_attempt_no: Int64Builder,
    refused_kind: LabelBuilder,
    strikes: Int64Builder,
    rest_s: Int64Builder,
    rest_until: TimestampMicrosecondBuilder,
    early_s: Float64Builder,
    model: LabelBuilder,
}

impl RestRows {
    /// Room for `n` rows.
    pub(super) fn with_capacity(n: usize) -> Self {
        let text = || StringBuilder::with_capacity(n, n * 8);
        let int = || Int64Builder::with_capacity(n);
        let time = || TimestampMicrosecondBuilder::with_capacity(n).with_timezone("UTC");
        let labels = || LabelBuilder::with_capacity(n);
        RestRows {
            week: text(),
            key_id: labels(),
            pool_id: labels(),
            job_id: text(),
            attempt_no: int(),
            started_at: time(),
            rest: labels(),
            refused_job_id: text(),
            refused_attempt_no: int(),
            refused_kind: labels(),
            strikes: int(),
            rest_s: int(),
            rest_until: time(),
            early_s: Float64Builder::with_capacity(n),
            model: labels(),
        }
    }

    /// The row of use `a`, of a job of ISO week `week`, inside rest `r` after the refusal of
    /// attempt `refused` (job_id, attempt_no).
    pub(super) fn push(&mut self, week: &str, a: &RestUse<'_>, refused: (&str, u32), r: &Rest) {
        self.week.append_value(week);
        self.key_id.append_option(a.key_id);
        self.pool_id.append_option(a.pool_id);
        self.job_id.append_value(a.job_id);
        self.attempt_no.append_value(i64::from(a.attempt_no));
        self.started_at.append_value(a.started_at);
        self.rest.append_static(if r.kind == ErrorKind::Transient {
            "rest"
        } else {
            "long break"
        });
        self.refused_job_id.append_value(refused.0);
        self.refused_attempt_no.append_value(i64::from(refused.1));
        self.refused_kind.append_static(r.kind.as_str());
        self.strikes.append_value(i64::from(r.strikes));
        self.rest_s.append_value(i64::from(r.rest_s));
        self.rest_until.append_value(r.until);
        self.early_s.append_value((r.until - a.started_at) as f64 / 1e6);
        self.model.append_option(a.model);
    }

    /// The rows, in the order pushed.
    pub(super) fn finish(mut self) -> Result<RecordBatch> {
        let done = |b: &mut StringBuilder| Arc::new(b.finish()) as ArrayRef;
        let done_int = |b: &mut Int64Builder| Arc::new(b.finish()) as ArrayRef;
        let done_ts = |b: &mut TimestampMicrosecondBuilder| Arc::new(b.finish()) as ArrayRef;
        batch(
            key_rest_schema(),
            vec![
                done(&mut self.week),
                Arc::new(self.key_id.finish()),
                Arc::new(self.pool_id.finish()),
                done(&mut self.job_id),
                done_int(&mut self.attempt_no),
                done_ts(&mut self.started_at),
                Arc::new(self.rest.finish()),
                done(&mut self.refused_job_id),
                done_int(&mut self.refused_attempt_no),
                Arc::new(self.refused_kind.finish()),
                done_int(&mut self.strikes),
                done_int(&mut self.rest_s),
                done_ts(&mut self.rest_until),
                Arc::new(self.early_s.finish()),
                Arc::new(self.model.finish()),
            ],
        )
    }
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
    // Only the number of each pool's keys is read: a hash set, not a tree, per pool.
    let mut pool_keys: HashMap<&str, HashSet<&str>> = HashMap::default();
    let mut events: BTreeMap<&str, Vec<(i64, &str)>> = BTreeMap::new();
    for (_, c) in snap.chunks() {
        for i in 0..c.len() {
            let (Some(pool), Some(key)) = (c.pool_id.get(i), c.key_id.get(i)) else {
                continue;
            };
            pool_keys.entry(pool).or_default().insert(key);
            if c.provider_code(i) == Some(ZAI_OVERLOAD) {
                events.entry(pool).or_default().push((c.end(i), key));
            }
        }
    }
    let mut out: Vec<Episode> = Vec::new();
    for (pool, ev) in events {
        let pool_size = pool_keys.get(pool).map_or(0, HashSet::len);
        out.extend(pool_episodes(pool, ev, pool_size, s));
    }
    out
}

/// The episodes of one pool of `pool_size` distinct keys, from its 1305 refusals `ev` (when the
/// answer arrived, µs; the key), any order: in time order.
pub(super) fn pool_episodes(pool: &str, mut ev: Vec<(i64, &str)>, pool_size: usize, s: &AuditSettings) -> Vec<Episode> {
    let window = i64::from(s.overload_window_s) * 1_000_000;
    let mut out: Vec<Episode> = Vec::new();
    ev.sort();
    // The 1305s of the last `window`, by key: a sliding count, not a set rebuilt per event.
    let mut in_window: BTreeMap<&str, usize> = BTreeMap::new();
    let mut lo = 0;
    let mut open: Option<Episode> = None;
    for hi in 0..ev.len() {
        *in_window.entry(ev[hi].1).or_default() += 1;
        while ev[hi].0 - ev[lo].0 > window {
            if let Some(n) = in_window.get_mut(ev[lo].1) {
                *n -= 1;
                if *n == 0 {
                    in_window.remove(ev[lo].1);
                }
            }
            lo += 1;
        }
        if !overloaded(in_window.len(), pool_size, s) {
            continue;
        }
        match &mut open {
            Some(e) if ev[lo].0 <= e.end => {
                e.end = ev[hi].0;
                for k in in_window.keys() {
                    if !e.keys.contains(*k) {
                        e.keys.insert(k.to_string());
                    }
                }
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
                    keys: in_window.keys().map(|k| k.to_string()).collect(),
                    pool_size,
                });
            }
        }
    }
    out.extend(open);
    // The 1305s from each episode's start to its end: two binary searches in the sorted times.
    for e in &mut out {
        let from = ev.partition_point(|x| x.0 < e.start);
        let to = ev.partition_point(|x| x.0 <= e.end);
        e.refusals = to - from;
    }
    out
}

/// The rows of `pool_overload_episode`: every week's, or (`week`) the episodes that start in that
/// ISO week (found from every week's refusals, so an episode is the same either way).
pub fn pool_overload_episode(snap: &Snapshot, s: &AuditSettings, week: Option<&str>) -> Result<RecordBatch> {
    episode_rows(episodes(snap, s), s, week)
}

/// The rows of `episodes`: every one, or (`week`) those that start in that ISO week.
pub(super) fn episode_rows(episodes: Vec<Episode>, s: &AuditSettings, week: Option<&str>) -> Result<RecordBatch> {
    let (e, weeks): (Vec<Episode>, Vec<String>) = episodes
        .into_iter()
        .map(|x| {
            let w = super::iso_week_of(x.start);
            (x, w)
        })
        .filter(|(_, w)| week.is_none_or(|week| week == w))
        .unzip();
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
/// Every week's rows, or (`week`) one ISO week's.
pub fn attempt_bound_exceeded(snap: &Snapshot, s: &AuditSettings, week: Option<&str>) -> Result<RecordBatch> {
    // (first attempt, attempts, last attempt) of each job past the bound.
    let mut jobs: Vec<(AuditAttempt<'_>, usize, AuditAttempt<'_>)> = Vec::new();
    snap.for_each_job(week, |j| {
        if let (Some(first), Some(last)) = (j.first(), j.last())
            && j.len() > s.max_attempts_per_turn as usize
        {
            jobs.push((*first, j.len(), *last));
        }
    });
    batch(
        bound_schema(),
        vec![
            text(jobs.iter().map(|j| Some(snap.week(j.0.row)))),
            text(jobs.iter().map(|j| Some(j.0.job_id))),
            int(jobs.iter().map(|j| Some(j.1 as i64))),
            int(jobs.iter().map(|_| Some(i64::from(s.max_attempts_per_turn)))),
            text(jobs.iter().map(|j| j.2.outcome.map(Outcome::as_str))),
        ],
    )
}

// ----- outcome_mismatch ---------------------------------------------------------------------------

/// iso_week, job_id, attempt_no, outcome, error_kind, http_status, provider_code, reason, model.
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
        f("model", DataType::Utf8, true),
    ]))
}

/// Why an outcome contradicts a refusal's kind, or `None` when it does not.
pub fn contradiction(outcome: Outcome, k: ErrorKind) -> Option<&'static str> {
    match (outcome, k) {
        (Outcome::Retryable, ErrorKind::Quota) => {
            Some("a spent quota closes the key for the long break: not retryable on it")
        }
        (Outcome::Retryable, ErrorKind::Auth) => Some("a refused key closes for the long break: not retryable on it"),
        (Outcome::Retryable, ErrorKind::Request) => Some("a wrong request fails on every key: not retryable"),
        (Outcome::Permanent, ErrorKind::Transient) => Some("a transient refusal clears on its own: not permanent"),
        (Outcome::Ok, ErrorKind::Transient | ErrorKind::Quota | ErrorKind::Auth | ErrorKind::Request) => {
            Some("a refusal is not an answer")
        }
        _ => None,
    }
}

/// Attempts whose router outcome contradicts seed 002 `error_kind` of their status and code:
/// every week's, or (`week`) those of one ISO week's jobs.
pub fn outcome_mismatch(snap: &Snapshot, _s: &AuditSettings, week: Option<&str>) -> Result<RecordBatch> {
    let mut rows: Vec<(AuditAttempt<'_>, Outcome, ErrorKind, &str)> = Vec::new();
    snap.for_each_job(week, |job| {
        rows.extend(job.iter().filter_map(|a| {
            let (o, k) = (a.outcome?, kind(a)?);
            contradiction(o, k).map(|why| (*a, o, k, why))
        }))
    });
    batch(
        mismatch_schema(),
        vec![
            text(rows.iter().map(|r| Some(snap.week(r.0.row)))),
            text(rows.iter().map(|r| Some(r.0.job_id))),
            int(rows.iter().map(|r| Some(i64::from(r.0.attempt_no)))),
            text(rows.iter().map(|r| Some(r.1.as_str()))),
            text(rows.iter().map(|r| Some(r.2.as_str()))),
            int(rows.iter().map(|r| r.0.http_status.map(i64::from))),
            int(rows.iter().map(|r| r.0.provider_code.map(i64::from))),
            text(rows.iter().map(|r| Some(r.3))),
            text(rows.iter().map(|r| r.0.model)),
        ],
    )
}
