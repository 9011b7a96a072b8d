//! A DataFusion table over the ledger: each scan reads a fresh redb snapshot, so an acknowledged
//! record is in the next query's answer.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::Expr;
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
}

impl LedgerTable {
    /// A table with `schema` whose rows `read` takes from `ledger` at each scan.
    pub fn new(schema: SchemaRef, ledger: Ledger, read: ReadFn) -> Self {
        LedgerTable { schema, ledger, read }
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
        let ledger = self.ledger.clone();
        let read = self.read.clone();
        // redb reads block: keep them off the async executor's threads.
        let batches = tokio::task::spawn_blocking(move || read(&ledger))
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))?
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        Ok(MemorySourceConfig::try_new_exec(
            &[batches],
            self.schema.clone(),
            projection.cloned(),
        )?)
    }
}
