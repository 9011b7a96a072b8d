//! A DataFusion table over the ledger. A scan reads a fresh redb snapshot whenever the ledger has
//! committed a write since the last one ([`Ledger::generation`]), so an acknowledged record is in
//! the next query's answer; otherwise it reuses the Arrow batches it already built.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::expressions::col;
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::ExecutionPlan;
use laneledger_store::Ledger;

use crate::error::Result;

/// Reads one table's rows out of the ledger (at each scan, from a fresh read transaction).
pub type ReadFn = Arc<dyn Fn(&Ledger) -> Result<Vec<RecordBatch>> + Send + Sync>;

/// One ledger table (`job_attempt`, `attempt_conflict`, an audit…) as a [`TableProvider`].
pub struct LedgerTable {
    schema: SchemaRef,
    ledger: Ledger,
    read: ReadFn,
    /// The batches of the last scan, under the ledger generation they were read at.
    cache: Mutex<Option<(u64, Arc<Vec<RecordBatch>>)>>,
    /// Columns the rows are sorted by (ascending), as the read function guarantees.
    order: Vec<&'static str>,
}

impl LedgerTable {
    /// A table with `schema` whose rows `read` takes from `ledger` at each scan.
    pub fn new(schema: SchemaRef, ledger: Ledger, read: ReadFn) -> Self {
        LedgerTable {
            schema,
            ledger,
            read,
            cache: Mutex::new(None),
            order: Vec::new(),
        }
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

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        // Read the generation before the rows: a write that lands meanwhile bumps it, so the
        // cache entry is never newer than its rows claim.
        let generation = self.ledger.generation();
        let cached = self
            .cache
            .lock()
            .map_err(|_| DataFusionError::Internal("cache lock poisoned".into()))?
            .clone();
        let batches = match cached {
            Some((g, b)) if g == generation => b,
            _ => {
                let ledger = self.ledger.clone();
                let read = self.read.clone();
                // redb reads block: keep them off the async executor's threads.
                let b = Arc::new(
                    tokio::task::spawn_blocking(move || read(&ledger))
                        .await
                        .map_err(|e| DataFusionError::External(Box::new(e)))?
                        .map_err(|e| DataFusionError::External(Box::new(e)))?,
                );
                if let Ok(mut c) = self.cache.lock() {
                    *c = Some((generation, b.clone()));
                }
                b
            }
        };
        let mut source =
            MemorySourceConfig::try_new(&[batches.as_ref().clone()], self.schema.clone(), projection.cloned())?;
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
