//! `key_rest_violation` kept by key: its rule reaches across jobs (a key's rests follow its every
//! use, whatever job made it), but never across keys, so each key's rows are kept and a write
//! builds again only the keys it touched: the keys of every attempt of each job it inserted or
//! completed an attempt of (a late attempt can move its job's ISO week, which every row naming the
//! job carries). Each chunk of the attempt cache is indexed by key once (kept under the chunk's
//! id, as [`crate::derived::kept::ByJob`] keeps rows), so a key's uses are gathered without
//! reading every attempt. After a retention sweep, a write too large to merge, or a new process,
//! every key is built again. Row for row what [`super::refusals::key_rest_violation`] gives from a
//! whole snapshot, in the same order (key, start, job, attempt).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use datafusion::arrow::array::{Array, RecordBatch};
use laneledger_store::StoredAttempt;

use super::refusals::{Flagged, RestRows, Use, flag_uses};
use super::{AuditSettings, COLUMNS, Columns};
use crate::derived::job_week::WeekCache;
use crate::error::Result;
use crate::tables::job_attempt::{AttemptCache, Cursor};

/// `key_rest_violation` kept by key (see the module).
pub struct KeyRests {
    settings: AuditSettings,
    state: Mutex<Option<State>>,
    /// Keys built so far (every key of a whole build counted).
    key_builds: AtomicU64,
}

/// Each chunk's rows by key_id: (key, the chunk's rows that used it, ascending).
type ChunkKeys = Vec<(Box<str>, Vec<u32>)>;

/// The kept rows and what finding a key's uses takes.
struct State {
    /// The attempt cache's columns the rows stand at.
    cursor: Cursor,
    /// Each chunk's rows by key, by chunk id: the chunks of the last read.
    index: HashMap<u64, ChunkKeys>,
    /// Each key's rows, every week, in start order: batches of at most
    /// [`crate::tables::job_attempt::BATCH_ROWS`] rows.
    rows: BTreeMap<Box<str>, Vec<RecordBatch>>,
}

/// The cache's chunks as the audits read them, rows numbered across them in key order.
struct Chunks {
    cols: Vec<Columns>,
    /// The first row of each chunk, then the row count.
    starts: Vec<usize>,
}

impl Chunks {
    fn new(batches: &[RecordBatch]) -> Result<Self> {
        let cols = batches.iter().map(Columns::of).collect::<Result<Vec<_>>>()?;
        let mut starts = Vec::with_capacity(cols.len() + 1);
        let mut rows = 0;
        for c in &cols {
            starts.push(rows);
            rows += c.len();
        }
        starts.push(rows);
        Ok(Chunks { cols, starts })
    }

    /// The chunk and its row of row `row`.
    fn at(&self, row: usize) -> (&Columns, usize) {
        let k = self.starts.partition_point(|&s| s <= row) - 1;
        (&self.cols[k], row - self.starts[k])
    }

    fn job_id(&self, row: usize) -> &str {
        let (c, i) = self.at(row);
        c.job_id.value(i)
    }

    /// The first row of job `job`'s attempts (rows are in job order), or where it would be.
    fn job_start(&self, job: &str) -> usize {
        let (mut lo, mut hi) = (0, self.starts[self.cols.len()]);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.job_id(mid) < job {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The rows of the job of row `row`: its first row and one past its last.
    fn job_rows(&self, row: usize) -> (usize, usize) {
        let job = self.job_id(row);
        let mut from = row;
        while from > 0 && self.job_id(from - 1) == job {
            from -= 1;
        }
        let mut to = row + 1;
        while to < self.starts[self.cols.len()] && self.job_id(to) == job {
            to += 1;
        }
        (from, to)
    }
}

/// The rows of chunk `c` by key_id, keys in order, each key's rows ascending.
fn index_chunk(c: &Columns) -> ChunkKeys {
    let mut by_key: datafusion::common::HashMap<&str, Vec<u32>> = Default::default();
    for i in 0..c.len() {
        if c.key_id.is_valid(i) {
            by_key.entry(c.key_id.value(i)).or_default().push(i as u32);
        }
    }
    let mut keys: ChunkKeys = by_key.into_iter().map(|(k, rows)| (k.into(), rows)).collect();
    keys.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    keys
}

impl KeyRests {
    /// The table under `settings`, nothing built yet.
    pub fn new(settings: AuditSettings) -> Self {
        KeyRests {
            settings,
            state: Mutex::default(),
            key_builds: AtomicU64::new(0),
        }
    }

    /// How many keys were built so far (a whole build counts every key).
    pub fn key_builds(&self) -> u64 {
        self.key_builds.load(Ordering::Relaxed)
    }

    /// The table at the attempt cache's columns now (at the read's floor or newer): every week's
    /// rows, or (`week`) one ISO week's, key by key. Errors: the cache's read errors.
    pub fn rows(&self, attempts: &AttemptCache, week: Option<&str>) -> Result<Vec<RecordBatch>> {
        let mut state = crate::engine::cache_lock::lock_or_reset(&self.state, || None);
        let since = state.as_ref().map(|s| s.cursor);
        let (batches, ids, cursor, changes) = attempts.chunks_since(&COLUMNS, since)?;
        let chunks = Chunks::new(&batches)?;
        let mut held = state.take();
        // The index of the chunks read: a chunk seen before keeps its own.
        let mut index: HashMap<u64, ChunkKeys> = HashMap::with_capacity(ids.len());
        for (c, &id) in chunks.cols.iter().zip(&ids) {
            let kept = held.as_mut().and_then(|s| s.index.remove(&id));
            index.insert(id, kept.unwrap_or_else(|| index_chunk(c)));
        }
        let (rows, keys) = match (held, changes) {
            (Some(held), Some(changes)) => {
                let keys = touched_keys(&chunks, &changes);
                let mut rows = held.rows;
                for k in &keys {
                    rows.remove(k.as_str());
                }
                (rows, Some(keys))
            }
            _ => (BTreeMap::new(), None),
        };
        let mut now = State { cursor, index, rows };
        self.build(&chunks, &ids, &mut now, keys.as_ref())?;
        let mut out: Vec<RecordBatch> = Vec::new();
        for batches in now.rows.values() {
            match week {
                None => out.extend(batches.iter().cloned()),
                Some(w) => out.extend(crate::derived::kept::rows_where(batches, 0, w)?),
            }
        }
        *state = Some(now);
        if out.is_empty() {
            out.push(RecordBatch::new_empty(super::refusals::key_rest_schema()));
        }
        Ok(out)
    }

    /// Builds the rows of `keys` (every key when `None`) into `state.rows` from `chunks`
    /// (chunk ids `ids`, indexed in `state.index`).
    fn build(&self, chunks: &Chunks, ids: &[u64], state: &mut State, keys: Option<&HashSet<String>>) -> Result<()> {
        let mut uses: BTreeMap<&str, Vec<Use>> = BTreeMap::new();
        for (k, (c, id)) in chunks.cols.iter().zip(ids).enumerate() {
            for (key, rows) in &state.index[id] {
                if keys.is_some_and(|keys| !keys.contains(&**key)) {
                    continue;
                }
                let start = chunks.starts[k];
                uses.entry(key).or_default().extend(rows.iter().map(|&i| {
                    let i = i as usize;
                    Use {
                        end: c.end(i),
                        started_at: c.started_at.value(i),
                        row: (start + i) as u32,
                        kind: c.kind(i),
                    }
                }));
            }
        }
        let mut weeks = WeekCache::default();
        let mut built: Vec<(Box<str>, Vec<RecordBatch>)> = Vec::with_capacity(uses.len());
        for (key, mut uses) in uses {
            self.key_builds.fetch_add(1, Ordering::Relaxed);
            let mut flagged = Vec::new();
            flag_uses(&mut uses, &self.settings, |row, r| flagged.push((row, r)));
            let mut out = RestRows::with_capacity(flagged.len());
            for (row, r) in flagged {
                let (c, i) = chunks.at(row as usize);
                let (rc, ri) = chunks.at(r.refused as usize);
                // The job's ISO week: the week of its first attempt's start.
                let (from, to) = chunks.job_rows(row as usize);
                let first = (from..to)
                    .map(|j| {
                        let (c, i) = chunks.at(j);
                        c.started_at.value(i)
                    })
                    .min()
                    .unwrap_or_else(|| c.started_at.value(i));
                let a = c.get(i, row as usize);
                out.push(
                    &weeks.week(first).label,
                    Flagged {
                        key_id: a.key_id,
                        pool_id: a.pool_id,
                        job_id: a.job_id,
                        attempt_no: a.attempt_no,
                        started_at: a.started_at,
                    },
                    (rc.job_id.value(ri), rc.attempt_no.value(ri) as u32),
                    &r,
                );
            }
            let batch = out.finish()?;
            if batch.num_rows() > 0 {
                built.push((key.into(), super::in_chunks(batch)?));
            }
        }
        state.rows.extend(built);
        Ok(())
    }
}

/// The keys a write touched: those of every attempt of each job one of `changes` (the rows it
/// inserted or completed, in force) belongs to, read from `chunks`, which hold them.
fn touched_keys(chunks: &Chunks, changes: &[StoredAttempt]) -> HashSet<String> {
    let mut keys: HashSet<String> = HashSet::new();
    let mut jobs: HashSet<&str> = HashSet::new();
    let rows = chunks.starts[chunks.cols.len()];
    for r in changes {
        if let Some(k) = &r.attempt.key_id {
            keys.insert(k.clone());
        }
        let job = r.attempt.job_id.as_str();
        if !jobs.insert(job) {
            continue;
        }
        let from = chunks.job_start(job);
        if from >= rows || chunks.job_id(from) != job {
            continue;
        }
        let (from, to) = chunks.job_rows(from);
        for row in from..to {
            let (c, i) = chunks.at(row);
            if c.key_id.is_valid(i) {
                keys.insert(c.key_id.value(i).to_string());
            }
        }
    }
    keys
}
