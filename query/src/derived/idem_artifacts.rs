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
//! (an idem_key with no artifact has no row), computed whole by [`idem_artifacts`] from the cached
//! `job_attempt` batches, the keys shared out by hash among parts small enough for a core's cache.
//! [`IdemArtifactsRule`] is an analyzer rule: where a plan groups
//! `job_attempt` by `idem_key` alone, counts `DISTINCT artifact_id` alone, over
//! `WHERE artifact_id IS NOT NULL` alone, it reads `idem_artifacts` instead, under the same output
//! names. Seed 000's duplicates query (q2) has that shape; its text runs unchanged, and
//! `query/tests/sqlite_differential.rs` checks its answers against SQLite's.

use std::sync::Arc;

use std::hash::BuildHasher;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

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

/// The attempts a table is computed from, their rows numbered across the batches.
struct Rows<'a> {
    /// Each batch's idem_key and artifact_id.
    columns: Vec<(&'a StringArray, &'a StringArray)>,
    /// Where each batch's rows start, then the number of rows.
    starts: Vec<u32>,
}

impl<'a> Rows<'a> {
    /// The batch and the row in it of row `g`.
    fn at(&self, g: u32) -> (usize, usize) {
        let b = self.starts.partition_point(|&s| s <= g) - 1;
        (b, (g - self.starts[b]) as usize)
    }

    /// Row `g`'s idem_key.
    fn key(&self, g: u32) -> &'a str {
        let (b, i) = self.at(g);
        self.columns[b].0.value(i)
    }

    /// Row `g`'s artifact_id (a row with one).
    fn artifact(&self, g: u32) -> &'a str {
        let (b, i) = self.at(g);
        self.columns[b].1.value(i)
    }
}

/// Which of `parts` parts an idem_key of hash `hash` is in: bits the hash table leaves alone (it
/// places a key by the low bits and tells keys apart by the top seven).
fn part_of(hash: u64, parts: usize) -> usize {
    ((hash >> 32) as u32 as usize) % parts
}

/// How many parts the idem_keys of `rows` attempts with an artifact are shared out in: about
/// 32,768 attempts a part, so that each part's hash table stays in a core's cache (a table of
/// 7 M keys at 10 M attempts made nearly every probe a miss of the caches).
fn parts_for(rows: usize) -> usize {
    (rows / 32_768).next_power_of_two().clamp(1, 512)
}

/// The attempts with an artifact of a run of consecutive batches, dealt into parts by the hash
/// of their idem_key, each part's in row order: their hashes, and their rows.
struct Dealt {
    hashes: Vec<Vec<u64>>,
    rows: Vec<Vec<u32>>,
}

impl Dealt {
    /// Deals the attempts of `batches` among `parts` parts. A row with the idem_key and the
    /// artifact_id of the row dealt before it tells nothing new (a job's attempts come together
    /// and usually share both) and is left out; one with the same idem_key reuses its hash.
    fn deal(rows: &Rows, batches: std::ops::Range<usize>, parts: usize, hasher: &DefaultHashBuilder) -> Dealt {
        let with_artifact: usize = batches
            .clone()
            .map(|b| {
                let a = rows.columns[b].1;
                a.len() - a.null_count()
            })
            .sum();
        let each = parallel::share_room(with_artifact, parts);
        let mut dealt = Dealt {
            hashes: (0..parts).map(|_| Vec::with_capacity(each)).collect(),
            rows: (0..parts).map(|_| Vec::with_capacity(each)).collect(),
        };
        let mut last: Option<(&str, &str, u64)> = None;
        for b in batches {
            let (keys, artifacts) = rows.columns[b];
            for i in 0..keys.len() {
                if !artifacts.is_valid(i) {
                    continue;
                }
                let (key, artifact) = (keys.value(i), artifacts.value(i));
                let hash = match last {
                    Some((k, a, _)) if k == key && a == artifact => continue,
                    Some((k, _, hash)) if k == key => hash,
                    _ => hasher.hash_one(key),
                };
                last = Some((key, artifact, hash));
                let part = part_of(hash, parts);
                dealt.hashes[part].push(hash);
                dealt.rows[part].push(rows.starts[b] + i as u32);
            }
        }
        dealt
    }
}

/// The idem_keys of one part, as [`State::compute`] finds them.
struct Part<'a> {
    /// Each key's first row, in row order.
    firsts: Vec<u32>,
    /// Each key's place in `firsts` (then, once the keys are numbered, its row in the table),
    /// found by the hash of its idem_key.
    index: HashTable<u32>,
    /// The artifact_ids after the first, of the keys that have more than one, by place.
    more: HashMap<u32, Vec<&'a str>>,
}

impl<'a> Part<'a> {
    /// The keys of part `part` of what was `dealt` (in row order), and their artifacts. Marks each
    /// key's first row in `first_rows` (a bit a row).
    fn find(
        rows: &Rows<'a>,
        dealt: &[Dealt],
        part: usize,
        hasher: &DefaultHashBuilder,
        first_rows: &[AtomicU64],
    ) -> Part<'a> {
        let n = dealt.iter().map(|d| d.rows[part].len()).sum();
        let mut found = Part {
            firsts: Vec::new(),
            index: HashTable::with_capacity(n),
            more: HashMap::default(),
        };
        let Part { firsts, index, more } = &mut found;
        // A row's strings are read only when its hash matches a key's: a new key (most of them)
        // costs no read of the attempts.
        for d in dealt {
            for (&hash, &g) in d.hashes[part].iter().zip(&d.rows[part]) {
                match index
                    .find(hash, |&k| rows.key(firsts[k as usize]) == rows.key(g))
                    .copied()
                {
                    Some(k) => {
                        let artifact = rows.artifact(g);
                        if rows.artifact(firsts[k as usize]) != artifact {
                            let others = more.entry(k).or_default();
                            if !others.contains(&artifact) {
                                others.push(artifact);
                            }
                        }
                    }
                    None => {
                        let k = firsts.len() as u32;
                        index.insert_unique(hash, k, |&k| hasher.hash_one(rows.key(firsts[k as usize])));
                        firsts.push(g);
                        first_rows[g as usize / 64].fetch_or(1 << (g % 64), Ordering::Relaxed);
                    }
                }
            }
        }
        found
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
    /// The table of `attempts`, computed whole, standing at `cursor`. The attempts with an
    /// artifact are dealt into parts by the hash of their idem_key ([`parts_for`]), each core
    /// dealing a run of batches; then each part's keys are found with a hash table of its own,
    /// the parts spread over the cores ([`parallel::map`]). The keys are numbered in the order they
    /// first appear, as one pass over the attempts would number them.
    fn compute(attempts: &[RecordBatch], cursor: Cursor) -> Result<State> {
        let with_artifact = attempts
            .iter()
            .map(|b| job_attempt::column(b, "artifact_id").map(|a| a.len() - a.null_count()))
            .sum::<Result<usize>>()?;
        Self::compute_in(attempts, cursor, parts_for(with_artifact))
    }

    /// [`State::compute`] with the keys shared out in `parts` parts.
    fn compute_in(attempts: &[RecordBatch], cursor: Cursor, parts: usize) -> Result<State> {
        let rows: usize = attempts.iter().map(RecordBatch::num_rows).sum();
        let Ok(total) = u32::try_from(rows) else {
            return Err(crate::Error::Internal("idem_artifacts: more than 2^32 attempts".into()));
        };
        let hasher = DefaultHashBuilder::default();
        let mut starts = Vec::with_capacity(attempts.len() + 1);
        let mut at = 0u32;
        let columns = attempts
            .iter()
            .map(|batch| {
                starts.push(at);
                at += batch.num_rows() as u32;
                let column = |name: &str| job_attempt::column(batch, name);
                Ok((
                    column("idem_key")?.as_string::<i32>(),
                    column("artifact_id")?.as_string::<i32>(),
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        starts.push(total);
        let read = &Rows { columns, starts };

        // Runs of consecutive batches of about equal rows, one a core.
        let workers = parallel::workers();
        let mut runs: Vec<std::ops::Range<usize>> = Vec::with_capacity(workers);
        let mut from = 0;
        for b in 0..read.columns.len() {
            let done = read.starts[b + 1] as usize;
            if done * workers >= rows * (runs.len() + 1) || b + 1 == read.columns.len() {
                runs.push(from..b + 1);
                from = b + 1;
            }
        }
        let dealt = parallel::map(&runs, |run| Ok(Dealt::deal(read, run.clone(), parts, &hasher)))?;

        let first_rows: Vec<AtomicU64> = (0..(rows.div_ceil(64))).map(|_| AtomicU64::new(0)).collect();
        let ids: Vec<usize> = (0..parts).collect();
        let found = parallel::map(&ids, |&part| Ok(Part::find(read, &dealt, part, &hasher, &first_rows)))?;
        drop(dealt);

        // Key number of the first row of each word of `first_rows`: a key's number is how many
        // keys first appear before its first row.
        let words: Vec<u64> = first_rows.into_iter().map(AtomicU64::into_inner).collect();
        let mut ranks = Vec::with_capacity(words.len());
        let mut keys = 0u32;
        for w in &words {
            ranks.push(keys);
            keys += w.count_ones();
        }
        let number = |g: u32| {
            let w = g as usize / 64;
            ranks[w] + (words[w] & ((1u64 << (g % 64)) - 1)).count_ones()
        };

        let mut state = State {
            cursor,
            idem_key: Vec::new(),
            artifacts: Vec::new(),
            first: Vec::new(),
            more: HashMap::default(),
            index: Vec::with_capacity(parts),
            hasher,
        };
        // Each part's table now holds the keys' numbers in the table, each part on a core.
        let found: Vec<Mutex<Part>> = found.into_iter().map(Mutex::new).collect();
        parallel::map(&found, |p| {
            let mut p = p
                .lock()
                .map_err(|_| crate::Error::Internal("idem_artifacts: a part was poisoned".into()))?;
            let Part { firsts, index, .. } = &mut *p;
            index.iter_mut().for_each(|k| *k = number(firsts[*k as usize]));
            Ok(())
        })?;
        let mut counts = vec![1i64; keys as usize];
        for p in found {
            let p = p
                .into_inner()
                .map_err(|_| crate::Error::Internal("idem_artifacts: a part was poisoned".into()))?;
            for (k, others) in p.more {
                let row = number(p.firsts[k as usize]);
                counts[row as usize] += others.len() as i64;
                state.more.insert(row, others.into_iter().map(Box::from).collect());
            }
            state.index.push(p.index);
        }

        // The table's rows in batches of BATCH_ROWS: the first rows of the keys, in row order.
        let batch_starts: Vec<u32> = (0..keys).step_by(BATCH_ROWS).collect();
        let built = parallel::map(&batch_starts, |&start| {
            let end = (start as usize + BATCH_ROWS).min(keys as usize);
            let (mut idem_keys, mut firsts) = (StringBuilder::new(), StringBuilder::new());
            // The word holding key `start`'s first row, and the keys in it before that one.
            let mut w = ranks.partition_point(|&r| r <= start) - 1;
            let mut skip = start - ranks[w];
            let mut n = start as usize;
            // The batch of the row at hand: the rows come in order.
            let mut b = 0;
            while n < end {
                let mut bits = words[w];
                while bits != 0 && n < end {
                    let bit = bits.trailing_zeros();
                    bits &= bits - 1;
                    if skip > 0 {
                        skip -= 1;
                        continue;
                    }
                    let g = (w * 64) as u32 + bit;
                    while read.starts[b + 1] <= g {
                        b += 1;
                    }
                    let i = (g - read.starts[b]) as usize;
                    idem_keys.append_value(read.columns[b].0.value(i));
                    firsts.append_value(read.columns[b].1.value(i));
                    n += 1;
                }
                w += 1;
            }
            Ok((
                idem_keys.finish(),
                firsts.finish(),
                Int64Array::from(counts[start as usize..end].to_vec()),
            ))
        })?;
        for (keys, first, counts) in built {
            state.idem_key.push(keys);
            state.first.push(first);
            state.artifacts.push(counts);
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
        let mut out = in_order(batches);
        out.sort();
        out
    }

    /// The table's rows in their order, as (idem_key, artifacts).
    fn in_order(batches: &[RecordBatch]) -> Vec<(String, i64)> {
        let mut out = Vec::new();
        for b in batches {
            let keys = b.column(0).as_string::<i32>();
            let counts = b.column(1).as_primitive::<Int64Type>();
            out.extend((0..b.num_rows()).map(|i| (keys.value(i).to_string(), counts.value(i))));
        }
        out
    }

    /// However many parts the keys are shared out in, the table is the one a single pass over
    /// the attempts gives, row for row and in the order each key first appears: keys repeated
    /// next to each other and far apart, with the same artifact and others, rows without
    /// artifact, batches of every size (an empty one among them); and it is brought up to date
    /// from changed rows as before.
    #[test]
    fn the_keys_shared_out_in_any_number_of_parts_give_one_pass_s_table() {
        // A spread of keys and artifacts from a fixed generator.
        let mut rng = laneledger_store::drill::SplitMix64::new(7);
        let mut next = move |n: u64| rng.next_u64() % n;
        let mut rows = Vec::new();
        for job in 0..20_000 {
            let idem = match next(4) {
                0 => next(500) as usize, // a busy key, seen by many jobs
                _ => 1_000 + job,        // the job's own key
            };
            for attempt in 1..=1 + next(3) as u32 {
                let mut r = row(job, idem, None);
                r.attempt.attempt_no = attempt;
                r.attempt.artifact_id = match next(5) {
                    0 => None,
                    1 => Some(format!("a-{}", next(3))), // an artifact other jobs also name
                    _ => Some(format!("a-{job}")),
                };
                rows.push(r);
            }
        }
        // One pass, keys numbered as they first appear with an artifact.
        let mut expected: Vec<(String, Vec<String>)> = Vec::new();
        let mut place: std::collections::HashMap<String, usize> = Default::default();
        for r in &rows {
            let Some(a) = &r.attempt.artifact_id else { continue };
            let at = *place.entry(r.attempt.idem_key.clone()).or_insert_with(|| {
                expected.push((r.attempt.idem_key.clone(), Vec::new()));
                expected.len() - 1
            });
            if !expected[at].1.contains(a) {
                expected[at].1.push(a.clone());
            }
        }
        let expected: Vec<(String, i64)> = expected.into_iter().map(|(k, a)| (k, a.len() as i64)).collect();
        assert!(expected.iter().any(|(_, n)| *n > 2));

        let batches = job_attempt::tests::cut(&rows, &[1, 4_999, 0, 7_000, 12_345]);
        let changed = [row(30_000, 7, Some(9)), row(30_001, 99_999, Some(1))];
        for parts in [1, 2, 3, 8, 64] {
            let mut state = State::compute_in(&batches, Cursor::default(), parts).unwrap();
            assert_eq!(in_order(&state.batches().unwrap()), expected, "{parts} parts");
            state.apply(&changed);
            let after = in_order(&state.batches().unwrap());
            let seven = format!("k-{:06}", 7);
            let before_seven = expected.iter().find(|(k, _)| *k == seven).map_or(0, |(_, n)| *n);
            assert_eq!(
                after.iter().find(|(k, _)| *k == seven).unwrap().1,
                before_seven + 1,
                "{parts} parts"
            );
            assert_eq!(after.last().unwrap(), &(format!("k-{:06}", 99_999), 1), "{parts} parts");
            assert_eq!(
                after.len(),
                expected.len() + 1 + usize::from(before_seven == 0),
                "{parts} parts"
            );
        }
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
