//! A DataFusion table over the ledger. A scan reads a fresh redb snapshot whenever the ledger has
//! committed a write since the last one ([`Ledger::generation`]), so an acknowledged record is in
//! the next query's answer; otherwise it reuses the Arrow batches it already built.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::array::{BooleanArray, RecordBatch};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::TableProviderFilterPushDown;
use datafusion::physical_expr::expressions::col;
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::memory::{LazyBatchGenerator, LazyMemoryExec};
use laneledger_store::Ledger;

use crate::engine::read_floor::Floor;
use crate::error::Result;

/// Reads one table's rows out of the ledger (at each scan, from a fresh read transaction).
pub type ReadFn = Arc<dyn Fn(&Ledger) -> Result<Vec<RecordBatch>> + Send + Sync>;

/// Reads only some columns (indexes into the table's schema, in that order) of every row; the
/// batches' schema is that projection. The function keeps its own cache (see
/// [`crate::tables::job_attempt::AttemptCache`]).
pub type ProjectedReadFn = Arc<dyn Fn(&Ledger, &[usize]) -> Result<Vec<RecordBatch>> + Send + Sync>;

/// Reads the rows of one job (`job_id = '…'`) by a key-range read instead of a full scan.
pub type JobReadFn = Arc<dyn Fn(&Ledger, &str) -> Result<Vec<RecordBatch>> + Send + Sync>;

/// Builds only the rows of one ISO week (`iso_week = '2026-W47'`, the week of a row's job) of a
/// derived table, such as an audit, instead of every week's.
pub type WeekReadFn = Arc<dyn Fn(&Ledger, &str) -> Result<Vec<RecordBatch>> + Send + Sync>;

/// Reads only some columns (as [`ProjectedReadFn`]) of the rows of one ISO week
/// (`iso_week = '2026-W47'`), exactly those: the filter is the read's, not DataFusion's.
/// Each batch comes with the mask of the week's rows (`None`: all of them), applied as the scan
/// reads it.
pub type ProjectedWeekReadFn =
    Arc<dyn Fn(&Ledger, &[usize], &str) -> Result<Vec<(RecordBatch, Option<BooleanArray>)>> + Send + Sync>;

/// The batches of the last read, under the ledger generation they were read at and what they
/// were read for (a week, or `""` for every row).
type Cache = Mutex<Option<(u64, String, Arc<Vec<RecordBatch>>)>>;

/// One ledger table (`job_attempt`, `attempt_conflict`, an audit…) as a [`TableProvider`].
pub struct LedgerTable {
    schema: SchemaRef,
    ledger: Ledger,
    read: Read,
    /// The batches of the last whole scan.
    cache: Cache,
    /// Columns the rows are sorted by (ascending), as the read function guarantees.
    order: Vec<&'static str>,
    /// A point read for queries that fix `job_id` to one value.
    job_read: Option<JobReadFn>,
    /// A build of one week's rows for queries that fix `iso_week` to one value.
    week_read: Option<WeekReadFn>,
    /// The last week built by `week_read`.
    week_cache: Cache,
    /// A projected read of one week's rows, for queries that fix `iso_week` to one value.
    week_columns: Option<ProjectedWeekReadFn>,
}

/// How a table's rows are read.
enum Read {
    /// Whole rows, cached here per write generation.
    Whole(ReadFn),
    /// Only the columns a scan projects; the function keeps its own cache.
    Columns(ProjectedReadFn),
}

impl LedgerTable {
    /// A table with `schema` whose rows `read` takes from `ledger` at each scan.
    pub fn new(schema: SchemaRef, ledger: Ledger, read: ReadFn) -> Self {
        LedgerTable {
            schema,
            ledger,
            read: Read::Whole(read),
            cache: Mutex::new(None),
            order: Vec::new(),
            job_read: None,
            week_read: None,
            week_cache: Mutex::new(None),
            week_columns: None,
        }
    }

    /// A table with `schema` whose scans read only the columns they project, through `read`
    /// (which caches them; this table keeps no copy).
    pub fn projected(schema: SchemaRef, ledger: Ledger, read: ProjectedReadFn) -> Self {
        LedgerTable {
            schema,
            ledger,
            read: Read::Columns(read),
            cache: Mutex::new(None),
            order: Vec::new(),
            job_read: None,
            week_read: None,
            week_cache: Mutex::new(None),
            week_columns: None,
        }
    }

    /// Answers a scan whose filters include `job_id = '<literal>'` with `read` (that job's rows,
    /// from the primary key) instead of the whole table. DataFusion still applies the filter to
    /// the rows returned (the pushdown is `Inexact`), so `read` may return more rows, never fewer.
    pub fn with_job_read(mut self, read: JobReadFn) -> Self {
        self.job_read = Some(read);
        self
    }

    /// Answers a scan whose filters include `iso_week = '<literal>'` with `read` (the rows of that
    /// week only) instead of the whole table, and keeps the last week built until the next write.
    /// The pushdown is `Inexact`: DataFusion still applies the filter, so `read` may return more
    /// rows, never fewer.
    pub fn with_week_read(mut self, read: WeekReadFn) -> Self {
        self.week_read = Some(read);
        self
    }

    /// Answers a projected scan whose filters include `iso_week = '<literal>'` with `read`, which
    /// returns exactly the rows of that week: the pushdown is `Exact`, so DataFusion neither
    /// compares the labels nor sees the other weeks' rows.
    pub fn with_week_columns(mut self, read: ProjectedWeekReadFn) -> Self {
        self.week_columns = Some(read);
        self
    }

    /// Declares that `read` returns rows sorted ascending by `columns` (for `job_attempt`, the
    /// redb key order job_id, attempt_no), so `GROUP BY job_id` can stream instead of hashing.
    pub fn sorted_by(mut self, columns: &[&'static str]) -> Self {
        self.order = columns.to_vec();
        self
    }
}

impl std::fmt::Debug for LedgerTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LedgerTable")
            .field("schema", &self.schema)
            .field("ledger", &self.ledger)
            .finish()
    }
}

#[async_trait]
impl TableProvider for LedgerTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> datafusion::error::Result<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|f| {
                if self.week_columns.is_some() && literal_of(f, "iso_week").is_some() {
                    TableProviderFilterPushDown::Exact
                } else if (self.job_read.is_some() && literal_of(f, "job_id").is_some())
                    || (self.week_read.is_some() && literal_of(f, "iso_week").is_some())
                {
                    TableProviderFilterPushDown::Inexact
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        // A pinned statement's floor ([`crate::engine::read_floor`]); else the ledger's generation now.
        let floor = state.config().get_extension::<Floor>().map(|f| f.0);
        if let Some(read) = &self.job_read
            && let Some(job_id) = filters.iter().find_map(|f| literal_of(f, "job_id"))
        {
            let (ledger, read, job_id) = (self.ledger.clone(), read.clone(), job_id.to_string());
            let batches = blocking(floor, move || read(&ledger, &job_id)).await?;
            return self.source(state, batches, projection, limit);
        }
        if let Some(read) = &self.week_read
            && let Some(week) = filters.iter().find_map(|f| literal_of(f, "iso_week"))
        {
            let (ledger, read, w) = (self.ledger.clone(), read.clone(), week.to_string());
            let batches = cached(&self.ledger, floor, &self.week_cache, week, move || read(&ledger, &w)).await?;
            return self.source(state, batches.as_ref().clone(), projection, limit);
        }
        if let Some(read) = &self.week_columns {
            let mut weeks = filters.iter().filter_map(|f| literal_of(f, "iso_week"));
            if let Some(week) = weeks.next() {
                let columns: Vec<usize> = projection
                    .cloned()
                    .unwrap_or_else(|| (0..self.schema.fields().len()).collect());
                // Two different weeks at once hold no row; the read of one is as good an empty
                // answer as any, the other filtered out below.
                let (ledger, read, cols, w) = (self.ledger.clone(), read.clone(), columns.clone(), week.to_string());
                let mut batches = blocking(floor, move || read(&ledger, &cols, &w)).await?;
                if weeks.any(|other| other != week) {
                    batches.truncate(1);
                    batches.iter_mut().for_each(|(b, m)| (*b, *m) = (b.slice(0, 0), None));
                }
                return self.week_source(state, batches, &columns, limit);
            }
        }
        let read = match &self.read {
            Read::Whole(read) => read,
            Read::Columns(read) => {
                let columns: Vec<usize> = projection
                    .cloned()
                    .unwrap_or_else(|| (0..self.schema.fields().len()).collect());
                let (ledger, read, cols) = (self.ledger.clone(), read.clone(), columns.clone());
                let batches = blocking(floor, move || read(&ledger, &cols)).await?;
                return self.projected_source(state, batches, &columns, limit);
            }
        };
        let (ledger, read) = (self.ledger.clone(), read.clone());
        let batches = cached(&self.ledger, floor, &self.cache, "", move || read(&ledger)).await?;
        self.source(state, batches.as_ref().clone(), projection, limit)
    }
}

/// The batches `cache` holds for `key` when they reflect the read's floor (`floor`, else the
/// ledger's generation now: no write has landed since they were read); else `read`'s, kept in
/// `cache` in their place unless a newer entry took it meanwhile.
async fn cached(
    ledger: &Ledger,
    floor: Option<u64>,
    cache: &Cache,
    key: &str,
    read: impl FnOnce() -> Result<Vec<RecordBatch>> + Send + 'static,
) -> datafusion::error::Result<Arc<Vec<RecordBatch>>> {
    // Read the generation before the rows: a write that lands meanwhile bumps it, so the cache
    // entry is never newer than its rows claim. A pinned read labels its entry with its floor,
    // which its rows reflect at least.
    let label = floor.unwrap_or_else(|| ledger.generation());
    let lock = || crate::engine::cache_lock::lock_or_reset(cache, || None);
    if let Some((g, k, b)) = lock().as_ref()
        && *g >= label
        && k == key
    {
        return Ok(b.clone());
    }
    let batches = Arc::new(blocking(floor, read).await?);
    let mut entry = lock();
    if entry.as_ref().is_none_or(|(g, k, _)| *g <= label || k != key) {
        *entry = Some((label, key.to_string(), batches.clone()));
    }
    Ok(batches)
}

/// Runs a ledger read on tokio's blocking threads (redb reads block, and must not hold up the
/// async executor's threads), at `floor` ([`crate::engine::read_floor::with_floor`]).
async fn blocking<T: Send + 'static>(
    floor: Option<u64>,
    read: impl FnOnce() -> Result<T> + Send + 'static,
) -> datafusion::error::Result<T> {
    tokio::task::spawn_blocking(move || crate::engine::read_floor::with_floor(floor, read))
        .await
        .map_err(|e| DataFusionError::External(Box::new(e)))?
        .map_err(|e| DataFusionError::External(Box::new(e)))
}

impl LedgerTable {
    /// `batches` of the projected `columns` (indexes into the schema) as in-memory partitions
    /// ([`scan_partitions`]); the declared order holds in each for the longest prefix of its
    /// columns that was read.
    fn projected_source(
        &self,
        state: &dyn Session,
        batches: Vec<RecordBatch>,
        columns: &[usize],
        limit: Option<usize>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        let schema = Arc::new(self.schema.project(columns)?);
        let parts = scan_partitions(batches, state, limit);
        let mut source = MemorySourceConfig::try_new(&parts, schema.clone(), None)?;
        if let Some(ordering) = self.ordering_of(&schema) {
            source = source.try_with_sort_information(vec![ordering])?;
        }
        Ok(DataSourceExec::from_data_source(source))
    }

    /// The declared order that holds in a projection of the table (`schema`): the longest prefix
    /// of its columns that was read; `None` when the first was not.
    fn ordering_of(&self, schema: &SchemaRef) -> Option<LexOrdering> {
        let sort: Vec<PhysicalSortExpr> = self
            .order
            .iter()
            .map_while(|c| col(c, schema).ok().map(PhysicalSortExpr::new_default))
            .collect();
        LexOrdering::new(sort)
    }

    /// [`LedgerTable::projected_source`] of batches each with the mask of the rows it gives
    /// ([`MaskedBatches`]), applied a batch at a time as the plan reads them.
    fn week_source(
        &self,
        state: &dyn Session,
        batches: Vec<(RecordBatch, Option<BooleanArray>)>,
        columns: &[usize],
        limit: Option<usize>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        let schema = Arc::new(self.schema.project(columns)?);
        let target = state.config().target_partitions().max(1);
        // With a limit, one partition: the first rows in the table's order (see
        // [`scan_partitions`]).
        let parts = match limit {
            Some(_) => {
                let mut parts = vec![batches];
                parts.resize(target, Vec::new());
                parts
            }
            None => partitions_by(
                batches,
                |(b, m)| m.as_ref().map_or(b.num_rows(), BooleanArray::true_count),
                target,
            ),
        };
        let generators: Vec<Arc<parking_lot::RwLock<dyn LazyBatchGenerator>>> = parts
            .into_iter()
            .map(|p| Arc::new(parking_lot::RwLock::new(MaskedBatches::new(p))) as _)
            .collect();
        let mut exec = LazyMemoryExec::try_new(schema.clone(), generators)?;
        if let Some(ordering) = self.ordering_of(&schema) {
            exec.add_ordering(ordering);
        }
        Ok(Arc::new(exec))
    }

    /// `batches` (in the table's declared order) as in-memory partitions ([`scan_partitions`]).
    fn source(
        &self,
        state: &dyn Session,
        batches: Vec<RecordBatch>,
        projection: Option<&Vec<usize>>,
        limit: Option<usize>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        let parts = scan_partitions(batches, state, limit);
        let mut source = MemorySourceConfig::try_new(&parts, self.schema.clone(), projection.cloned())?;
        let sort: Vec<PhysicalSortExpr> = self
            .order
            .iter()
            .map(|c| Ok(PhysicalSortExpr::new_default(col(c, &self.schema)?)))
            .collect::<datafusion::error::Result<_>>()?;
        if let Some(ordering) = LexOrdering::new(sort) {
            source = source.try_with_sort_information(vec![ordering])?;
        }
        Ok(DataSourceExec::from_data_source(source))
    }
}

/// One scan partition of batches each with the mask of the rows it gives (`None`: all), in
/// order, filtered one batch at a time as DataFusion asks for the next: a filtered copy of every
/// batch is never held at once.
#[derive(Debug, Clone)]
pub struct MaskedBatches {
    batches: Arc<Vec<(RecordBatch, Option<BooleanArray>)>>,
    next: usize,
}

impl MaskedBatches {
    /// The partition of `batches`, from the first.
    pub fn new(batches: Vec<(RecordBatch, Option<BooleanArray>)>) -> Self {
        MaskedBatches {
            batches: Arc::new(batches),
            next: 0,
        }
    }
}

impl std::fmt::Display for MaskedBatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} batches, filtered as read", self.batches.len())
    }
}

impl LazyBatchGenerator for MaskedBatches {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn generate_next_batch(&mut self) -> datafusion::error::Result<Option<RecordBatch>> {
        let Some((batch, mask)) = self.batches.get(self.next) else {
            return Ok(None);
        };
        self.next += 1;
        Ok(Some(match mask {
            None => batch.clone(),
            Some(mask) => filter_record_batch(batch, mask)?,
        }))
    }

    fn reset_state(&self) -> Arc<parking_lot::RwLock<dyn LazyBatchGenerator>> {
        Arc::new(parking_lot::RwLock::new(MaskedBatches {
            batches: self.batches.clone(),
            next: 0,
        }))
    }
}

/// The partitions a scan hands DataFusion: with a `limit` (pushed down only when no filter is,
/// so `SELECT * FROM job_attempt LIMIT 10`), the first batches that hold that many rows in the
/// first partition and the others empty, so that the rows are the table's first ones, in its
/// order, every time (a lone partition would be dealt out again over the target partitions, and
/// the parts read back in whichever order they finish); else [`partitions`] for the session's
/// target partitions, which a read without `ORDER BY` may interleave.
fn scan_partitions(batches: Vec<RecordBatch>, state: &dyn Session, limit: Option<usize>) -> Vec<Vec<RecordBatch>> {
    let target = state.config().target_partitions();
    let Some(limit) = limit else {
        return partitions(batches, target);
    };
    let mut rows = 0;
    let first: Vec<RecordBatch> = batches
        .into_iter()
        .take_while(|b| {
            let more = rows < limit;
            rows += b.num_rows();
            more
        })
        .collect();
    let mut parts = vec![first];
    parts.resize(target.max(1), Vec::new());
    parts
}

/// `batches` cut into at most `n` partitions of consecutive batches with about as many rows
/// each, so that each partition keeps the table's order and a sorted read only merges them
/// (DataFusion would otherwise deal one partition's batches out itself, declare the order lost
/// and sort every row again: `ORDER BY job_id, attempt_no` over all of `job_attempt` ran out of
/// query memory at 1 M attempts).
fn partitions(batches: Vec<RecordBatch>, n: usize) -> Vec<Vec<RecordBatch>> {
    partitions_by(batches, RecordBatch::num_rows, n)
}

/// [`partitions`] of items of `rows_of(item)` rows each.
fn partitions_by<T>(batches: Vec<T>, rows_of: impl Fn(&T) -> usize, n: usize) -> Vec<Vec<T>> {
    let total: usize = batches.iter().map(&rows_of).sum();
    let n = n.clamp(1, batches.len().max(1));
    let mut parts: Vec<Vec<T>> = vec![Vec::new()];
    let mut rows = 0;
    for batch in batches {
        // Start the next partition once this one holds its share.
        let share = total.div_ceil(n) * parts.len();
        if rows >= share && parts.len() < n && !parts.last().is_some_and(Vec::is_empty) {
            parts.push(Vec::new());
        }
        rows += rows_of(&batch);
        parts.last_mut().expect("one at least").push(batch);
    }
    parts
}

/// The value of a `<column> = '<literal>'` (or `'<literal>' = <column>`) filter.
fn literal_of<'e>(e: &'e Expr, column: &str) -> Option<&'e str> {
    use datafusion::logical_expr::{BinaryExpr, Operator};
    let Expr::BinaryExpr(BinaryExpr {
        left,
        op: Operator::Eq,
        right,
    }) = e
    else {
        return None;
    };
    value_of(left, right, column).or_else(|| value_of(right, left, column))
}

/// `l`'s text when `c` is `column` and `l` a string literal.
fn value_of<'e>(c: &'e Expr, l: &'e Expr, column: &str) -> Option<&'e str> {
    use datafusion::scalar::ScalarValue;
    match (c, l) {
        (
            Expr::Column(col),
            Expr::Literal(
                ScalarValue::Utf8(Some(v)) | ScalarValue::LargeUtf8(Some(v)) | ScalarValue::Utf8View(Some(v)),
                _,
            ),
        ) if col.name == column => Some(v.as_str()),
        // A dictionary column's literal, as DataFusion's type coercion writes it.
        (Expr::Column(col), Expr::Literal(ScalarValue::Dictionary(_, v), _)) if col.name == column => {
            match v.as_ref() {
                ScalarValue::Utf8(Some(v)) | ScalarValue::LargeUtf8(Some(v)) | ScalarValue::Utf8View(Some(v)) => {
                    Some(v.as_str())
                }
                _ => None,
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    fn batch(from: i64, rows: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(from..from + rows))]).unwrap()
    }

    /// Partitions are runs of consecutive batches, in order, with about as many rows each.
    #[test]
    fn partitions_are_runs_of_consecutive_batches_of_about_equal_rows() {
        let sizes = |parts: &[Vec<RecordBatch>]| -> Vec<Vec<usize>> {
            parts
                .iter()
                .map(|p| p.iter().map(RecordBatch::num_rows).collect())
                .collect()
        };
        // (rows of each batch, partitions asked for, rows of each batch of each partition)
        type Case = (&'static [i64], usize, Vec<Vec<usize>>);
        let cases: [Case; 6] = [
            (&[], 2, vec![vec![]]),
            (&[10], 2, vec![vec![10]]),
            (&[10, 10], 2, vec![vec![10], vec![10]]),
            (&[10, 10, 10], 2, vec![vec![10, 10], vec![10]]),
            (
                &[65_536, 65_536, 65_536, 34_000],
                2,
                vec![vec![65_536, 65_536], vec![65_536, 34_000]],
            ),
            (&[5, 5, 5, 5], 1, vec![vec![5, 5, 5, 5]]),
        ];
        for (rows, n, expected) in cases {
            let mut from = 0;
            let batches: Vec<RecordBatch> = rows
                .iter()
                .map(|&r| {
                    from += r;
                    batch(from - r, r)
                })
                .collect();
            let parts = partitions(batches, n);
            assert_eq!(sizes(&parts), expected, "{rows:?} into {n}");
            let firsts: Vec<i64> = parts
                .iter()
                .flatten()
                .map(|b| b.column(0).as_any().downcast_ref::<Int64Array>().unwrap().value(0))
                .collect();
            assert!(
                firsts.windows(2).all(|w| w[0] < w[1]),
                "{rows:?}: batches keep their order"
            );
        }
    }
}
