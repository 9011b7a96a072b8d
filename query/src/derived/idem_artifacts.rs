//! `idem_artifacts`: the distinct artifacts of each idempotency key, materialized once and then
//! brought up to date from the rows each write changed ([`IdemArtifactsMemo`]), and the plan
//! rewrite that answers seed 000's second query from it.
//!
//! The table is exactly
//!
//! ```sql
//! SELECT idem_key, COUNT(DISTINCT artifact_id) AS artifacts
//! FROM job_attempt
//! WHERE artifact_id IS NOT NULL
//! GROUP BY idem_key
//! ```
//!
//! (an idem_key with no artifact has no row), computed whole by [`idem_artifacts`] in one pass over
//! the cached `job_attempt` batches per core, each core finding its share of the keys. [`IdemArtifactsRule`] is an analyzer rule: where a plan groups
//! `job_attempt` by `idem_key` alone, counts `DISTINCT artifact_id` alone, over
//! `WHERE artifact_id IS NOT NULL` alone, it reads `idem_artifacts` instead, under the same output
//! names. Seed 000's duplicates query (q2) has that shape; its text runs unchanged, and
//! `query/tests/sqlite_differential.rs` checks its answers against SQLite's.

use std::sync::Arc;

use std::hash::BuildHasher;
use std::sync::Mutex;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array, RecordBatch, StringArray, StringBuilder};
use datafusion::arrow::compute::concat;
use datafusion::arrow::datatypes::Int64Type;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{Column, HashMap};
use datafusion::datasource::{TableProvider, provider_as_source};
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder, Projection};
use datafusion::optimizer::AnalyzerRule;

use crate::error::Result;
use hashbrown::{DefaultHashBuilder, HashTable};
use laneledger_store::StoredAttempt;

use crate::engine::parallel;
use crate::tables::job_attempt::{self, AttemptCache, BATCH_ROWS, Cursor};

/// The table's name in SQL.
pub const TABLE: &str = "idem_artifacts";

/// `idem_artifacts`' schema: idem_key Utf8, artifacts Int64 (distinct non-NULL artifact_ids, ≥ 1).
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("idem_key", DataType::Utf8, false),
        Field::new("artifacts", DataType::Int64, false),
    ]))
}

/// One idem_key while the table is computed, with the attempt where it first appears (batch,
/// row), whose artifact_id is the key's first. Any other artifact_ids are kept aside: few keys
/// have them, and at 10 M attempts every byte here is 7 MB.
struct Key<'a> {
    idem_key: &'a str,
    batch: u32,
    row: u32,
}

/// The idem_keys of one part of the hashes ([`part_of`]), as [`State::compute`] finds them.
struct Part<'a> {
    /// In the order each key first appears.
    keys: Vec<Key<'a>>,
    /// The artifact_ids after the first, of the keys that have more than one, by key.
    more: HashMap<u32, Vec<&'a str>>,
    /// Each key's place in `keys`, found by the hash of its idem_key.
    index: HashTable<u32>,
}

/// Where a key was found: its part, and its place among the part's keys.
type Found = (u8, u32);

/// Which of `parts` parts an idem_key of hash `hash` is in: bits the hash table leaves alone (it
/// places a key by the low bits and tells keys apart by the top seven).
fn part_of(hash: u64, parts: usize) -> usize {
    ((hash >> 32) as u32 as usize) % parts
}

impl<'a> Part<'a> {
    /// The keys of part `part` of `parts` in `columns` (each batch's idem_key and artifact_id),
    /// `rows` attempts in all.
    fn find(
        columns: &[(&'a StringArray, &'a StringArray)],
        hasher: &DefaultHashBuilder,
        parts: usize,
        part: usize,
        rows: usize,
    ) -> Part<'a> {
        let mut index: HashTable<u32> = HashTable::with_capacity(rows / parts + 1);
        let mut keys: Vec<Key<'a>> = Vec::with_capacity(rows / parts + 1);
        let mut more: HashMap<u32, Vec<&'a str>> = HashMap::default();
        // The key of the row before, and its place here if it is this part's: a job's attempts
        // come together, in key order, and usually share one idem_key, which then needs no hash
        // and no probe.
        let mut last: Option<(&str, Option<u32>)> = None;
        for (batch, (idem_key, artifact_id)) in columns.iter().enumerate() {
            for i in 0..idem_key.len() {
                if !artifact_id.is_valid(i) {
                    continue;
                }
                let (key, artifact) = (idem_key.value(i), artifact_id.value(i));
                let local = match last {
                    Some((k, local)) if k == key => local,
                    _ => {
                        let hash = hasher.hash_one(key);
                        if part_of(hash, parts) != part {
                            None
                        } else {
                            Some(match index.find(hash, |&k| keys[k as usize].idem_key == key).copied() {
                                Some(local) => local,
                                None => {
                                    let local = keys.len() as u32;
                                    index.insert_unique(hash, local, |&k| hasher.hash_one(keys[k as usize].idem_key));
                                    keys.push(Key {
                                        idem_key: key,
                                        batch: batch as u32,
                                        row: i as u32,
                                    });
                                    local
                                }
                            })
                        }
                    }
                };
                last = Some((key, local));
                let Some(local) = local else { continue };
                let first = &keys[local as usize];
                if columns[first.batch as usize].1.value(first.row as usize) != artifact {
                    let others = more.entry(local).or_default();
                    if !others.contains(&artifact) {
                        others.push(artifact);
                    }
                }
            }
        }
        Part { keys, more, index }
    }
}

/// The `idem_artifacts` rows of `attempts` (`job_attempt` batches), one per idem_key that has at
/// least one non-NULL artifact_id, in the order each key first appears, in batches of at most
/// [`BATCH_ROWS`] rows (at least one, possibly empty).
///
/// Errors: a batch without `job_attempt`'s columns ([`crate::Error::Internal`]).
pub fn idem_artifacts(attempts: &[RecordBatch]) -> Result<Vec<RecordBatch>> {
    State::compute(attempts, Cursor::default())?.batches()
}

/// `idem_artifacts` kept from one query to the next in a session: after a write it is brought up
/// to date from the rows the write inserted or completed ([`AttemptCache::columns_since`]) instead
/// of being computed again from every attempt, which takes about a second at 10 M attempts. The
/// distinct artifacts of an idem_key only grow between retention sweeps (a completion adds an
/// artifact_id that was NULL, a changed one is a conflict and leaves the row alone), so a changed
/// row only ever adds its artifact_id to its key's set. After a sweep, or when the cache read
/// everything again, the table is computed whole.
#[derive(Default)]
pub struct IdemArtifactsMemo {
    state: Mutex<Option<State>>,
    /// Whole computations so far.
    computes: std::sync::atomic::AtomicU64,
}

impl IdemArtifactsMemo {
    /// The table as of the attempt cache's columns now: brought up to date from the rows merged
    /// since it was last asked for, or computed whole. Batches of at most [`BATCH_ROWS`] rows;
    /// the keys a write added come after the others. Errors: the cache's read errors.
    pub fn table(&self, attempts: &AttemptCache) -> Result<Vec<RecordBatch>> {
        let mut state = crate::engine::cache_lock::lock_or_reset(&self.state, || None);
        let since = state.as_ref().map(|s| s.cursor);
        let (columns, cursor, changes) = attempts.columns_since(&job_attempt::ROLLUP_COLUMNS, since)?;
        match (state.as_mut(), changes) {
            (Some(held), Some(rows)) if held.fits(rows.len()) => {
                held.apply(&rows);
                held.cursor = cursor;
            }
            _ => {
                self.computes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                *state = Some(State::compute(&columns, cursor)?)
            }
        }
        state.as_ref().expect("just set").batches()
    }

    /// How many times the table was computed whole, instead of brought up to date.
    pub fn computes(&self) -> u64 {
        self.computes.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The table as arrays cut in batches of [`BATCH_ROWS`] rows, all but the last full, so that row
/// `r` is row `r % BATCH_ROWS` of batch `r / BATCH_ROWS`; with what updating it takes.
struct State {
    /// The attempt cache's columns this table was computed from.
    cursor: Cursor,
    idem_key: Vec<StringArray>,
    artifacts: Vec<Int64Array>,
    /// Each key's first artifact_id.
    first: Vec<StringArray>,
    /// The artifact_ids after the first, of the keys that have more than one, by row.
    more: HashMap<u32, Vec<Box<str>>>,
    /// Each key's row, found by the hash of its idem_key: one table per part of the hashes
    /// ([`part_of`]).
    index: Vec<HashTable<u32>>,
    hasher: DefaultHashBuilder,
}

/// The idem_key of row `row` of a table of `held` rows in `keys`, then `added` (key, first
/// artifact) pairs.
fn key_of<'a>(keys: &'a [StringArray], held: usize, added: &[(&'a str, &'a str)], row: u32) -> &'a str {
    let row = row as usize;
    match row.checked_sub(held) {
        Some(i) => added[i].0,
        None => keys[row / BATCH_ROWS].value(row % BATCH_ROWS),
    }
}

impl State {
    /// The table of `attempts`, computed whole, standing at `cursor`. The idem_keys are shared out
    /// by hash among [`parallel::workers`] parts, each found by its own thread in one pass over
    /// the attempts with its own hash table (at 10 M attempts of random ids one pass over one table
    /// of 7 M keys, each probe a miss of the CPU's caches, took about two seconds on one core
    /// after the scan). The rows are then put in the order each key first appears, as one pass
    /// would give them.
    fn compute(attempts: &[RecordBatch], cursor: Cursor) -> Result<State> {
        let rows: usize = attempts.iter().map(RecordBatch::num_rows).sum();
        if u32::try_from(rows).is_err() {
            return Err(crate::Error::Internal("idem_artifacts: more than 2^32 attempts".into()));
        }
        let hasher = DefaultHashBuilder::default();
        let columns = attempts
            .iter()
            .map(|batch| {
                let column = |name: &str| job_attempt::column(batch, name);
                Ok((
                    column("idem_key")?.as_string::<i32>(),
                    column("artifact_id")?.as_string::<i32>(),
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let parts: Vec<usize> = (0..parallel::workers()).collect();
        let found = parallel::map(&parts, |&part| {
            Ok(Part::find(&columns, &hasher, parts.len(), part, rows))
        })?;
        // Each part's keys are in the order they first appear; merged by that place, they are
        // numbered as one pass would number them.
        let mut order: Vec<Found> = Vec::with_capacity(found.iter().map(|p| p.keys.len()).sum());
        let mut next = vec![0usize; found.len()];
        let mut global: Vec<Vec<u32>> = found.iter().map(|p| vec![0; p.keys.len()]).collect();
        while let Some(part) = (0..found.len())
            .filter(|&p| next[p] < found[p].keys.len())
            .min_by_key(|&p| {
                let k = &found[p].keys[next[p]];
                (k.batch, k.row)
            })
        {
            global[part][next[part]] = order.len() as u32;
            order.push((part as u8, next[part] as u32));
            next[part] += 1;
        }
        let mut state = State {
            cursor,
            idem_key: Vec::new(),
            artifacts: Vec::new(),
            first: Vec::new(),
            more: HashMap::default(),
            index: Vec::with_capacity(found.len()),
            hasher,
        };
        let mut counts = vec![1i64; order.len()];
        for (p, global) in found.iter().zip(&global) {
            for (&local, others) in &p.more {
                let row = global[local as usize];
                counts[row as usize] += others.len() as i64;
                state.more.insert(row, others.iter().map(|&a| a.into()).collect());
            }
        }
        let key = |&(part, local): &Found| &found[part as usize].keys[local as usize];
        let batches: Vec<(&[Found], &[i64])> = order.chunks(BATCH_ROWS).zip(counts.chunks(BATCH_ROWS)).collect();
        let built = parallel::map(&batches, |&(chunk, counts)| {
            // Each key's idem_key, and the artifact_id of the attempt where it first appears.
            let (mut keys, mut firsts) = (StringBuilder::new(), StringBuilder::new());
            for o in chunk {
                let k = key(o);
                keys.append_value(k.idem_key);
                firsts.append_value(columns[k.batch as usize].1.value(k.row as usize));
            }
            Ok((keys.finish(), firsts.finish(), Int64Array::from(counts.to_vec())))
        })?;
        for (keys, first, counts) in built {
            state.idem_key.push(keys);
            state.first.push(first);
            state.artifacts.push(counts);
        }
        // Each part's table now holds the rows' numbers in the whole table.
        for (p, global) in found.into_iter().zip(&global) {
            let mut index = p.index;
            index.iter_mut().for_each(|local| *local = global[*local as usize]);
            state.index.push(index);
        }
        Ok(state)
    }

    /// Rows held.
    fn rows(&self) -> usize {
        self.idem_key.iter().map(Array::len).sum()
    }

    /// Whether `more` rows can be added with rows still numbered in a u32.
    fn fits(&self, more: usize) -> bool {
        u32::try_from(self.rows() + more).is_ok()
    }

    /// Adds what `changed` (attempt rows in force as a write left them) bring: each non-NULL
    /// artifact_id not yet among its idem_key's, as one more artifact of that key, or as a new
    /// row (after the others) for a key not seen before.
    fn apply(&mut self, changed: &[StoredAttempt]) {
        let held = self.rows();
        let State {
            idem_key,
            artifacts,
            first,
            more,
            index,
            hasher,
            ..
        } = self;
        // New keys with their first artifact, and their counts.
        let mut added: Vec<(&str, &str)> = Vec::new();
        let mut added_counts: Vec<i64> = Vec::new();
        // Batches whose counts changed, as copies of their counts.
        let mut counts: std::collections::BTreeMap<usize, Vec<i64>> = Default::default();
        for row in changed {
            let (key, Some(artifact)) = (row.attempt.idem_key.as_str(), row.attempt.artifact_id.as_deref()) else {
                continue;
            };
            let hash = hasher.hash_one(key);
            let parts = index.len();
            let index = &mut index[part_of(hash, parts)];
            match index.find(hash, |&r| key_of(idem_key, held, &added, r) == key).copied() {
                Some(r) => {
                    let r_ = r as usize;
                    let first = match r_.checked_sub(held) {
                        Some(i) => added[i].1,
                        None => first[r_ / BATCH_ROWS].value(r_ % BATCH_ROWS),
                    };
                    if first == artifact || more.get(&r).is_some_and(|o| o.iter().any(|a| &**a == artifact)) {
                        continue;
                    }
                    more.entry(r).or_default().push(artifact.into());
                    match r_.checked_sub(held) {
                        Some(i) => added_counts[i] += 1,
                        None => {
                            let batch = r_ / BATCH_ROWS;
                            counts
                                .entry(batch)
                                .or_insert_with(|| artifacts[batch].values().to_vec())[r_ % BATCH_ROWS] += 1
                        }
                    }
                }
                None => {
                    let r = (held + added.len()) as u32;
                    index.insert_unique(hash, r, |&r| hasher.hash_one(key_of(idem_key, held, &added, r)));
                    added.push((key, artifact));
                    added_counts.push(1);
                }
            }
        }
        for (batch, c) in counts {
            artifacts[batch] = Int64Array::from(c);
        }
        if added.is_empty() {
            return;
        }
        // The new rows fill the last batch, then make new ones.
        let fresh_keys = StringArray::from_iter_values(added.iter().map(|a| a.0));
        let fresh_first = StringArray::from_iter_values(added.iter().map(|a| a.1));
        let fresh_counts = Int64Array::from(added_counts);
        let last_full = idem_key.last().is_none_or(|k| k.len() == BATCH_ROWS);
        let (keys, firsts, counts): (ArrayRef, ArrayRef, ArrayRef) = if last_full {
            (Arc::new(fresh_keys), Arc::new(fresh_first), Arc::new(fresh_counts))
        } else {
            let cat = |a: &dyn Array, b: &dyn Array| concat(&[a, b]).expect("arrays of one type");
            (
                cat(&idem_key.pop().expect("a last batch"), &fresh_keys),
                cat(&first.pop().expect("a last batch"), &fresh_first),
                cat(&artifacts.pop().expect("a last batch"), &fresh_counts),
            )
        };
        for at in (0..keys.len()).step_by(BATCH_ROWS) {
            let len = BATCH_ROWS.min(keys.len() - at);
            idem_key.push(keys.slice(at, len).as_string::<i32>().clone());
            first.push(firsts.slice(at, len).as_string::<i32>().clone());
            artifacts.push(counts.slice(at, len).as_primitive::<Int64Type>().clone());
        }
    }

    /// The table as record batches (at least one, possibly empty).
    fn batches(&self) -> Result<Vec<RecordBatch>> {
        let schema = schema();
        let mut out = Vec::with_capacity(self.idem_key.len().max(1));
        for (keys, counts) in self.idem_key.iter().zip(&self.artifacts) {
            let cols: Vec<ArrayRef> = vec![Arc::new(keys.clone()), Arc::new(counts.clone())];
            out.push(RecordBatch::try_new(schema.clone(), cols).map_err(datafusion::error::DataFusionError::from)?);
        }
        if out.is_empty() {
            out.push(RecordBatch::new_empty(schema));
        }
        Ok(out)
    }
}

/// The analyzer rule that reads [`TABLE`] for `SELECT idem_key, COUNT(DISTINCT artifact_id) …
/// FROM job_attempt WHERE artifact_id IS NOT NULL GROUP BY idem_key` (see the module docs). Any
/// other shape (another filter, another aggregate beside it, a join) is left as it is.
#[derive(Debug)]
pub struct IdemArtifactsRule {
    table: Arc<dyn TableProvider>,
}

impl IdemArtifactsRule {
    /// A rule that reads `table` (the session's registered [`TABLE`]).
    pub fn new(table: Arc<dyn TableProvider>) -> Self {
        IdemArtifactsRule { table }
    }

    fn rewrite(&self, plan: LogicalPlan) -> datafusion::error::Result<Transformed<LogicalPlan>> {
        let LogicalPlan::Aggregate(agg) = &plan else {
            return Ok(Transformed::no(plan));
        };
        if !(is_column(&agg.group_expr, "idem_key") && is_count_distinct_artifact(&agg.aggr_expr)) {
            return Ok(Transformed::no(plan));
        }
        let LogicalPlan::Filter(filter) = agg.input.as_ref() else {
            return Ok(Transformed::no(plan));
        };
        let not_null = matches!(&filter.predicate, Expr::IsNotNull(e) if matches!(e.as_ref(), Expr::Column(c) if c.name == "artifact_id"));
        let LogicalPlan::TableScan(scan) = filter.input.as_ref() else {
            return Ok(Transformed::no(plan));
        };
        if !(not_null && scan.table_name.table() == "job_attempt" && scan.filters.is_empty() && scan.fetch.is_none()) {
            return Ok(Transformed::no(plan));
        }
        let source = LogicalPlanBuilder::scan(TABLE, provider_as_source(self.table.clone()), None)?.build()?;
        let (q0, f0) = agg.schema.qualified_field(0);
        let (q1, f1) = agg.schema.qualified_field(1);
        let exprs = vec![
            Expr::Column(Column::new(Some(TABLE), "idem_key")).alias_qualified(q0.cloned(), f0.name()),
            Expr::Column(Column::new(Some(TABLE), "artifacts")).alias_qualified(q1.cloned(), f1.name()),
        ];
        Ok(Transformed::yes(LogicalPlan::Projection(Projection::try_new(
            exprs,
            Arc::new(source),
        )?)))
    }
}

/// `exprs` is exactly one column named `name`.
fn is_column(exprs: &[Expr], name: &str) -> bool {
    matches!(exprs, [Expr::Column(c)] if c.name == name)
}

/// `exprs` is exactly `COUNT(DISTINCT artifact_id)`, with no FILTER and no ORDER BY.
fn is_count_distinct_artifact(exprs: &[Expr]) -> bool {
    let [Expr::AggregateFunction(AggregateFunction { func, params })] = exprs else {
        return false;
    };
    func.name() == "count"
        && params.distinct
        && params.filter.is_none()
        && params.order_by.is_empty()
        && is_column(&params.args, "artifact_id")
}

impl AnalyzerRule for IdemArtifactsRule {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> datafusion::error::Result<LogicalPlan> {
        Ok(plan.transform_up_with_subqueries(|p| self.rewrite(p))?.data)
    }

    fn name(&self) -> &str {
        "idem_artifacts"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Job `j-{job}`'s first attempt, with idem_key `k-{idem}` and artifact `a-{artifact}`.
    fn row(job: usize, idem: usize, artifact: Option<usize>) -> StoredAttempt {
        let mut r = job_attempt::tests::stored(&format!("j-{job:06}"), 1, 0);
        r.attempt.idem_key = format!("k-{idem:06}");
        r.attempt.artifact_id = artifact.map(|a| format!("a-{a}"));
        r
    }

    /// The table's rows, sorted, as (idem_key, artifacts).
    fn sorted(batches: &[RecordBatch]) -> Vec<(String, i64)> {
        let mut out: Vec<(String, i64)> = batches
            .iter()
            .flat_map(|b| {
                let keys = b.column(0).as_string::<i32>();
                let counts = b.column(1).as_primitive::<Int64Type>();
                (0..b.num_rows())
                    .map(|i| (keys.value(i).to_string(), counts.value(i)))
                    .collect::<Vec<_>>()
            })
            .collect();
        out.sort();
        out
    }

    /// A table brought up to date from changed rows equals the table computed whole from every
    /// row: a new key, a new artifact of a held key (one artifact, or more), an artifact already
    /// held (under the same row again, or another row), a row without artifact that a completion
    /// later gives one, new keys filling the last batch and starting new ones.
    #[test]
    fn a_table_brought_up_to_date_equals_the_table_computed_whole() {
        // 70,000 keys: the first batch full, the second not.
        let mut held: Vec<StoredAttempt> = (0..70_000).map(|i| row(i, i, Some(i))).collect();
        held.push(row(70_000, 5, Some(99))); // key 5 holds two artifacts
        held.push(row(70_001, 70_001, None)); // no artifact yet: no row
        let changed: Vec<StoredAttempt> = [
            row(80_000, 7, Some(7)),      // an artifact key 7 holds: nothing changes
            row(80_001, 7, Some(8)),      // a second artifact for key 7, in the first batch
            row(80_002, 69_999, Some(1)), // and for a key in the second batch
            row(80_003, 5, Some(99)),     // an artifact key 5 holds among its others
            row(80_004, 5, Some(100)),    // a third for key 5
            row(70_001, 70_001, Some(3)), // the completion gives the open row its artifact
            row(80_005, 90_000, None),    // a new key without artifact: no row
        ]
        .into_iter()
        .chain((0..70_000).map(|i| row(100_000 + i, 200_000 + i, Some(i)))) // new keys past the batch
        .chain([row(80_002, 69_999, Some(1)), row(80_006, 200_001, Some(5))]) // a row again; a new key's second artifact
        .collect();

        let before = job_attempt::to_batches(&held).unwrap();
        let mut state = State::compute(&before, Cursor::default()).unwrap();
        state.apply(&changed);

        let mut all = held.clone();
        all.retain(|r| r.attempt.job_id != "j-070001");
        all.extend(changed.iter().cloned());
        all.sort_by(|a, b| (&a.attempt.job_id, a.attempt.attempt_no).cmp(&(&b.attempt.job_id, b.attempt.attempt_no)));
        all.dedup_by(|a, b| a.attempt.job_id == b.attempt.job_id && a.attempt.attempt_no == b.attempt.attempt_no);
        let whole = idem_artifacts(&job_attempt::to_batches(&all).unwrap()).unwrap();

        let updated = state.batches().unwrap();
        assert_eq!(sorted(&updated), sorted(&whole));
        let counts: std::collections::HashMap<String, i64> = sorted(&updated).into_iter().collect();
        assert_eq!(counts["k-000005"], 3);
        assert_eq!(counts["k-000007"], 2);
        assert_eq!(counts["k-069999"], 2);
        assert_eq!(counts["k-070001"], 1);
        assert_eq!(counts["k-200001"], 2);
        assert!(!counts.contains_key("k-090000"));
        assert_eq!(counts.len(), 70_000 + 1 + 70_000);
        // Every batch but the last is full, so rows keep their numbers.
        let sizes: Vec<usize> = updated.iter().map(RecordBatch::num_rows).collect();
        assert_eq!(sizes, [BATCH_ROWS, BATCH_ROWS, 140_001 - 2 * BATCH_ROWS]);
        // Brought up to date again with the same rows: nothing changes.
        state.apply(&changed);
        assert_eq!(sorted(&state.batches().unwrap()), sorted(&whole));
    }
}
