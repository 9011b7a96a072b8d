//! `duplicate_reconciliation` (SPEC 5.1, seed 000 "Reconcile the last 900s"): each later artifact
//! of an idem_key, split by the gap between the first artifact's `ended_at` and its own against
//! `late_completion_window_s`: inside it the duplicate was **reconcilable**; after it the
//! **window was too short**.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::{HashMap, HashSet};

use super::rows::{float, int, text, ts};
use super::{AuditSettings, Snapshot};
use crate::error::Result;
use crate::tables::job_attempt::timestamp_type;

/// iso_week, idem_key, artifact_id, job_id, attempt_no, ended_at, first_artifact_id,
/// first_ended_at, gap_s (seconds), window_s (seconds), class (`reconcilable` |
/// `window too short` | `open`: no ended_at to compare), model (the later artifact's attempt's).
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("iso_week", DataType::Utf8, false),
        Field::new("idem_key", DataType::Utf8, false),
        Field::new("artifact_id", DataType::Utf8, false),
        Field::new("job_id", DataType::Utf8, false),
        Field::new("attempt_no", DataType::Int64, false),
        Field::new("ended_at", timestamp_type(), true),
        Field::new("first_artifact_id", DataType::Utf8, false),
        Field::new("first_ended_at", timestamp_type(), true),
        Field::new("gap_s", DataType::Float64, true),
        Field::new("window_s", DataType::Float64, false),
        Field::new("class", DataType::Utf8, false),
        Field::new("model", DataType::Utf8, true),
    ]))
}

/// One artifact's first appearance: (ended_at, job_id, attempt_no, row).
type Landing<'a> = (Option<i64>, &'a str, u32, usize);

/// The rows of `duplicate_reconciliation`: every week's, or (`week`) those whose later artifact
/// first landed in one of that ISO week's jobs (measured against the idem_key's first artifact,
/// whatever its week).
pub fn build(snap: &Snapshot, s: &AuditSettings, week: Option<&str>) -> Result<RecordBatch> {
    let reported = snap.rows_in(week);
    // For one week, only the idem_keys with an artifact in that week's jobs can have rows.
    let wanted: Option<HashSet<&str>> = week.map(|_| {
        let mut keys = HashSet::default();
        snap.for_each_job(week, |job| {
            keys.extend(job.iter().filter(|a| a.artifact_id.is_some()).map(|a| a.idem_key))
        });
        keys
    });
    let wanted = |key: &str| wanted.as_ref().is_none_or(|w| w.contains(key));
    // The idem_keys with two distinct artifacts or more: only theirs are kept below.
    let mut first: HashMap<&str, &str> = HashMap::default();
    let mut duplicated: HashSet<&str> = HashSet::default();
    for (_, c) in snap.chunks() {
        for i in 0..c.len() {
            let Some(art) = super::text(&c.artifact_id, i) else {
                continue;
            };
            let key = c.idem_key.value(i);
            if !wanted(key) {
                continue;
            }
            if *first.entry(key).or_insert(art) != art {
                duplicated.insert(key);
            }
        }
    }
    drop(first);
    // idem_key → artifact_id → its earliest landing.
    let mut keys: BTreeMap<&str, BTreeMap<&str, Landing>> = BTreeMap::new();
    for (start, c) in snap.chunks() {
        for i in 0..c.len() {
            let Some(art) = super::text(&c.artifact_id, i) else {
                continue;
            };
            let key = c.idem_key.value(i);
            if !duplicated.contains(key) {
                continue;
            }
            let a = c.get(i, start + i);
            let landing = (a.ended_at, a.job_id, a.attempt_no, a.row);
            let e = keys.entry(key).or_default().entry(art).or_insert(landing);
            let earlier = match (a.ended_at, e.0) {
                (Some(new), Some(old)) => new < old,
                (Some(_), None) => true,
                _ => false,
            };
            if earlier {
                *e = landing;
            }
        }
    }
    struct Row<'a> {
        week: &'a str,
        key: &'a str,
        art: &'a str,
        land: Landing<'a>,
        first: &'a str,
        first_end: Option<i64>,
        gap_s: Option<f64>,
        class: &'static str,
    }
    let mut rows = Vec::new();
    for (key, arts) in &keys {
        if arts.len() < 2 {
            continue;
        }
        let mut list: Vec<(&str, Landing)> = arts.iter().map(|(a, l)| (*a, *l)).collect();
        list.sort_by_key(|(a, l)| (l.0.is_none(), l.0, *a));
        let (first, first_land) = list[0];
        for (art, land) in &list[1..] {
            if !reported.keeps(land.3) {
                continue;
            }
            let gap_s = match (land.0, first_land.0) {
                (Some(t), Some(f)) => Some((t - f) as f64 / 1e6),
                _ => None,
            };
            let class = match gap_s {
                None => "open",
                Some(g) if g <= s.late_completion_window_s => "reconcilable",
                Some(_) => "window too short",
            };
            rows.push(Row {
                week: snap.week(land.3),
                key,
                art,
                land: *land,
                first,
                first_end: first_land.0,
                gap_s,
                class,
            });
        }
    }
    let cols = vec![
        text(rows.iter().map(|r| Some(r.week))),
        text(rows.iter().map(|r| Some(r.key))),
        text(rows.iter().map(|r| Some(r.art))),
        text(rows.iter().map(|r| Some(r.land.1))),
        int(rows.iter().map(|r| Some(i64::from(r.land.2)))),
        ts(rows.iter().map(|r| r.land.0)),
        text(rows.iter().map(|r| Some(r.first))),
        ts(rows.iter().map(|r| r.first_end)),
        float(rows.iter().map(|r| r.gap_s)),
        float(rows.iter().map(|_| Some(s.late_completion_window_s))),
        text(rows.iter().map(|r| Some(r.class))),
        text(rows.iter().map(|r| snap.get(r.land.3).model)),
    ];
    Ok(RecordBatch::try_new(schema(), cols).map_err(datafusion::error::DataFusionError::from)?)
}

/// `duplicate_reconciliation` kept up to date by the writes: its rows come only from the
/// idem_keys that hold two distinct artifacts or more, so a write is taken in without building
/// anything when each row it inserted or completed either has no artifact, or holds the one
/// artifact its idem_key had (or the key's first), on a key with no rows, of a job no row names
/// (a late attempt can move its job's week). Otherwise, or after a retention sweep, a write too
/// large to merge or a new process, every week's rows are built again. Row for row what
/// [`build`] gives, in its order.
pub struct Kept {
    settings: AuditSettings,
    state: std::sync::Mutex<Option<KeptRows>>,
    /// Builds from every attempt so far.
    builds: std::sync::atomic::AtomicU64,
}

/// Every week's rows, with what tells whether a write changes them.
struct KeptRows {
    cursor: crate::tables::job_attempt::Cursor,
    hasher: std::hash::RandomState,
    /// Each idem_key's first artifact, by their hashes (a hash two keys or artifacts share only
    /// makes the rows be built again).
    first: HashMap<u64, u64>,
    /// The hashes of the idem_keys with rows, and of the jobs the rows name.
    keys: HashSet<u64>,
    jobs: HashSet<u64>,
    rows: RecordBatch,
}

impl Kept {
    /// The table under `settings`, nothing built yet.
    pub fn new(settings: AuditSettings) -> Self {
        Kept {
            settings,
            state: std::sync::Mutex::default(),
            builds: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// How many times the rows were built from every attempt.
    pub fn builds(&self) -> u64 {
        self.builds.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The table at the attempt cache's columns now (at the read's floor or newer): every week's
    /// rows, or (`week`) one ISO week's. Errors: the cache's read errors.
    pub fn rows(
        &self,
        attempts: &crate::tables::job_attempt::AttemptCache,
        week: Option<&str>,
    ) -> Result<Vec<RecordBatch>> {
        use std::hash::BuildHasher;
        let mut state = crate::engine::cache_lock::lock_or_reset(&self.state, || None);
        let since = state.as_ref().map(|s| s.cursor);
        let (columns, cursor, changes) = attempts.columns_since(&super::COLUMNS, since)?;
        let kept = match (state.as_mut(), changes) {
            (Some(held), Some(changes)) => held.fold(&changes),
            _ => false,
        };
        match (kept, state.as_mut()) {
            (true, Some(held)) => held.cursor = cursor,
            _ => {
                self.builds.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let snap = Snapshot::new(&columns)?;
                let hasher = std::hash::RandomState::new();
                // The rows, and each key's first artifact beside them.
                let (rows, first) = crate::engine::parallel::join(
                    || build(&snap, &self.settings, None),
                    || {
                        let mut first: HashMap<u64, u64> = HashMap::default();
                        for a in snap.iter() {
                            if let Some(art) = a.artifact_id {
                                first
                                    .entry(hasher.hash_one(a.idem_key))
                                    .or_insert_with(|| hasher.hash_one(art));
                            }
                        }
                        first
                    },
                );
                let rows = rows?;
                let text = |c: usize| {
                    use datafusion::arrow::array::AsArray;
                    rows.column(c).as_string::<i32>().clone()
                };
                let (keys, jobs) = (text(1), text(3));
                *state = Some(KeptRows {
                    cursor,
                    first,
                    keys: keys.iter().flatten().map(|k| hasher.hash_one(k)).collect(),
                    jobs: jobs.iter().flatten().map(|j| hasher.hash_one(j)).collect(),
                    hasher,
                    rows,
                });
            }
        }
        let rows = state.as_ref().expect("just set").rows.clone();
        drop(state);
        let out = match week {
            None => vec![rows],
            Some(w) => crate::derived::kept::rows_where(&[rows], 0, w)?,
        };
        super::handed_out(out, schema())
    }
}

impl KeptRows {
    /// Takes in the rows a write inserted or completed (in force, oldest first) when they leave
    /// the table as it is; `false` when it must be built again. Set fields never change (the
    /// write rules): a row's artifact is the one it had, or new.
    fn fold(&mut self, changes: &[laneledger_store::StoredAttempt]) -> bool {
        use std::hash::BuildHasher;
        for r in changes {
            let a = &r.attempt;
            if self.jobs.contains(&self.hasher.hash_one(a.job_id.as_str())) {
                return false;
            }
            let Some(art) = &a.artifact_id else { continue };
            let key = self.hasher.hash_one(a.idem_key.as_str());
            if self.keys.contains(&key) {
                return false;
            }
            let art = self.hasher.hash_one(art.as_str());
            if *self.first.entry(key).or_insert(art) != art {
                // A second artifact under the key: it has rows now.
                return false;
            }
        }
        true
    }
}
