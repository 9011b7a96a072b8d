//! `idem_artifacts`: the distinct artifacts of each idempotency key, materialized once per write
//! generation, and the plan rewrite that answers seed 000's second query from it.
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
//! (an idem_key with no artifact has no row), computed by [`idem_artifacts`] in one pass over the
//! cached `job_attempt` batches. [`IdemArtifactsRule`] is an analyzer rule: where a plan groups
//! `job_attempt` by `idem_key` alone, counts `DISTINCT artifact_id` alone, over
//! `WHERE artifact_id IS NOT NULL` alone, it reads `idem_artifacts` instead, under the same output
//! names. Seed 000's duplicates query (q2) has that shape; its text runs unchanged, and
//! `query/tests/sqlite_differential.rs` checks its answers against SQLite's.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Builder, RecordBatch, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{Column, HashMap};
use datafusion::datasource::{TableProvider, provider_as_source};
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder, Projection};
use datafusion::optimizer::AnalyzerRule;

use crate::error::Result;
use crate::job_attempt::{self, BATCH_ROWS};

/// The table's name in SQL.
pub const TABLE: &str = "idem_artifacts";

/// `idem_artifacts`' schema: idem_key Utf8, artifacts Int64 (distinct non-NULL artifact_ids, ≥ 1).
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("idem_key", DataType::Utf8, false),
        Field::new("artifacts", DataType::Int64, false),
    ]))
}

/// One idem_key's distinct artifact_ids: the first, then any others.
struct Key<'a> {
    idem_key: &'a str,
    first: &'a str,
    more: Vec<&'a str>,
}

/// The `idem_artifacts` rows of `attempts` (`job_attempt` batches), one per idem_key that has at
/// least one non-NULL artifact_id, in the order each key first appears, in batches of at most
/// [`BATCH_ROWS`] rows (at least one, possibly empty).
///
/// Errors: a batch without `job_attempt`'s columns ([`crate::Error::Internal`]).
pub fn idem_artifacts(attempts: &[RecordBatch]) -> Result<Vec<RecordBatch>> {
    let rows: usize = attempts.iter().map(RecordBatch::num_rows).sum();
    let mut index: HashMap<&str, usize> = HashMap::with_capacity_and_hasher(rows, Default::default());
    let mut keys: Vec<Key<'_>> = Vec::with_capacity(rows);
    for batch in attempts {
        let column = |name: &str| job_attempt::column(batch, name);
        let idem_key = column("idem_key")?.as_string::<i32>();
        let artifact_id = column("artifact_id")?.as_string::<i32>();
        for i in 0..batch.num_rows() {
            if !artifact_id.is_valid(i) {
                continue;
            }
            let (key, artifact) = (idem_key.value(i), artifact_id.value(i));
            match index.get(key) {
                Some(&k) => {
                    let k = &mut keys[k];
                    if k.first != artifact && !k.more.contains(&artifact) {
                        k.more.push(artifact);
                    }
                }
                None => {
                    index.insert(key, keys.len());
                    keys.push(Key {
                        idem_key: key,
                        first: artifact,
                        more: Vec::new(),
                    });
                }
            }
        }
    }
    drop(index);
    let schema = schema();
    let mut out = Vec::new();
    for chunk in keys.chunks(BATCH_ROWS) {
        let mut idem_key = StringBuilder::with_capacity(chunk.len(), chunk.iter().map(|k| k.idem_key.len()).sum());
        let mut artifacts = Int64Builder::with_capacity(chunk.len());
        for k in chunk {
            idem_key.append_value(k.idem_key);
            artifacts.append_value(1 + k.more.len() as i64);
        }
        let cols: Vec<ArrayRef> = vec![Arc::new(idem_key.finish()), Arc::new(artifacts.finish())];
        out.push(RecordBatch::try_new(schema.clone(), cols).map_err(datafusion::error::DataFusionError::from)?);
    }
    if out.is_empty() {
        out.push(RecordBatch::new_empty(schema));
    }
    Ok(out)
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
