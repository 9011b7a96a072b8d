//! Audit tables kept by group: a rule that reaches across jobs but never across its groups keeps
//! each group's rows, and a write builds again only the groups it touched.
//!
//! - `key_rest_violation` by key ([`ByGroup::key_rests`]): a key's rests follow its every use,
//!   whatever job made it. A write touches the keys of every attempt of each job it inserted or
//!   completed an attempt of (a late attempt can move its job's ISO week, which every row naming
//!   the job carries). The week of each use's job is read from `week_attempt`'s kept week column,
//!   not worked out again per row.
//! - `pool_overload_episode` by pool ([`ByGroup::pool_episodes`]): a pool's episodes come from its
//!   keys' 1305 refusals and its count of keys, and from nothing else. An episode's week is the
//!   week it starts, so a write touches only the pools it gave a 1305 refusal or a key new to
//!   the pool: most writes touch none, and the pool that holds most attempts is not built again.
//!
//! Each chunk of the attempt cache is indexed by group once (kept under the chunk's id, as
//! [`crate::derived::kept::ByJob`] keeps rows), so a group's rows are gathered without reading
//! every attempt. After a retention sweep, a write too large to merge, or a new process, every
//! group is built again. Row for row what the whole build from a snapshot gives
//! ([`super::refusals::key_rest_violation`], [`super::refusals::pool_overload_episode`]), in the
//! same order: group by group.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use laneledger_store::StoredAttempt;

use super::refusals::{Rest, RestRows, Use, flag_uses};
use super::{AuditSettings, COLUMNS, Columns};
use crate::derived::week_attempt::{RowWeeks, WeekColumn};
use crate::error::Result;
use crate::tables::job_attempt::{AttemptCache, Cursor};

/// How a table kept by group is built (see the module).
trait GroupRule: Send + Sync {
    /// The table's schema; `iso_week` comes first.
    fn schema(&self) -> SchemaRef;
    /// The group of the row at `i` of `c`, if it belongs to one.
    fn group<'c>(&self, c: &'c Columns, i: usize) -> Option<&'c str>;
    /// The groups a write that inserted or completed `changes` (rows in force, read into
    /// `chunks`) touched.
    fn touched(&self, chunks: &Chunks, changes: &[StoredAttempt]) -> HashSet<String>;
    /// The rows of `group`, every week's, from its rows `rows` (ascending) of `chunks`, in
    /// batches of at most [`crate::tables::job_attempt::BATCH_ROWS`] rows.
    fn build(&self, chunks: &Chunks, group: &str, rows: &[u32]) -> Result<Vec<RecordBatch>>;
    /// Forgets what the rule kept of earlier builds: every group is about to be built again.
    fn forget(&self) {}
}

/// A table kept by group (see the module).
pub struct ByGroup {
    rule: Box<dyn GroupRule>,
    /// Each row's job's ISO week, for a rule whose rows show it (kept by chunk, shared with
    /// `week_attempt`).
    weeks: Option<Arc<WeekColumn>>,
    state: Mutex<Option<State>>,
    /// Groups built so far (a whole build counts every group).
    group_builds: AtomicU64,
}

/// Each chunk's rows by group: (group, the chunk's rows in it, ascending), groups in order.
type ChunkGroups = Vec<(Box<str>, Vec<u32>)>;

/// The kept rows and what finding a group's rows takes.
struct State {
    /// The attempt cache's columns the rows stand at.
    cursor: Cursor,
    /// Each chunk's rows by group, by chunk id: the chunks of the last read.
    index: HashMap<u64, ChunkGroups>,
    /// Each group's rows, every week, in batches of at most
    /// [`crate::tables::job_attempt::BATCH_ROWS`] rows.
    rows: BTreeMap<Box<str>, Vec<RecordBatch>>,
}

/// The cache's chunks as the audits read them, rows numbered across them in key order.
struct Chunks {
    cols: Vec<Columns>,
    /// The first row of each chunk, then the row count.
    starts: Vec<usize>,
    /// Each row's job's week, when the table reads it ([`ByGroup`]'s `weeks`).
    weeks: Option<RowWeeks>,
}

impl Chunks {
    fn new(batches: &[RecordBatch], weeks: Option<RowWeeks>) -> Result<Self> {
        let cols = batches.iter().map(Columns::of).collect::<Result<Vec<_>>>()?;
        let mut starts = Vec::with_capacity(cols.len() + 1);
        let mut rows = 0;
        for c in &cols {
            starts.push(rows);
            rows += c.len();
        }
        starts.push(rows);
        Ok(Chunks { cols, starts, weeks })
    }

    /// The ISO week of the job of row `row`. Errors: [`crate::Error::Internal`] for a table that
    /// does not read weeks.
    fn week(&self, row: usize) -> Result<&str> {
        let k = self.starts.partition_point(|&s| s <= row) - 1;
        self.weeks
            .as_ref()
            .ok_or_else(|| crate::Error::Internal("a table kept by group read no weeks".into()))?
            .get(k, row - self.starts[k])
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

/// The rows of chunk `c` by `rule`'s group, groups in order, each group's rows ascending.
fn index_chunk(rule: &dyn GroupRule, c: &Columns) -> ChunkGroups {
    let mut by_group: datafusion::common::HashMap<&str, Vec<u32>> = Default::default();
    for i in 0..c.len() {
        if let Some(g) = rule.group(c, i) {
            by_group.entry(g).or_default().push(i as u32);
        }
    }
    let mut groups: ChunkGroups = by_group.into_iter().map(|(g, rows)| (g.into(), rows)).collect();
    groups.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    groups
}

impl ByGroup {
    /// `key_rest_violation` under `settings`, kept by key, nothing built yet; each use's job's
    /// ISO week is read from `weeks`.
    pub fn key_rests(settings: AuditSettings, weeks: Arc<WeekColumn>) -> Self {
        ByGroup {
            weeks: Some(weeks),
            ..ByGroup::with_rule(Box::new(KeyRule { settings }))
        }
    }

    /// `pool_overload_episode` under `settings`, kept by pool, nothing built yet.
    pub fn pool_episodes(settings: AuditSettings) -> Self {
        ByGroup::with_rule(Box::new(PoolRule {
            settings,
            keys: Mutex::default(),
        }))
    }

    fn with_rule(rule: Box<dyn GroupRule>) -> Self {
        ByGroup {
            rule,
            weeks: None,
            state: Mutex::default(),
            group_builds: AtomicU64::new(0),
        }
    }

    /// How many groups were built so far (a whole build counts every group).
    pub fn group_builds(&self) -> u64 {
        self.group_builds.load(Ordering::Relaxed)
    }

    /// The table at the attempt cache's columns now (at the read's floor or newer): every week's
    /// rows, or (`week`) one ISO week's, group by group. Errors: the cache's read errors.
    pub fn rows(&self, attempts: &AttemptCache, week: Option<&str>) -> Result<Vec<RecordBatch>> {
        let mut state = crate::engine::cache_lock::lock_or_reset(&self.state, || None);
        let since = state.as_ref().map(|s| s.cursor);
        let (batches, ids, cursor, changes) = attempts.chunks_since(&COLUMNS, since)?;
        let weeks = self.weeks.as_ref().map(|w| w.labels(&batches, &ids)).transpose()?;
        let chunks = Chunks::new(&batches, weeks)?;
        let mut held = state.take();
        // The index of the chunks read: a chunk seen before keeps its own.
        let mut index: HashMap<u64, ChunkGroups> = HashMap::with_capacity(ids.len());
        let mut unseen: Vec<(u64, &Columns)> = Vec::new();
        for (c, &id) in chunks.cols.iter().zip(&ids) {
            match held.as_mut().and_then(|s| s.index.remove(&id)) {
                Some(kept) => {
                    index.insert(id, kept);
                }
                None => unseen.push((id, c)),
            }
        }
        let rule = self.rule.as_ref();
        let indexed = crate::engine::parallel::map(&unseen, |&(_, c)| Ok(index_chunk(rule, c)))?;
        index.extend(unseen.iter().map(|&(id, _)| id).zip(indexed));
        let (rows, groups) = match (held, changes) {
            (Some(held), Some(changes)) => {
                let groups = self.rule.touched(&chunks, &changes);
                let mut rows = held.rows;
                for g in &groups {
                    rows.remove(g.as_str());
                }
                (rows, Some(groups))
            }
            _ => (BTreeMap::new(), None),
        };
        let mut now = State { cursor, index, rows };
        self.build(&chunks, &ids, &mut now, groups.as_ref())?;
        let mut out: Vec<RecordBatch> = Vec::new();
        for batches in now.rows.values() {
            match week {
                None => out.extend(batches.iter().cloned()),
                Some(w) => out.extend(crate::derived::kept::rows_where(batches, 0, w)?),
            }
        }
        *state = Some(now);
        super::handed_out(out, self.rule.schema())
    }

    /// Builds the rows of `groups` (every group when `None`) into `state.rows` from `chunks`
    /// (chunk ids `ids`, indexed in `state.index`).
    fn build(&self, chunks: &Chunks, ids: &[u64], state: &mut State, groups: Option<&HashSet<String>>) -> Result<()> {
        if groups.is_none() {
            self.rule.forget();
        }
        let mut rows: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
        for (k, id) in ids.iter().enumerate() {
            for (group, in_chunk) in &state.index[id] {
                if groups.is_some_and(|groups| !groups.contains(&**group)) {
                    continue;
                }
                let start = chunks.starts[k] as u32;
                rows.entry(group)
                    .or_default()
                    .extend(in_chunk.iter().map(|&i| start + i));
            }
        }
        // The groups apart from each other, side by side.
        let rows: Vec<(&str, Vec<u32>)> = rows.into_iter().collect();
        self.group_builds.fetch_add(rows.len() as u64, Ordering::Relaxed);
        let built = crate::engine::parallel::map(&rows, |(group, rows)| self.rule.build(chunks, group, rows))?;
        for ((group, _), batches) in rows.iter().zip(built) {
            let batches: Vec<RecordBatch> = batches.into_iter().filter(|b| b.num_rows() > 0).collect();
            if !batches.is_empty() {
                state.rows.insert((*group).into(), batches);
            }
        }
        Ok(())
    }
}

/// `key_rest_violation`'s rule, by key.
struct KeyRule {
    settings: AuditSettings,
}

impl GroupRule for KeyRule {
    fn schema(&self) -> SchemaRef {
        super::refusals::key_rest_schema()
    }

    fn group<'c>(&self, c: &'c Columns, i: usize) -> Option<&'c str> {
        c.key_id.get(i)
    }

    /// The keys of every attempt of each job one of `changes` belongs to.
    fn touched(&self, chunks: &Chunks, changes: &[StoredAttempt]) -> HashSet<String> {
        touched_keys(chunks, changes)
    }

    /// The rows are built a batch at a time, side by side: the busiest key of a large ledger
    /// flags about a million uses, and one write to it builds them all again.
    fn build(&self, chunks: &Chunks, _key: &str, rows: &[u32]) -> Result<Vec<RecordBatch>> {
        let mut uses: Vec<Use> = rows
            .iter()
            .map(|&row| {
                let (c, i) = chunks.at(row as usize);
                Use {
                    end: c.end(i),
                    started_at: c.started_at.value(i),
                    row,
                    kind: c.kind(i),
                }
            })
            .collect();
        let mut flagged = Vec::new();
        flag_uses(&mut uses, &self.settings, |row, r| flagged.push((row, r)));
        let pieces: Vec<&[(u32, Rest)]> = flagged.chunks(crate::tables::job_attempt::BATCH_ROWS).collect();
        crate::engine::parallel::map(&pieces, |piece| {
            let mut out = RestRows::with_capacity(piece.len());
            for &(row, r) in piece.iter() {
                let ((c, i), (rc, ri)) = (chunks.at(row as usize), chunks.at(r.refused as usize));
                out.push(chunks.week(row as usize)?, &c.rest_use(i), rc.job_attempt(ri), &r);
            }
            out.finish()
        })
    }
}

/// `pool_overload_episode`'s rule, by pool: the rows with a pool and a key (the whole build
/// reads no other).
struct PoolRule {
    settings: AuditSettings,
    /// Each pool's keys at its last build.
    keys: Mutex<HashMap<String, HashSet<String>>>,
}

impl GroupRule for PoolRule {
    fn schema(&self) -> SchemaRef {
        super::refusals::overload_schema()
    }

    fn group<'c>(&self, c: &'c Columns, i: usize) -> Option<&'c str> {
        c.key_id.get(i).and(c.pool_id.get(i))
    }

    /// The pools `changes` gave a 1305 refusal (new, or completed: its time may move) or a key
    /// they did not have: nothing else changes a pool's episodes (set fields never change).
    fn touched(&self, _chunks: &Chunks, changes: &[StoredAttempt]) -> HashSet<String> {
        let known = crate::engine::cache_lock::lock_or_reset(&self.keys, HashMap::new);
        changes
            .iter()
            .filter_map(|r| {
                let a = &r.attempt;
                let (pool, key) = (a.pool_id.as_deref()?, a.key_id.as_deref()?);
                let refusal = a.provider_code == Some(laneledger_store::policy::refusal::ZAI_OVERLOAD);
                let new_key = !known.get(pool).is_some_and(|keys| keys.contains(key));
                (refusal || new_key).then(|| pool.to_string())
            })
            .collect()
    }

    fn build(&self, chunks: &Chunks, pool: &str, rows: &[u32]) -> Result<Vec<RecordBatch>> {
        let mut keys: HashSet<&str> = HashSet::new();
        let mut events: Vec<(i64, &str)> = Vec::new();
        for &row in rows {
            let (c, i) = chunks.at(row as usize);
            let Some(key) = c.key_id.get(i) else { continue };
            keys.insert(key);
            if c.provider_code(i) == Some(laneledger_store::policy::refusal::ZAI_OVERLOAD) {
                events.push((c.end(i), key));
            }
        }
        crate::engine::cache_lock::lock_or_reset(&self.keys, HashMap::new)
            .insert(pool.to_string(), keys.iter().map(|k| k.to_string()).collect());
        let episodes = super::refusals::pool_episodes(pool, events, keys.len(), &self.settings);
        super::in_chunks(super::refusals::episode_rows(episodes, &self.settings, None)?)
    }

    /// Drops the keys of pools a sweep may have emptied.
    fn forget(&self) {
        crate::engine::cache_lock::lock_or_reset(&self.keys, HashMap::new).clear();
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
