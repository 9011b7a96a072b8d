//! Stopping a statement's plan at every operator.
//!
//! Aborting the task that runs a plan takes effect only when the task gives its thread back, and a
//! CPU-bound operator may not for minutes: an aggregate pulling a cross join's batches gets one
//! ready at every poll, so it never waits. [`checked`] puts a [`StopExec`] above every operator of
//! a physical plan; each checks the statement's stop flag whenever its parent asks for the next
//! batch, and once the flag is up answers an error instead, so the plan unwinds at the next batch
//! any operator asks for (a few milliseconds), dropping its streams and the tasks they spawned.
//!
//! A nested-loop join is the one operator that works long between two batches: it joins each
//! batch of its right input with every row of its left input before it asks for the next, and
//! with a filter that keeps nothing it emits nothing meanwhile. Its right input is cut into
//! batches of [`NESTED_LOOP_PROBE_ROWS`] rows, so the join asks again after that many times its
//! left input's rows. The join stays vectorized: for a small right batch it joins many left rows
//! at once, `batch_size` pairs an evaluation.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{RecordBatchStream, SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::{Stream, StreamExt};

/// The message of the error a stopped plan's operators answer.
pub const STOPPED: &str = "the statement was stopped";

/// Rows of each batch a nested-loop join's right input gives it.
pub const NESTED_LOOP_PROBE_ROWS: usize = 8;

/// Puts a [`StopExec`] checking `stop` above every operator of `plan` (but the work table of a
/// recursive query, which its parent finds by type), and cuts the right input of nested-loop
/// joins into batches of [`NESTED_LOOP_PROBE_ROWS`].
pub fn checked(plan: Arc<dyn ExecutionPlan>, stop: &Arc<AtomicBool>) -> Result<Arc<dyn ExecutionPlan>> {
    use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
    plan.transform_up(|mut node| {
        if node.name() == "WorkTableExec" {
            return Ok(Transformed::no(node));
        }
        if node.name() == "NestedLoopJoinExec"
            && let [left, right] = node.children().as_slice()
        {
            let right = Arc::new(StopExec {
                slice_rows: Some(NESTED_LOOP_PROBE_ROWS),
                ..StopExec::new((*right).clone(), stop.clone())
            });
            let left = (*left).clone();
            node = node.replace_children(
                vec![left, right],
                ReplaceChildrenOptions::new(ChildrenPropertiesMode::Keep),
            )?;
        }
        Ok(Transformed::yes(
            Arc::new(StopExec::new(node, stop.clone())) as Arc<dyn ExecutionPlan>
        ))
    })
    .map(|t| t.data)
}

/// An operator that passes its input's batches through until the statement's stop flag is up.
#[derive(Debug)]
pub struct StopExec {
    input: Arc<dyn ExecutionPlan>,
    stop: Arc<AtomicBool>,
    properties: Arc<PlanProperties>,
    /// Batches longer than this are given in slices of this many rows.
    slice_rows: Option<usize>,
}

impl StopExec {
    /// `input`, checked against `stop`.
    pub fn new(input: Arc<dyn ExecutionPlan>, stop: Arc<AtomicBool>) -> Self {
        let properties = input.properties().clone();
        StopExec {
            input,
            stop,
            properties,
            slice_rows: None,
        }
    }
}

impl DisplayAs for StopExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StopExec")
    }
}

impl ExecutionPlan for StopExec {
    fn name(&self) -> &str {
        "StopExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(self: Arc<Self>, mut children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        if children.len() != 1 {
            return Err(DataFusionError::Internal(format!(
                "StopExec takes one child, not {}",
                children.len()
            )));
        }
        Ok(Arc::new(StopExec {
            slice_rows: self.slice_rows,
            ..StopExec::new(children.swap_remove(0), self.stop.clone())
        }))
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(DataFusionError::Execution(STOPPED.into()));
        }
        Ok(Box::pin(Checked {
            inner: self.input.execute(partition, context)?,
            stop: self.stop.clone(),
            slice_rows: self.slice_rows.unwrap_or(usize::MAX).max(1),
            rest: None,
        }))
    }
}

/// A stream that answers [`STOPPED`] once the flag is up.
struct Checked {
    inner: SendableRecordBatchStream,
    stop: Arc<AtomicBool>,
    slice_rows: usize,
    /// The rows of the last batch not given yet.
    rest: Option<RecordBatch>,
}

impl Checked {
    /// The first `slice_rows` of `batch`, keeping the others for the next poll.
    fn slice(&mut self, batch: RecordBatch) -> RecordBatch {
        if batch.num_rows() <= self.slice_rows {
            return batch;
        }
        self.rest = Some(batch.slice(self.slice_rows, batch.num_rows() - self.slice_rows));
        batch.slice(0, self.slice_rows)
    }
}

impl Stream for Checked {
    type Item = Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.stop.load(Ordering::Relaxed) {
            return Poll::Ready(Some(Err(DataFusionError::Execution(STOPPED.into()))));
        }
        if let Some(rest) = self.rest.take() {
            return Poll::Ready(Some(Ok(self.slice(rest))));
        }
        match self.inner.poll_next_unpin(cx) {
            Poll::Ready(Some(Ok(batch))) => Poll::Ready(Some(Ok(self.slice(batch)))),
            other => other,
        }
    }
}

impl RecordBatchStream for Checked {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use datafusion::prelude::SessionContext;

    use super::*;
    use crate::engine::executor::Executor;

    async fn run_dropped_after(sql: &'static str, after: Duration) -> u64 {
        let exec = Executor::new(2).unwrap();
        let running = exec.run(|stop| async move {
            let ctx = SessionContext::new();
            let df = ctx.sql(sql).await?;
            let task = Arc::new(df.task_ctx());
            let plan = checked(df.create_physical_plan().await?, &stop)?;
            let batches = datafusion::physical_plan::collect(plan, task).await?;
            Ok(batches.len())
        });
        let started = tokio::time::timeout(after, running).await;
        assert!(started.is_err(), "the statement finished within {after:?}");
        assert!(exec.cpu_ticks().unwrap() >= 10, "the statement ran on the SQL threads");
        // Give the SQL threads a second to see the flag (a nested-loop join sees it after one
        // probe batch), then measure a quiet second.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (before, t) = (exec.cpu_ticks().unwrap(), Instant::now());
        tokio::time::sleep(Duration::from_secs(1)).await;
        let used = exec.cpu_ticks().unwrap() - before;
        assert!(t.elapsed() >= Duration::from_secs(1));
        used
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_dropped_cross_join_stops_using_cpu() {
        // 10^10 pairs: hours, and an aggregate over it that never waits for its input.
        let used = run_dropped_after(
            "SELECT count(*) FROM generate_series(1, 100000) a, generate_series(1, 100000) b \
             WHERE a.value + b.value >= 0",
            Duration::from_millis(500),
        )
        .await;
        // 100 ticks a second a core: a plan still running would use 100 to 200.
        assert!(used <= 20, "{used} ticks in the second after the drop");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_dropped_join_whose_filter_keeps_nothing_stops_using_cpu() {
        let used = run_dropped_after(
            "SELECT count(*) FROM generate_series(1, 100000) a, generate_series(1, 100000) b \
             WHERE a.value + b.value < 0",
            Duration::from_millis(500),
        )
        .await;
        assert!(used <= 20, "{used} ticks in the second after the drop");
    }

    #[test]
    fn a_plan_is_checked_at_every_operator() {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let ctx = SessionContext::new();
            let df = ctx
                .sql("SELECT count(*) FROM generate_series(1, 10) a, generate_series(1, 10) b")
                .await
                .unwrap();
            let task = Arc::new(df.task_ctx());
            let plan = df.create_physical_plan().await.unwrap();
            let mut operators = 0;
            plan.apply(|_| {
                operators += 1;
                Ok(TreeNodeRecursion::Continue)
            })
            .unwrap();
            let stop = Arc::new(AtomicBool::new(false));
            let plan = checked(plan, &stop).unwrap();
            let mut checks = 0;
            plan.apply(|n| {
                checks += usize::from(n.name() == "StopExec");
                Ok(TreeNodeRecursion::Continue)
            })
            .unwrap();
            assert_eq!(checks, operators);
            let batches = datafusion::physical_plan::collect(plan.clone(), task.clone())
                .await
                .unwrap();
            let n = batches[0]
                .column(0)
                .as_any()
                .downcast_ref::<datafusion::arrow::array::Int64Array>()
                .unwrap()
                .value(0);
            assert_eq!(n, 100);
            stop.store(true, Ordering::Relaxed);
            let e = datafusion::physical_plan::collect(plan, task).await.unwrap_err();
            assert!(e.to_string().contains(STOPPED), "{e}");
        });
    }
}
