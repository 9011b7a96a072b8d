//! The DataFusion session over the ledger: tables, views, SQLite's `SUM`, and the one door for
//! user SQL, which is read-only.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::execution::context::{SQLOptions, SessionConfig, SessionContext};
use laneledger_store::{LaneConfig, Ledger};

use crate::error::{Error, Result};
use crate::ledger_table::{LedgerTable, ReadFn};
use crate::sqlite_sum::sqlite_sum;
use crate::views::VIEWS;
use crate::{attempt_conflict, decision_conflict, gate_decision, ingest_reject, job_attempt};

/// The tables every session has: (name, one-line description).
pub const TABLES: [(&str, &str); 5] = [
    (
        "job_attempt",
        "one row per attempt: seed 000's columns, then refusal detail, error_kind, attrs, ingested_at",
    ),
    (
        "attempt_conflict",
        "attempt records that differed from the row in force, with the differing field names",
    ),
    (
        "gate_decision",
        "one row per admission decision (seed 003), with dwell_s and expected_decision",
    ),
    (
        "decision_conflict",
        "decision records that differed from the row in force, with the differing field names",
    ),
    (
        "ingest_reject",
        "lines that could not be read, with source, line, field and reason",
    ),
];

/// A query's answer: its schema and its rows as Arrow batches.
#[derive(Debug, Clone)]
pub struct QueryResult {
    /// The result schema.
    pub schema: SchemaRef,
    /// The rows.
    pub batches: Vec<RecordBatch>,
}

impl QueryResult {
    /// The number of rows.
    pub fn num_rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }
}

/// A DataFusion session whose tables read the ledger afresh at every query.
#[derive(Clone)]
pub struct Session {
    ctx: SessionContext,
    ledger: Ledger,
    config: Arc<LaneConfig>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("ledger", &self.ledger).finish()
    }
}

fn read_only() -> SQLOptions {
    SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false)
}

impl Session {
    /// A session with the seeds' settings ([`LaneConfig::default`]).
    pub async fn new(ledger: Ledger) -> Result<Self> {
        Self::with_config(ledger, LaneConfig::default()).await
    }

    /// Registers `job_attempt`, `attempt_conflict`, `ingest_reject`, the audit tables of
    /// [`crate::audits`] with `config`'s settings, SQLite's `SUM`, and the views of
    /// [`crate::views`] (seed 000's `job_rollup` from its own `CREATE VIEW` text).
    pub async fn with_config(ledger: Ledger, config: LaneConfig) -> Result<Self> {
        let df_config = SessionConfig::new().with_information_schema(true);
        let ctx = SessionContext::new_with_config(df_config);
        ctx.register_udaf(sqlite_sum());
        let tables: Vec<(&str, SchemaRef, ReadFn)> = vec![
            ("job_attempt", job_attempt::schema(), Arc::new(job_attempt::scan)),
            (
                "attempt_conflict",
                attempt_conflict::schema(),
                Arc::new(attempt_conflict::scan),
            ),
            ("ingest_reject", ingest_reject::schema(), Arc::new(ingest_reject::scan)),
            ("gate_decision", gate_decision::schema(), {
                let gate = config.gate.clone();
                gate_decision::read_fn(move || gate_decision::GateDefaults {
                    max_queue_age_s: gate.max_queue_age_s,
                    reserved_service_s: gate.reserved_service_s,
                })
            }),
            (
                "decision_conflict",
                decision_conflict::schema(),
                Arc::new(decision_conflict::scan),
            ),
        ];
        for (name, schema, read) in tables {
            ctx.register_table(name, Arc::new(LedgerTable::new(schema, ledger.clone(), read)))?;
        }
        crate::audits::register(&ctx, &ledger, &crate::audits::AuditSettings::from(&config))?;
        for (_, sql) in VIEWS {
            ctx.sql(sql).await?.collect().await?;
        }
        crate::audits::create_views(&ctx).await?;
        Ok(Session {
            ctx,
            ledger,
            config: Arc::new(config),
        })
    }

    /// The lane.yaml settings this session applies.
    pub fn config(&self) -> &LaneConfig {
        &self.config
    }

    /// seed 003's freeze threshold from the config's `gate.free_admit_miss_rate`.
    pub fn gate_thresholds(&self) -> crate::gate_metrics::GateThresholds {
        crate::gate_metrics::GateThresholds::from(self.config.as_ref())
    }

    /// seed 000's alert thresholds from the config's `alerts`.
    pub fn thresholds(&self) -> crate::metrics::Thresholds {
        crate::metrics::Thresholds::from(self.config.as_ref())
    }

    /// The ledger this session reads.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Runs one user statement, read-only: DDL, DML, `COPY` and `SET` are refused with
    /// [`Error::ReadOnly`], and more than one statement is a [`Error::Plan`] error.
    pub async fn query(&self, sql: &str) -> Result<QueryResult> {
        let plan = self.ctx.state().create_logical_plan(sql).await?;
        read_only()
            .verify_plan(&plan)
            .map_err(|e| Error::ReadOnly(e.strip_backtrace()))?;
        let df = self.ctx.execute_logical_plan(plan).await?;
        let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
        let batches = df.collect().await?;
        Ok(QueryResult { schema, batches })
    }
}
